"""The sentences of a passage that could answer a question: its prose without the page
furniture that real documentation carries (navigation, "Edit this page", copyright
lines, HTML comments, code, headings alone, fragments of a few words)."""

from __future__ import annotations

import re

from knowledge_api import text

MIN_WORDS = 4
"""Fewer words than this is a fragment (a label, a link), not an answer."""

_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
_FENCE = re.compile(r"^(```|~~~).*?(^\1[^\n]*$|\Z)", re.DOTALL | re.MULTILINE)
_NAVIGATION = re.compile(
    r"^\W*(next|previous|prev|up|home|back to top|top|index|modules|contents|"
    r"table of contents|on this page|edit this page|edit on \w+|view (page )?source|"
    r"show source|skip to (main )?content|navigation|search|quick search|this page|"
    r"report a bug|improve this page|(next|previous|prev) (topic|page|chapter))\W*$"
    r"|^\W*(next|previous|prev|up)( topic| page| chapter)?\s*[:»›→]",
    re.IGNORECASE,
)
_NAV_TOKENS = re.compile(r"[«»←→|]|\b(next|previous|prev|up)\b\s*[:|]", re.IGNORECASE)
_COPYRIGHT = re.compile(r"©|\(c\)\s*\d{4}|\bcopyright\b|all rights reserved", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6}\s|[=\-~^*+#]{3,}\s*$)")
_PROMPT = re.compile(r"^(\$|>>>|\.\.\.|%|#!)\s")
_CODE_CHARS = set("{}[]()<>;=_$\\/|*&")
_QUOTE = re.compile(r"^\s*(>\s)+")
"""Blockquote markers (not a `>>>` prompt)."""
_STATEMENT = re.compile(
    r"^[\w.]+\(.*\)\s*;?$|^[\w.\[\]'\"]+\s*=\s*\S|^(import|from) [\w.]+"
    r"|^(if|for|while|def|class|with|try|elif|else|async|await|return)\b.*:$"
)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def candidate_sentences(passage: str) -> list[str]:
    """The passage's sentences, in order, that are prose."""
    prose = _FENCE.sub("\n\n", _COMMENT.sub(" ", passage))
    lines = (_QUOTE.sub("", line) for line in prose.splitlines())
    lines = (line for line in lines if not boilerplate_line(line))
    return [s for s in text.sentences("\n".join(lines)) if not boilerplate_sentence(s)]


def boilerplate_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    return bool(
        _HEADING.match(stripped)
        or _NAVIGATION.match(stripped)
        or _COPYRIGHT.search(stripped)
        or _PROMPT.match(stripped)
        or code_like(stripped)
        or len(_NAV_TOKENS.findall(stripped)) >= 2
    )


def boilerplate_sentence(sentence: str) -> bool:
    """A fragment, or a heading left alone (a short line with no verb-like ending)."""
    words = text.words(sentence)
    if len(words) < MIN_WORDS or not text.content_terms(sentence):
        return True
    return heading_alone(sentence, words)


def heading_alone(sentence: str, words: list[str]) -> bool:
    """A short title-cased line without a sentence's closing punctuation."""
    stripped = sentence.strip()
    if stripped[-1] in ".!?:;)\"'" or len(words) > 8 or "\n" in stripped:
        return False
    capitalised = [w for w in stripped.split() if w[:1].isalpha()]
    return bool(capitalised) and all(w[0].isupper() for w in capitalised if len(w) > 3)


def code_like(line: str) -> bool:
    """Mostly symbols, or a statement/call rather than words."""
    line = _LINK.sub(r"\1", line).replace("`", "")
    symbols = sum(ch in _CODE_CHARS for ch in line)
    letters = sum(ch.isalpha() for ch in line)
    if letters == 0 or symbols / max(1, len(line)) > 0.2:
        return True
    return bool(_STATEMENT.match(line))
