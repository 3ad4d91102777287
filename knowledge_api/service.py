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
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from knowledge_api import evidence, tracing
from knowledge_api.cache.base import COMPUTED, Event, Served
from knowledge_api.errors import (
    EmbeddingError,
    InvalidRequest,
)
from knowledge_api.facets import Facets
from knowledge_api.health import Health
from knowledge_api.models import (
    SETTINGS_RANKING,
    Evidence,
    Outcome,
    Ranking,
    SearchFilters,
    SearchHit,
    SearchMode,
    normalize_query,
)
from knowledge_api.ranking import DEEPEST, by_recency
from knowledge_api.routing import Centroids, Route, learn_centroids, route
from knowledge_api.startup import Startup
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer
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
    more: bool = False
    """Whether results follow this page."""
    ranking: dict[str, Any] = field(default_factory=dict)
    """The ranking that ran (KnowledgeService.ranking_ran)."""

    def timings(self) -> dict[str, float]:
        """embedding_ms, search_ms and, when a reranker ran, rerank_ms."""
        timings = {"embedding_ms": self.embedding_ms, "search_ms": self.search_ms}
        if self.rerank_ms is not None:
            timings["rerank_ms"] = self.rerank_ms
        return timings


class KnowledgeService(Startup, Health):
    """The query pipeline over what the service holds (engine.py): retrieve, route,
    keep values in tier 1, write answers from passages (trail.py records them)."""

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
        ranking: Ranking = SETTINGS_RANKING,
        offset: int = 0,
    ) -> Retrieval:
        """Embed (through tier 2), search, rerank: the step every use case shares.
        `route=True` lets semantic routing (KNOWLEDGE_ROUTING) skip sources the query
        does not need, when the request names none."""
        plan = await self.plan(query, filters, route)
        return await self.search(plan, query, limit, threshold, mode, rerank, ranking, offset)

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
        ranking: Ranking = SETTINGS_RANKING,
        offset: int = 0,
    ) -> Retrieval:
        """Search as planned, rerank, order by recency when asked, and cut the page of
        `limit` results from `offset`.

        The reranker (KNOWLEDGE_RERANKER) orders the first KNOWLEDGE_RERANK_TOP hits of
        a hybrid search, so the store is asked for at least that many. The
        single-retriever modes are not reranked: they are the baselines a hybrid ranking
        is measured against. `rerank=False` measures the fused order alone (evaluation);
        the request's `ranking` may turn reranking off, or on (a 400 without a reranker).

        Pages of one query are cut from one order, for the same store generation: its
        first places (KNOWLEDGE_CANDIDATES, at least the reranked ones) are a search with
        that many candidates per retriever, the same whatever the page asks; the places
        after them a search with DEEPEST candidates, without the passages placed before.
        A page that ends in the first places costs one search; a deeper one two. Recency
        orders each part within itself."""
        reranking = self._reranking(ranking, rerank, mode)
        first = max(self.settings.candidates, self.settings.rerank_top if reranking else 0)
        end = offset + limit
        # one hit more than the page: whether another page follows
        wanted = first if ranking.recency is not None else min(end + 1, first)
        if reranking:
            wanted = max(wanted, self.settings.rerank_top)
        started = time.perf_counter()
        with tracing.span("knowledge.search", self._search_attributes(plan, query, mode)) as span:
            hits = await self.store.search(
                query, plan.vector, wanted, plan.filters, threshold, mode, ranking
            )
            deeper: list[SearchHit] = []
            # fewer than asked: every passage that passes is placed, none lies deeper
            if end + 1 > first and len(hits) == wanted:
                deep = await self.store.search(
                    query, plan.vector, DEEPEST, plan.filters, threshold, mode, ranking
                )
                placed = {hit.chunk.id for hit in hits}
                deeper = [hit for hit in deep if hit.chunk.id not in placed]
            span.set_attribute("knowledge.search.hits", len(hits) + len(deeper))
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
            ranking=self.ranking_ran(ranking, reranking),
        )
        if reranking:
            found = await self._reranked(query, found)
        ordered = found.hits + deeper
        if ranking.recency is not None:
            head, undated = by_recency(found.hits, ranking.recency)
            rest, undated_after = by_recency(deeper, ranking.recency)
            ordered = head + rest
            found.ranking["recency"]["undated"] = undated + undated_after
        return replace(found, hits=ordered[offset:end], more=len(ordered) > end)

    def _reranking(self, ranking: Ranking, rerank: bool, mode: SearchMode) -> bool:
        """Whether this search is reranked; a request that asks for reranking when no
        reranker is configured is a 400."""
        if ranking.rerank and self.reranker.name == "none":
            raise InvalidRequest(
                "ranking.rerank",
                "needs a reranker: KNOWLEDGE_RERANKER is none on this service",
                setting="KNOWLEDGE_RERANKER",
            )
        asked = rerank and ranking.rerank is not False
        return asked and mode == "hybrid" and self.reranker.name != "none"

    async def facets(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets | None:
        """How many passages `filters` lets through hold each value of each field
        (knowledge_api.facets): all of them, not a page; None when none is asked for."""
        if not fields:
            return None
        attributes = {"knowledge.facets.fields": list(fields)}
        with tracing.span("knowledge.search.facets", attributes):
            return await self.store.facet_counts(filters, fields)

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

    async def _reranked(self, query: str, found: Retrieval) -> Retrieval:
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
            hits=reranked.hits,
            warnings=found.warnings + reranked.warnings,
            rerank_ms=elapsed_ms(started),
            # what really ran: a reranker that could not rank left the fused order
            ranking={**found.ranking, "reranker": self.reranker.name if reranked.ran else "none"},
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

    async def synthesis_events(
        self, query: str, hits: Sequence[SearchHit]
    ) -> AsyncGenerator[Event, None]:
        """The chain's events: ("delta", text) as text arrives, ("reset", why) when a
        link failed mid-answer, then ("done", Outcome) with the evidence of its
        citations."""
        async with aclosing(self.synthesizer.stream(query, hits)) as events:
            async for name, data in events:
                if name == "done":
                    data.evidence = await self.evidence(data)
                yield name, data

    async def evidence(self, outcome: Outcome) -> tuple[Evidence, ...]:
        """The words behind each citation marker of the outcome (knowledge_api.evidence),
        read in the stored text of the documents it cites."""
        passages = outcome.passages
        cited = list(dict.fromkeys(passages[n - 1].document_id for n in outcome.citations))
        if not cited:
            return ()
        return evidence.cite(outcome.text, passages, await self.store.document_texts(cited))

    async def sentence_support(self, query: str, hits: Sequence[SearchHit]) -> list[float] | None:
        """Per passage, the cosine with the question of its sentence closest to it, as
        the offline link reads sentences (its vectors kept for the answer); None
        without the model."""
        offline = self.synthesizer.links[-1]
        if not isinstance(offline, ExtractiveSynthesizer):
            return None
        return await offline.support(query, hits)

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Outcome:
        """The chain's answer, whole."""
        async with aclosing(self.synthesis_events(query, hits)) as events:
            async for name, data in events:
                if name == "done":
                    outcome: Outcome = data
                    return outcome
        raise RuntimeError("the synthesis chain ended without an outcome")
