"""The words behind every citation of an answer: for each marker [n], the text of
passage n that supports the sentence it ends, located in the passage, in the stored
document and in the answer.

The sentence of a marker runs from the sentence boundary before it through the last
marker of its group ("Deploys run at 09:00 [1][2]": both markers cite that sentence).
Its support in passage n is found in three steps, the first that holds wins:
- quoted: the sentence (an extractive answer's, with its whitespace collapsed and a
  shortened one's "…" left out) reads as it is in the passage;
- aligned: the passage holds the sentence's words in order, a few others between them
  (at least `ALIGNED` of them, found by rapidfuzz's longest common subsequence of
  words): the quote an extractive answer made of a line of Markdown (a link's text
  without its address, bold and list markers left out);
- best sentence: for a written answer, the sentence of the passage, or two in a row,
  whose words the answer's sentence shares most (rapidfuzz's token set ratio), when it
  reaches `SUPPORT_FLOOR`; below it the citation is unsupported (`quote: null`).

The quote is always the document's stored text at its `document` span; `passage` is
where it reads in the chunk's content (respaced by the chunker), and both are found
through the chunk's recorded offsets (`Chunk.start`), or by looking for the passage in
the document when a chunk has none. A store that keeps no document text by id (tables
other pipelines fill) gives the passage's words and no `document` span.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from rapidfuzz import fuzz, process
from rapidfuzz.distance import Indel
from rapidfuzz.utils import default_process

from knowledge_api import spans, text
from knowledge_api.models import Evidence, SearchHit, Span

_MARKER = re.compile(r"\[(\d+)\]")
_GROUP = re.compile(r"(?:[ \t]*\[\d+\])+")
_BOUNDARY = re.compile(r"[.!?…][\"')\]*_`]*\s+|\n\s*")
_WORD = re.compile(r"\w")
_WORDS = re.compile(r"\w+")
_ELLIPSIS = " …"
_JOINING = ",;:.!?)]}—–-|"
"""Marks that join a sentence to the one before (", and ..."), not a part of it."""
_CLOSING = ".!?…\"')]”’»"
"""Marks that close a sentence after its last word."""

ALIGNED = 0.9
"""The share of the sentence's words a stretch of the passage must hold, in order, to
be its quote: of the sentences the extractive synthesizer quotes from the bundled docs
that do not read as they are in their passage (links, bold), 77 of 88 reach it; the
others quote a line of code after the sentence, and their sentence is found as the
best one (tests/test_evidence.py)."""
GAP = 8
"""Passage words between two aligned runs that still keep them one stretch (a link's
address, a list marker)."""
SUPPORT_FLOOR = 70.0
"""Token set ratio (0-100) a passage sentence needs to support the answer's sentence:
sentences written about the product notes score 81-100 against the sentences they
restate, and 41-58 against the best sentence of a note about something else
(tests/test_evidence.py)."""


@dataclass(frozen=True, slots=True)
class Marked:
    """A group of markers and the sentence they cite."""

    numbers: tuple[int, ...]
    claim: str
    span: Span
    """The sentence through the group's last marker, in the answer."""


def marked(answer: str) -> list[Marked]:
    """The answer's marker groups in order, each with its sentence; a group with no
    words of its own before it ("... 09:00 [1]. [2]") cites the sentence before."""
    found: list[Marked] = []
    previous = 0
    for group in _GROUP.finditer(answer):
        numbers = tuple(int(n) for n in _MARKER.findall(group.group()))
        head = answer[previous : group.start()].rstrip()
        start = previous + sentence_start(head)
        claim = answer[start : previous + len(head)]
        if not _WORD.search(claim) and found:
            start, claim = found[-1].span[0], found[-1].claim
        found.append(Marked(numbers, claim, (start, group.end())))
        previous = group.end()
    return found


def sentence_start(head: str) -> int:
    """Where the last sentence of `head` begins (its own end mark aside, and a last
    piece without a word, such as a table's `|`, belonging to it), past the
    punctuation that joins it to the one before (", and ...")."""
    body = head.rstrip(".!?…:;, ")
    start = 0
    for boundary in _BOUNDARY.finditer(body):
        if _WORD.search(body, boundary.end()):
            start = boundary.end()
    while start < len(head) and (head[start].isspace() or head[start] in _JOINING):
        start += 1
    return start


