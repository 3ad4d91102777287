"""Fusion of ranked candidate lists: the one place where hybrid ranking is decided.

The default is a convex combination of scores rather than of ranks: a retriever
that knows little about a query gives its candidates scores close together, so it
moves the fused order little, where reciprocal-rank fusion would give its first hit
the same pull as the other list's first hit whatever the evidence behind it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import itemgetter
from typing import ClassVar, NamedTuple, TypeVar

import numpy as np

from knowledge_api import text
from knowledge_api.models import Ranking
from knowledge_api.registry import FromSettings
from knowledge_api.settings import Settings

K = TypeVar("K", bound=Hashable)
SCORE = itemgetter(1)
"""The score of a (key, score) pair: a fused ranking sorts a hundred or more by it, and
a lambda for each cost a search as much as the rest of its fusion."""


"""How hybrid search merges its two lists (KNOWLEDGE_FUSION)."""


class Candidate(NamedTuple):
    """One hit of one retriever: its key and its score, higher is better (a tuple: a
    search builds a hundred of them, and a frozen dataclass costs twice the time)."""

    key: Hashable
    score: float


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Keys of every ranking, best first, scored sum(weight / (k + rank)), rank from 1.

    Ties keep the order in which keys were first seen, so the first ranking breaks them.
    """
    weights = weights or [1.0] * len(rankings)
    scores: dict[K, float] = {}
    score = scores.get
    for ranking, weight in zip(rankings, weights, strict=True):
        for k_plus_rank, key in enumerate(ranking, start=k + 1):
            scores[key] = score(key, 0.0) + weight / k_plus_rank
    return sorted(scores.items(), key=SCORE, reverse=True)


@dataclass(frozen=True, slots=True)
class SearchTuning(FromSettings):
    """How hybrid search ranks, one value each, from the KNOWLEDGE_* settings that
    declare them (and their defaults)."""

    fusion_k: int
    """k of reciprocal-rank fusion: higher flattens the weight of rank."""
    candidates: int
    """Hits each ranking (vector, keyword) hands to fusion, at least the limit asked for."""
    feedback_docs: int
    """Top fused hits whose vectors move the query (pseudo-relevance feedback); 0 = off."""
    feedback_weight: float
    """How far the query moves toward the mean vector of those hits."""
    feedback_rank_weight: float
    """Weight of the feedback ranking against the first fused ranking in the final fusion."""
    fusion: str
    """convex: weighted sum of cosine and relative keyword score; rrf: reciprocal ranks."""
    vector_weight: float
    """Share of the cosine in convex fusion; the keyword score has the rest."""

    settings_fields: ClassVar[str] = (
        "fusion_k candidates feedback_docs feedback_weight feedback_rank_weight "
        "fusion vector_weight"
    )

    def adjusted(self, ranking: Ranking, query: str = "") -> SearchTuning:
        """This tuning with a request's own choices: its fusion, vector weight (else the
        setting's, at most IDENTIFIER_VECTOR_WEIGHT when `query` holds a word shaped
        like code) and whether the feedback round runs (with KNOWLEDGE_FEEDBACK_DOCS
        hits, or FEEDBACK_DOCS when the setting turned it off)."""
        choices = (ranking.fusion, ranking.vector_weight, ranking.prf)
        if choices == (None, None, None) and not code_shaped(query):
            return self  # nothing of its own: asked three times a search
        feedback = self.feedback_docs
        if ranking.prf is not None:
            feedback = (self.feedback_docs or FEEDBACK_DOCS) if ranking.prf else 0
        vector_weight = ranking.vector_weight
        if vector_weight is None:
            vector_weight = self.vector_weight
            if code_shaped(query):
                vector_weight = min(vector_weight, IDENTIFIER_VECTOR_WEIGHT)
        return replace(
            self,
            fusion=ranking.fusion or self.fusion,
            vector_weight=vector_weight,
            feedback_docs=feedback,
        )


@lru_cache(maxsize=1024)
def code_shaped(query: str) -> bool:
    """Whether `query` holds a word shaped like code (text.identifiers), remembered for
    the last queries: a request's search and its record each ask it of the same text."""
    return bool(text.identifiers(query))


