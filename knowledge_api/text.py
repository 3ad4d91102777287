"""Word-level helpers shared by keyword search and the extractive synthesizer."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n{2,}|\n(?=[-*#] )")

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


_IDENTIFIER = re.compile(r"[\w$/.-]*\w")
_CODE_SHAPED = re.compile(
    r"""\w[\w$]*[_$][\w$]*   # store_read_only, KNOWLEDGE_API_HOST, $HOME
    |\$\w+
    |/[A-Za-z][\w./-]*       # a path from the root: /readyz, /v1/knowledge/query
    |\w[\w-]*(?:/[\w.-]+){2,} # a path of three parts or more: knowledge_api/docs/x
    |\w[\w-]*(?:/[\w.-]+)+\.\w+  # a path to a file: docs/api.md
    |\w{2,}(?:\.\w{2,})+      # dotted: knowledge_api.client, settings.py (not e.g., U.S.)
    """,
    re.VERBOSE,
)


def identifiers(text: str) -> list[str]:
    """Words shaped like code, as they stand: a name with an underscore or a dollar sign
    (store_read_only, KNOWLEDGE_API_HOST), a path (/readyz, docs/api.md) or a dotted
    name (knowledge_api.client, settings.py). Words of prose joined by a slash
    (and/or, up/down) or by dots between single letters (e.g., U.S.) are none, and so
    is a word without a letter (1.5, 10/12/2024)."""
    return [
        word
        for word in _IDENTIFIER.findall(text)
        if _CODE_SHAPED.fullmatch(word) and any(c.isalpha() for c in word)
    ]


def content_terms(text: str) -> list[str]:
    """Distinct non-stopword words, in order of first appearance."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)


def stem(word: str) -> str:
    """A light suffix stripper: enough to match 'indexes' with 'indexing'."""
    for suffix in ("ingly", "edly", "ing", "ies", "ied", "es", "ed", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def sentences(text: str) -> list[str]:
    parts = (part.strip() for part in _SENTENCE_END.split(text))
    return [part for part in parts if part]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` as `sentences` cuts it."""
    found = []
    start = 0
    for boundary in [*_SENTENCE_END.finditer(text), None]:
        end = boundary.start() if boundary is not None else len(text)
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            found.append((start + lead, start + len(piece.rstrip())))
        if boundary is not None:
            start = boundary.end()
    return found