def cite(
    answer: str, passages: Sequence[SearchHit], documents: Mapping[str, str]
) -> tuple[Evidence, ...]:
    """One Evidence per marker occurrence of `answer` citing one of `passages` ([n] is
    passages[n - 1]); `documents` holds the stored text of each passage's document."""
    found: list[Evidence] = []
    for group in marked(answer):
        answer_utf16 = (spans.utf16(answer, group.span[0]), spans.utf16(answer, group.span[1]))
        for n in group.numbers:
            if not 1 <= n <= len(passages):
                continue
            hit = passages[n - 1]
            base = Evidence(n, hit.chunk.id, hit.document_id, group.span, answer_utf16)
            found.append(evidence(base, group.claim, hit, documents.get(hit.document_id)))
    return tuple(found)


def evidence(base: Evidence, claim: str, hit: SearchHit, document: str | None) -> Evidence:
    """`base` with its quote and places, when the passage supports `claim`. Without the
    document's text (a database other pipelines fill keeps none by id) the quote is the
    passage's, and `document` is left out."""
    content = hit.chunk.content
    supported = support(claim, content)
    if supported is None:
        return base
    (start, end), score = supported
    placed = in_document(hit, document, start, end)
    whole = content if placed is None or document is None else document
    quote = content[start:end] if placed is None else whole[placed[0] : placed[1]]
    return Evidence(
        base.n,
        base.chunk_id,
        base.document_id,
        base.answer,
        base.answer_utf16,
        quote=quote,
        passage=(start, end),
        passage_utf16=(spans.utf16(content, start), spans.utf16(content, end)),
        document=placed,
        document_utf16=None
        if placed is None
        else (spans.utf16(whole, placed[0]), spans.utf16(whole, placed[1])),
        support=round(score / 100, 4),
    )


def support(claim: str, content: str) -> tuple[Span, float] | None:
    """The span of `content` that supports `claim`, and how closely (0-100)."""
    wanted = claim.removesuffix(_ELLIPSIS).removesuffix("…").strip()
    if not _WORD.search(wanted):
        return None
    quoted = spans.Squeezed(content).find(wanted)
    if quoted is not None:
        return closed(content, *quoted), 100.0
    found = aligned(wanted, content)
    if found is not None and found[1] >= ALIGNED:
        return found[0], round(found[1] * 100, 2)
    return best_sentences(wanted, content)


def aligned(claim: str, content: str) -> tuple[Span, float] | None:
    """The stretch of `content` holding most of `claim`'s words in order (runs of
    aligned words at most GAP words apart), widened to the marks around its first and
    last word (`**`, a backtick, a closing period), and the share of the words held."""
    asked = [word.casefold() for word in _WORDS.findall(claim)]
    words = list(_WORDS.finditer(content))
    if not asked or not words:
        return None
    blocks = Indel.opcodes(asked, [w.group().casefold() for w in words]).as_matching_blocks()
    best: tuple[int, int, int] | None = None
    run: tuple[int, int, int] | None = None
    for block in blocks:
        if not block.size:
            continue
        if run is not None and block.b - run[1] <= GAP:
            run = (run[0], block.b + block.size, run[2] + block.size)
        else:
            run = (block.b, block.b + block.size, block.size)
        if best is None or run[2] > best[2]:
            best = run
    if best is None:
        return None
    start, end = words[best[0]].start(), words[best[1] - 1].end()
    while start > 0 and not content[start - 1].isspace():
        start -= 1
    while end < len(content) and not content[end].isspace():
        end += 1
    return (start, end), best[2] / len(asked)


def closed(content: str, start: int, end: int) -> Span:
    """The span with the marks that close its sentence in the passage (a written
    answer puts its marker before the period: "... is the cache key [1].")."""
    while end < len(content) and content[end] in _CLOSING:
        end += 1
    return start, end


def best_sentences(claim: str, content: str) -> tuple[Span, float] | None:
    """The sentence of `content` (or two in a row) sharing most of `claim`'s words, if
    it reaches SUPPORT_FLOOR."""
    sentences = text.sentence_spans(content)
    windows = sentences + [(first[0], second[1]) for first, second in pairwise(sentences)]
    best = process.extractOne(
        claim,
        [content[start:end] for start, end in windows],
        scorer=fuzz.token_set_ratio,
        processor=default_process,
        score_cutoff=SUPPORT_FLOOR,
    )
    return None if best is None else (windows[best[2]], float(best[1]))


def in_document(hit: SearchHit, document: str | None, start: int, end: int) -> Span | None:
    """Where content[start:end] of the hit's chunk reads in its document's text: within
    the chunk's recorded place, else anywhere in the document."""
    if document is None:
        return None
    chunk = hit.chunk
    if chunk.start is not None and chunk.end is not None:
        window = document[chunk.start : chunk.end]
        found = spans.carried(chunk.content, window, start, end)
        if found is not None:
            return found[0] + chunk.start, found[1] + chunk.start
    return spans.Squeezed(document).find(chunk.content[start:end])