FEEDBACK_DOCS = 3
"""Hits of a feedback round a request asks for when KNOWLEDGE_FEEDBACK_DOCS is 0."""
IDENTIFIER_VECTOR_WEIGHT = 0.5
"""The cosine's share in convex fusion, at most, for a query holding a word shaped like
code (text.identifiers: source_type, KNOWLEDGE_API_HOST, /readyz, settings.py). Such a
word names one thing exactly, and the keyword list matches it as written, where an
embedding model reads it as a few subword pieces of common words: a passage that holds
the name is found first by keywords and kept down by a middling cosine (a long passage
that mentions the name once among other things). Even shares let that exact match
count; queries of prose, which hold no such word, keep the setting's share."""


DEFAULT_TUNING = SearchTuning.from_settings(Settings())


def cosine_to_similarity(cosine: float) -> float:
    """Similarity 0-1: opposite and unrelated passages are both simply 0."""
    return 0.0 if cosine < 0.0 else 1.0 if cosine > 1.0 else cosine


def clipped(found: Iterable[tuple[Hashable, float]]) -> Iterator[tuple[Hashable, float]]:
    """(key, cosine) pairs as (key, `cosine_to_similarity`), written out in place: a
    search clips a hundred cosines or more, and a call for each cost as much as the rest
    of building its list."""
    return ((key, 0.0 if c < 0.0 else 1.0 if c > 1.0 else c) for key, c in found)


def similar_candidates(found: Iterable[tuple[Hashable, float]]) -> list[Candidate]:
    """(key, cosine) pairs as candidates scored by `cosine_to_similarity`. Made as
    `Candidate._make` makes them, without its check of their length: a pair is two."""
    return [_candidate(Candidate, pair) for pair in clipped(found)]


_candidate = tuple.__new__


def similarities_of(found: Iterable[tuple[Hashable, float]]) -> dict[Hashable, float]:
    """(key, cosine) pairs as `cosine_to_similarity` of each by key (no candidates made)."""
    return dict(clipped(found))


def relative_scores(candidates: Sequence[Candidate]) -> dict[Hashable, float]:
    """Keyword scores over the best one (0-1; 0 when none is positive): every backend's
    keyword scale, and every query's, on one range."""
    best = max([score for _, score in candidates], default=0.0)
    if not best > 0:
        return dict.fromkeys([key for key, _ in candidates], 0.0)
    # max() only where it can change the score: a call for each cost more than the rest
    return {key: (s if s > 0.0 else max(s, 0.0)) / best for key, s in candidates}


def convex_fusion(
    by_vector: Sequence[Candidate],
    by_keyword: Sequence[Candidate],
    similarity: Mapping[Hashable, float],
    vector_weight: float,
) -> list[tuple[Hashable, float]]:
    """Keys of both lists, best first, scored vector_weight x similarity (the cosine,
    0-1, of every key) + (1 - vector_weight) x keyword score over the best keyword score.

    The cosine keeps its absolute scale: when the query vector says little (cosines
    low and close together) the keyword order decides, and when the keyword list
    holds passages far from the query's meaning their cosine holds them down. Ties
    keep the vector order.
    """
    keyword = relative_scores(by_keyword)
    keys = dict.fromkeys([c.key for c in by_vector] + [c.key for c in by_keyword])
    keyword_weight = 1 - vector_weight
    cosine, relative = similarity.get, keyword.get
    scores = {
        key: vector_weight * cosine(key, 0.0) + keyword_weight * relative(key, 0.0) for key in keys
    }
    return sorted(scores.items(), key=SCORE, reverse=True)


def feedback_vector(query: np.ndarray, seeds: Sequence[np.ndarray], weight: float) -> np.ndarray:
    """Rocchio's update, unit length: the query plus `weight` x the mean of the seeds.

    The best hybrid hits are nearly always relevant, so their vectors say what the
    query means in this corpus better than the short query alone: on the MS MARCO
    development set this lifts standard nDCG@10 from 0.79 (fusion alone) to 0.82.
    """
    # the mean as np.mean takes it (the sum, then over their number), without its checks
    moved = np.asarray(query, dtype=np.float32) + weight * (np.add.reduce(seeds) / len(seeds))
    norm = float(np.linalg.norm(moved))
    result: np.ndarray = moved / norm if norm > 0 else np.asarray(query, dtype=np.float32)
    return result
