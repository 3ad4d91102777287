"""Grounding: the citations of an answer and the confidence it deserves.

Citations. An answer cites passages as [n], n counting from 1 in the passages it was
written from. `CitationFilter` sits between a streaming provider and the client: it
holds back a citation until its bracket closes, passes citations of passages that
exist (as [n], one number per bracket) and removes, and records, the others.

Confidence (the weights and levels of the retrieval-agent contract):
- retrieval_quality: the best similarity among the passages the answer was written from;
- coverage_score: the share of the query's content terms found in the cited passages;
- lexical_overlap: the share of the answer's content terms found in the cited passages;
- entailment_score: sentence-level support. Each sentence of the answer is compared
  with every sentence of the passages it cites (all cited passages when it cites none);
  its support is the best cosine similarity of their embeddings, and the score is the
  mean support. Without an embedder, support is the share of the sentence's content
  terms found in those passages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.models import SearchHit

WEIGHTS = {
    "retrieval_quality": 0.35,
    "coverage_score": 0.25,
    "entailment_score": 0.25,
    "lexical_overlap": 0.15,
}
CALIBRATION = (-0.400, 1.856)
"""(a, b) of overall = sigmoid(a + b x raw): the weighted factors mapped to the chance
that the passage an answer cites first answers the question (msmarco grade >= 2),
fitted with `knowledge-api eval --answers` on msmarco-dev: on the 211 answers written
from each retrieved passage alone, not only on the 43 answers to its questions
(docs/answers.md, "Calibration")."""
LEVELS = ((0.9, "high"), (0.6, "medium"), (0.0, "low"))
"""`high` only where answers were right at least 90 % of the time."""

_CITATION = re.compile(r"(\s*)\[(\d+(?:\s*,\s*\d+)*)\]")
_OPEN_TAIL = re.compile(r"\s*(\[[\d,\s]*)?$")
_MARKER = re.compile(r"\s*\[\d+\]")
_TRAILING_CITATIONS = re.compile(r"([.!?]+)((?:\s*\[\d+\])+)")
"""Citations after a sentence's end, moved before all of it: "Europe... [1]" and
"Really?! [2]" cite as "Europe. [1]" does (moved before the last mark only, the
citation became a sentence of its own and the claim cited nothing)."""
MAX_HELD = 24
"""Longest tail held back while waiting for a bracket to close."""
MAX_REPORTED = 999_999
"""A removed citation above this is reported as this: a model may write any digits,
and a response must stay serialisable (JSON integers beyond 64 bits are not)."""

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


class CitationFilter:
    def __init__(self, passages: int) -> None:
        self.passages = passages
        self.cited: set[int] = set()
        self.removed: list[int] = []
        self._held = ""

    def feed(self, piece: str) -> str:
        """What of the text so far can be passed on; an open citation is held back."""
        pending = self._held + piece
        tail = _OPEN_TAIL.search(pending)
        cut = tail.start() if tail and len(pending) - tail.start() <= MAX_HELD else len(pending)
        self._held = pending[cut:]
        return _CITATION.sub(self._check, pending[:cut])

    def finish(self) -> str:
        """The rest, at the end of the answer: an unclosed citation is dropped."""
        rest, self._held = self._held, ""
        return "" if "[" in rest else rest

    def _check(self, match: re.Match[str]) -> str:
        numbers = [int(n) for n in match.group(2).split(",")]
        kept = list(dict.fromkeys(n for n in numbers if 1 <= n <= self.passages))
        self.removed.extend(min(n, MAX_REPORTED) for n in numbers if n not in kept)
        self.cited.update(kept)
        return match.group(1) + "".join(f"[{n}]" for n in kept) if kept else ""


def citations(answer: str) -> list[int]:
    return sorted({int(n) for n in re.findall(r"\[(\d+)\]", answer)})


def strip_citations(answer: str) -> str:
    return _MARKER.sub("", answer).strip()


@dataclass(frozen=True, slots=True)
class Claim:
    """A sentence of an answer and the passages it cites."""

    text: str
    cited: tuple[int, ...]


def claims(answer: str) -> list[Claim]:
    """Sentences with their citations; "Text. [1]" cites [1] for "Text."."""
    found = []
    for sentence in text.sentences(_TRAILING_CITATIONS.sub(r"\2\1", answer)):
        plain = strip_citations(sentence)
        if text.content_terms(plain):
            found.append(Claim(plain, tuple(citations(sentence))))
    return found


@dataclass(frozen=True, slots=True)
class Confidence:
    retrieval_quality: float
    coverage_score: float
    entailment_score: float
    lexical_overlap: float
    entailment_method: str = "none"

    @property
    def raw(self) -> float:
        """The contract's weighted sum of the factors."""
        return float(sum(weight * getattr(self, name) for name, weight in WEIGHTS.items()))

    @property
    def overall(self) -> float:
        """The chance the answer is right, as calibrated; 0 when nothing is cited."""
        if not (self.coverage_score or self.entailment_score or self.lexical_overlap):
            return 0.0
        a, b = CALIBRATION
        return 1.0 / (1.0 + math.exp(-(a + b * self.raw)))

    @property
    def level(self) -> str:
        return next(level for floor, level in LEVELS if self.overall >= floor)

    def view(self) -> dict[str, Any]:
        factors = {name: round(getattr(self, name), 4) for name in WEIGHTS}
        return {
            **factors,
            "overall": round(self.overall, 4),
            "level": self.level,
            "entailment_method": self.entailment_method,
        }


