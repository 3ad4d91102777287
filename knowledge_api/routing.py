"""Semantic routing: which source types a query needs searched, decided before searching.

Two cheap signals, both from the query alone:
- cue words that name a source ("commit", "ticket", "e-mail", ...): the query says
  where its answer lives;
- the cosine between the query vector and each source's centroid (the normalised mean
  of that source's chunk vectors, learned from the stored data and recomputed when the
  store's generation changes). Dividing instead by how close the source's own chunks
  are to it (so a source of varied passages is not passed over) was tried and lost
  more answers on the dev set at every margin: see docs/retrieval.md.

The rule is conservative, because a dropped source can never supply a result: every
source whose centroid is within `margin` of the best one is searched, and a cued
source is searched even when its centroid is further. A cue only ever adds: on the
dev set, a cue word in a question about another source ("how is git history
ingested", asked of the docs) cost more than the narrowing it allowed. Without a query
vector a cue is all there is, and it narrows. A collection with fewer than two
sources, or no centroids yet, is searched whole.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field

import numpy as np

from knowledge_api.models import SOURCE_TYPES, Document

CUES: dict[str, frozenset[str]] = {
    "git": frozenset(
        {"commit", "commits", "committed", "git", "diff", "merged", "revert", "reverted"}
    ),
    "jira": frozenset({"ticket", "tickets", "jira", "epic", "sprint", "backlog"}),
    "email": frozenset({"email", "e-mail", "emails", "mail", "mailed", "inbox"}),
    "metrics": frozenset({"metric", "metrics", "dashboard", "p95", "p99", "kpi"}),
    "wiki": frozenset({"wiki"}),
    "knowledge": frozenset({"kb", "runbook"}),
    "chat": frozenset({"slack", "chat", "chatted"}),
}
"""Words that name where an answer lives; each chosen so it rarely appears otherwise."""
WORD = re.compile(r"[a-z0-9][a-z0-9-]*")


def cued_sources(query: str) -> frozenset[str]:
    """The sources the query's words name."""
    words = set(WORD.findall(query.casefold()))
    return frozenset(source for source, cues in CUES.items() if words & cues)


@dataclass(frozen=True, slots=True)
class Centroids:
    """Each source's centroid in one collection, at one generation."""

    generation: Hashable
    sources: tuple[str, ...]
    matrix: np.ndarray
    """One row per source, in `sources` order: its mean unit chunk vector, normalised."""

    def cosines(self, vector: np.ndarray) -> dict[str, float]:
        scores = self.matrix @ vector
        return dict(zip(self.sources, scores.tolist(), strict=True))


async def learn_centroids(generation: Hashable, documents: AsyncIterator[Document]) -> Centroids:
    """The centroids of the documents' chunk vectors, by source type."""
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    async for document in documents:
        for chunk in document.chunks:
            if chunk.embedding is None:
                continue
            vector = np.asarray(chunk.embedding, dtype=np.float32)
            vector = vector / (np.linalg.norm(vector) or 1.0)
            total = sums.get(document.source_type)
            sums[document.source_type] = vector.copy() if total is None else total + vector
            counts[document.source_type] = counts.get(document.source_type, 0) + 1
    sources = tuple(sorted(sums))
    means = [sums[s] / counts[s] for s in sources]
    rows = [mean / (float(np.linalg.norm(mean)) or 1.0) for mean in means]
    matrix = np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
    return Centroids(generation, sources, matrix)


@dataclass(frozen=True, slots=True)
class Route:
    """The sources to search and why."""

    sources: tuple[str, ...] | None
    """The search's source filter: None when every source is searched."""
    searched: tuple[str, ...] = SOURCE_TYPES
    """The sources searched, by name."""
    cued: tuple[str, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)
    """The query's cosine to each source's centroid."""


def route(
    query: str, vector: np.ndarray | None, centroids: Centroids | None, margin: float
) -> Route:
    """The sources the query needs, among those the collection holds."""
    if centroids is None or len(centroids.sources) < 2:
        return Route(None)
    held = set(centroids.sources)
    cued = cued_sources(query) & held
    if vector is None:  # no meaning to compare: only an explicit cue narrows
        if not cued:
            return Route(None, centroids.sources)
        return Route(tuple(sorted(cued)), tuple(sorted(cued)), tuple(sorted(cued)))
    scores = centroids.cosines(vector)
    best = max(scores.values())
    kept = set(cued) | {s for s, score in scores.items() if score >= best - margin}
    searched = tuple(sorted(kept))
    return Route(None if kept == held else searched, searched, tuple(sorted(cued)), scores)
