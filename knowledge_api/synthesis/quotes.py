"""Which of the sentences that score close to the best one an answer quotes: each text
once, at most MAX_SENTENCES, and none that leans on a sentence the answer leaves out."""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_SENTENCES = 3


class Candidate(NamedTuple):
    """A sentence as an answer may quote it, one per sentence of every passage an answer
    reads: a tuple, as the search's candidates are, built at half a frozen dataclass's
    cost."""

    score: float
    n: int
    """1-based position of its result."""
    position: int
    """Its place among the result's sentences: reading order."""
    sentence: str


def picked(close: list[Candidate]) -> list[Candidate]:
    """Up to MAX_SENTENCES of `close` (best first), each text once. A sentence that
    refers back ("It answers 503 ...", "Then run ...", "So every answer ...") is quoted
    after the best one only with the sentence before it in its passage: quoted alone, or
    after another passage's sentence, its "it" reads as whatever the answer said last
    ("`KNOWLEDGE_API_INSTANCES` (default 2): how many processes; It starts the app under
    PM2 ..." is a script's doing, not the setting's). It waits until that sentence is
    chosen; one that opens its passage never follows its sentence. The best sentence is
    quoted whatever it opens with: it is the answer, and dropping it would refuse one."""
    chosen: list[Candidate] = []
    waiting: list[Candidate] = []
    for candidate in close:
        if any(same_sentence(candidate.sentence, c.sentence) for c in chosen):
            continue
        waiting.append(candidate)
        ready = [c for c in waiting if not chosen or not refers_back(c) or follows(c, chosen)]
        while ready and len(chosen) < MAX_SENTENCES:
            chosen.append(ready[0])
            waiting.remove(ready[0])
            ready = [c for c in waiting if refers_back(c) and follows(c, chosen)]
        if len(chosen) == MAX_SENTENCES:
            break
    return chosen


_REFERS_BACK = re.compile(r"(?:it|its|they|them|their|then|so|otherwise|instead)\b", re.IGNORECASE)
"""The opening words of a sentence that leans on the one before it. Not "This" or
"These": "This route returns the whole document" names what it speaks of (often its
section's heading), and leaving such a sentence out could leave out the answer."""


def refers_back(candidate: Candidate) -> bool:
    return _REFERS_BACK.match(candidate.sentence.lstrip()) is not None


def follows(candidate: Candidate, chosen: list[Candidate]) -> bool:
    """Whether the sentence before `candidate` in its passage is among `chosen`."""
    return any(c.n == candidate.n and c.position == candidate.position - 1 for c in chosen)


def same_sentence(a: str, b: str) -> bool:
    """The same text found in two passages (a page ingested twice, say)."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()
