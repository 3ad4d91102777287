"""KnowledgeService: the engine every use case goes through.

It owns the seams (store, embedder, reranker, synthesis chain, caches) and offers the
steps the use cases are made of: retrieve (embed through tier 2, search, rerank), write
an answer from passages, keep values in tier 1, ingest and read documents, report
health. It returns domain values; nothing here knows HTTP or which backend runs.

This module is the query pipeline; what the service holds is engine.py, and its other
concerns have a module each (trail.py, catalog.py, startup.py, health.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from knowledge_api import tracing
from knowledge_api.cache.base import COMPUTED, Event, Served
from knowledge_api.errors import EmbeddingError
from knowledge_api.filters import as_json
from knowledge_api.health import Health
from knowledge_api.ledger import Answered
from knowledge_api.models import (
    Outcome,
    SearchFilters,
    SearchHit,
    SearchMode,
    SearchParams,
    normalize_query,
)
from knowledge_api.routing import Centroids, Route, learn_centroids, route
from knowledge_api.startup import Startup
from knowledge_api.timing import elapsed_ms, ms

__all__ = [
    "COMPUTED",
    "Event",
    "KnowledgeService",
    "Plan",
    "Retrieval",
    "Served",
]
log = logging.getLogger("knowledge_api")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Plan:
    """A query made ready to search: its vector, and where to look."""

    vector: np.ndarray | None
    filters: SearchFilters
    embedding_ms: float
    warnings: list[str]
    routed: tuple[str, ...] | None = None
    """The sources searched when routing decided (or the request named them); None
    when routing was not asked for."""

    def only(self, source: str) -> Plan:
        """The same query, searched in one source."""
        return replace(self, filters=replace(self.filters, source_types=(source,)))


@dataclass(frozen=True, slots=True)
class Retrieval:
    hits: list[SearchHit]
    vector: np.ndarray | None
    embedding_ms: float
    search_ms: float
    warnings: list[str]
    rerank_ms: float | None = None
    """Time the reranker took; None when no reranker ran."""
    routed: tuple[str, ...] | None = None
    """The sources searched, when routing was asked for (see Plan.routed)."""

    def timings(self) -> dict[str, float]:
        """embedding_ms, search_ms and, when a reranker ran, rerank_ms."""
        timings = {"embedding_ms": self.embedding_ms, "search_ms": self.search_ms}
        if self.rerank_ms is not None:
            timings["rerank_ms"] = self.rerank_ms
        return timings


class KnowledgeService(Startup, Health):
    """The query pipeline over what the service holds (engine.py): retrieve, route,
    keep values in tier 1, write answers from passages, record what was answered."""

    # -- retrieval ------------------------------------------------------------------

    async def retrieve(
        self,
        query: str,
        limit: int,
        filters: SearchFilters,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        rerank: bool = True,
        route: bool = False,
    ) -> Retrieval:
        """Embed (through tier 2), search, rerank: the step every use case shares.
        `route=True` lets semantic routing (KNOWLEDGE_ROUTING) skip sources the query
        does not need, when the request names none."""
        plan = await self.plan(query, filters, route)
        return await self.search(plan, query, limit, threshold, mode, rerank)

    async def plan(self, query: str, filters: SearchFilters, route: bool = False) -> Plan:
        """The query's vector (through tier 2) and the sources to search."""
        warnings: list[str] = []
        start = time.perf_counter()
        vector = await self._query_vector(normalize_query(query), warnings)
        embedding_ms = elapsed_ms(start)
        if not route or self.settings.routing != "on":
            return Plan(vector, filters, embedding_ms, warnings)
        if filters.source_types is not None:  # the request's own choice always wins
            return Plan(vector, filters, embedding_ms, warnings, filters.source_types)
        decided = await self.route(query, vector, filters.collection)
        routed = replace(filters, source_types=decided.sources)
        return Plan(vector, routed, embedding_ms, warnings, decided.searched)

    async def search(
        self,
        plan: Plan,
        query: str,
        limit: int,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        rerank: bool = True,
    ) -> Retrieval:
        """Search as planned, then rerank.

        The reranker (KNOWLEDGE_RERANKER) orders the first KNOWLEDGE_RERANK_TOP hits of
        a hybrid search, so the store is asked for at least that many and the reranked
        list is cut to `limit` afterwards. The single-retriever modes are not reranked:
        they are the baselines a hybrid ranking is measured against. `rerank=False`
        measures the fused order alone (evaluation)."""
        reranking = rerank and mode == "hybrid" and self.reranker.name != "none"
        depth = max(limit, self.settings.rerank_top) if reranking else limit
        started = time.perf_counter()
        with tracing.span("knowledge.search", self._search_attributes(plan, query, mode)) as span:
            hits = await self.store.search(query, plan.vector, depth, plan.filters, threshold, mode)
            span.set_attribute("knowledge.search.hits", len(hits))
        searched = time.perf_counter() - started
        self.observer.search(searched)
        found = Retrieval(
            hits,
            plan.vector,
            plan.embedding_ms,
            ms(searched),
            list(plan.warnings),
            None,
            plan.routed,
        )
        return await self._reranked(query, found, limit) if reranking else found

    def _search_attributes(self, plan: Plan, query: str, mode: SearchMode) -> dict[str, Any]:
        if not tracing.recording():
            return {}
        return {
            "knowledge.search.mode": mode,
            "db.collection.name": plan.filters.collection,
            "knowledge.search.sources": list(plan.filters.source_types or ("all",)),
            **tracing.query_attributes(query),
        }

    async def served(
        self, key: Hashable, compute: Callable[[], Awaitable[tuple[T, bool]]], collection: str
    ) -> Served[T]:
        """`key`'s value from tier 1 (kept under `collection`'s generation), or computed
        (once for identical concurrent requests), in the tier-1 span."""
        with tracing.span("knowledge.cache", {"knowledge.cache.tier": 1}) as span:
            served = await self.tier1.served(key, compute, collection)
            span.set_attribute("knowledge.cache.hit", served.cache_hit)
        return served

    # -- routing --------------------------------------------------------------------

    async def route(self, query: str, vector: np.ndarray | None, collection: str) -> Route:
        """The sources `query` needs in `collection`. The collection's centroids are
        learned again in the background when the store changed; until they are, the
        last ones are used (none at first: every source is searched)."""
        known = self.centroids.get(collection)
        if known is None or known.generation != await self.store.generation():
            self._learn_in_background(collection)
        return route(query, vector, known, self.settings.routing_margin)

    def _learn_in_background(self, collection: str) -> None:
        learning = self._learning.get(collection)
        if learning is None or learning.done():
            self._learning[collection] = asyncio.create_task(self.learn_routes(collection))

    async def learn_routes(self, collection: str) -> Centroids:
        """The collection's source centroids, learned again if the store changed since."""
        generation = await self.store.generation()
        known = self.centroids.get(collection)
        if known is None or known.generation != generation:
            known = await learn_centroids(generation, self.store.iter_documents(collection))
            self.centroids[collection] = known
        return known

    async def _reranked(self, query: str, found: Retrieval, limit: int) -> Retrieval:
        started = time.perf_counter()
        attributes = {
            "knowledge.rerank.provider": self.reranker.name,
            "knowledge.rerank.hits": len(found.hits),
        }
        with tracing.span("knowledge.rerank", attributes) as span:
            reranked = await self.reranker.rerank(query, found.hits, self.settings.rerank_top)
            if reranked.warnings:
                span.set_attribute("knowledge.rerank.warnings", list(reranked.warnings))
        return replace(
            found,
            hits=reranked.hits[:limit],
            warnings=found.warnings + reranked.warnings,
            rerank_ms=elapsed_ms(started),
        )

    async def _query_vector(self, normalized: str, warnings: list[str]) -> np.ndarray | None:
        if not self.embedder_ready:
            warnings.append("embedder unavailable: results ranked by keyword relevance only")
            return None

        async def compute() -> tuple[np.ndarray, bool]:
            start = time.perf_counter()
            with tracing.span("knowledge.embed", self._embed_attributes("query")) as span:
                vector = await self.query_batcher.embed(normalized)
                if (size := self._batch_sizes.pop(normalized, None)) is not None:
                    span.set_attribute("knowledge.embed.batch_size", size)
            self.observer.embedding("query", time.perf_counter() - start)
            return vector, True

        try:
            vector: np.ndarray
            vector, _ = await self.caches.embeddings.get_or_compute(normalized, compute)
        except EmbeddingError as e:
            warnings.append(f"embedding failed ({e.message}): keyword relevance only")
            return None
        return vector

    def forget_query_embeddings(self) -> None:
        """Empty tier 2, so the next queries are embedded again (latency measurements)."""
        self.caches.embeddings.clear()

    # -- answers from passages -------------------------------------------------------

    def synthesis_events(
        self, query: str, hits: Sequence[SearchHit]
    ) -> AsyncGenerator[Event, None]:
        """The chain's events: ("delta", text) as text arrives, ("reset", why) when a
        link failed mid-answer, then ("done", Outcome)."""
        return self.synthesizer.stream(query, hits)

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Outcome:
        """The chain's answer, whole."""
        async with aclosing(self.synthesis_events(query, hits)) as events:
            async for name, data in events:
                if name == "done":
                    outcome: Outcome = data
                    return outcome
        raise RuntimeError("the synthesis chain ended without an outcome")

    # -- answers and their ratings -----------------------------------------------------

    async def answered(
        self,
        kind: str,
        params: SearchParams,
        hits: Sequence[SearchHit],
        cited: Sequence[int] = (),
    ) -> str:
        """A new query_id for a query or answer just computed, recorded with the query,
        the ranking that ran and its results, so a rating of it can be judged later
        (`knowledge-api eval --feedback`). A record that cannot be written is logged;
        the answer is served all the same."""
        query_id = str(uuid.uuid4())
        answered = Answered(
            query_id,
            kind,
            params.collection,
            params.query,
            self.ranking(params),
            [
                {
                    "id": hit.chunk.id,
                    "document_id": hit.document_id,
                    "source_type": hit.source_type,
                    "source_id": hit.source_id,
                }
                for hit in hits
            ],
            list(cited),
        )
        # written beside the answer, not before it: a miss does not wait for the write
        recording = asyncio.create_task(self._record(answered))
        self._recording[query_id] = recording
        recording.add_done_callback(lambda _: self._recording.pop(query_id, None))
        return query_id

    def ranking(self, params: SearchParams) -> dict[str, Any]:
        """What ranked a query: the request's own choices and the settings that order
        results, so a rating says which ranking it judged."""
        s = self.settings
        return {
            "embedder": self.embedder.name,
            "fusion": s.fusion,
            "vector_weight": s.vector_weight,
            "feedback_docs": s.feedback_docs,
            "reranker": self.reranker.name,
            "limit": params.limit,
            "threshold": params.threshold,
            "sources": list(params.sources) if params.sources else None,
            "filters": as_json(params.filters),
        }