def retrieval_quality(hits: Sequence[SearchHit]) -> float:
    return max((hit.similarity for hit in hits), default=0.0)


def coverage(query: str, cited: Sequence[SearchHit]) -> float:
    return share(stems(query), stems(" ".join(passage_text(hit) for hit in cited)))


def lexical_overlap(answer: str, cited: Sequence[SearchHit]) -> float:
    return share(stems(strip_citations(answer)), stems(" ".join(passage_text(h) for h in cited)))


async def entailment(
    answer_claims: Sequence[Claim], passages: Sequence[SearchHit], embed: Embed | None
) -> tuple[float, str]:
    """(mean support of the claims by the passages they cite, the method used)."""
    cited = {n for claim in answer_claims for n in claim.cited}
    if not answer_claims or not cited:
        return 0.0, "none"
    support_sets = [claim.cited or tuple(sorted(cited)) for claim in answer_claims]
    sentences = {
        n: text.sentences(passages[n - 1].chunk.content) or [passages[n - 1].chunk.content]
        for n in cited
    }
    if embed is None:
        return lexical_support(answer_claims, support_sets, sentences), "term-overlap"
    support = await embedding_support(answer_claims, support_sets, sentences, embed)
    return support, "embedding-similarity"


def lexical_support(
    answer_claims: Sequence[Claim],
    support_sets: Sequence[tuple[int, ...]],
    sentences: dict[int, list[str]],
) -> float:
    scores = [
        share(stems(claim.text), stems(" ".join(s for n in ns for s in sentences[n])))
        for claim, ns in zip(answer_claims, support_sets, strict=True)
    ]
    return float(np.mean(scores))


async def embedding_support(
    answer_claims: Sequence[Claim],
    support_sets: Sequence[tuple[int, ...]],
    sentences: dict[int, list[str]],
    embed: Embed,
) -> float:
    order = sorted(sentences)
    evidence = [s for n in order for s in sentences[n]]
    owner = np.array([n for n in order for _ in sentences[n]])
    vectors = await embed([claim.text for claim in answer_claims] + evidence)
    claim_vectors, evidence_vectors = vectors[: len(answer_claims)], vectors[len(answer_claims) :]
    cosines = np.clip(claim_vectors @ evidence_vectors.T, 0.0, 1.0)
    scores = [float(cosines[i, np.isin(owner, ns)].max()) for i, ns in enumerate(support_sets)]
    return float(np.mean(scores))


def passage_text(hit: SearchHit) -> str:
    return f"{hit.chunk.title} {hit.chunk.section} {hit.chunk.content}"


def stems(passage: str) -> set[str]:
    return {text.stem(term) for term in text.content_terms(passage)}


def share(wanted: set[str], found: set[str]) -> float:
    return len(wanted & found) / len(wanted) if wanted else 0.0
