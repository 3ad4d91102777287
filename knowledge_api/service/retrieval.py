"""Retrieval, the step every use case shares: a query embedded through tier 2, the
sources it needs (routing), the store searched, the hits reranked and a page cut."""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from knowledge_api import tracing
from knowledge_api.errors import EmbeddingError, InvalidRequest
from knowledge_api.facets import Facets
from knowledge_api.models import (
    SETTINGS_RANKING,
    Ranking,
    SearchFilters,
    SearchHit,
    SearchMode,
    normalize_query,
)
from knowledge_api.ranking import DEEPEST, by_recency
from knowledge_api.routing import Centroids, Route, learn_centroids, route
from knowledge_api.service.engine import Engine
from knowledge_api.service.trail import Trail
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.timing import elapsed_ms, ms


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
class Asked:
    """What a search asks besides where to look: the query, the page of `limit` results
    from `offset`, and how they are ranked (see `Retriever.search`)."""

    query: str
    limit: int
    threshold: float = 0.0
    mode: SearchMode = "hybrid"
    rerank: bool = True
    ranking: Ranking = SETTINGS_RANKING
    offset: int = 0


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


class Retriever:
    """Embed, route, search, rerank, over the engine's seams."""

    def __init__(self, engine: Engine, trail: Trail) -> None:
        self.engine = engine
        self.trail = trail

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
        asked = Asked(query, limit, threshold, mode, rerank, ranking, offset)
        return await self.retrieve_asked(asked, filters, route)

    async def retrieve_asked(
        self, asked: Asked, filters: SearchFilters, route: bool = False
    ) -> Retrieval:
        """`retrieve`, for a caller that holds what it asks as one value."""
        with self._keywords_ahead(asked, filters, route):
            plan = await self.plan(asked.query, filters, route)
            return await self.search(plan, asked)

    async def plan(self, query: str, filters: SearchFilters, route: bool = False) -> Plan:
        """The query's vector (through tier 2) and the sources to search."""
        warnings: list[str] = []
        start = time.perf_counter()
        vector = await self._query_vector(normalize_query(query), warnings)
        embedding_ms = elapsed_ms(start)
        if not route or self.engine.settings.routing != "on":
            return Plan(vector, filters, embedding_ms, warnings)
        if filters.source_types is not None:  # the request's own choice always wins
            return Plan(vector, filters, embedding_ms, warnings, filters.source_types)
        if filters.collections:  # routes are learned per collection: several search all
            return Plan(vector, filters, embedding_ms, warnings)
        decided = await self.route(query, vector, filters.collection)
        routed = replace(filters, source_types=decided.sources)
        return Plan(vector, routed, embedding_ms, warnings, decided.searched)

    async def search(self, plan: Plan, asked: Asked) -> Retrieval:
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
        query, limit, threshold, mode = asked.query, asked.limit, asked.threshold, asked.mode
        ranking, offset = asked.ranking, asked.offset
        reranking = self._reranking(ranking, asked.rerank, mode)
        first, wanted = self._depth(limit, offset, ranking, reranking)
        end = offset + limit
        started = time.perf_counter()
        with tracing.span("knowledge.search", self._search_attributes(plan, query, mode)) as span:
            request = SearchRequest(
                query, plan.vector, wanted, plan.filters, threshold, mode, ranking
            )
            hits = await self.engine.store.search(request)
            deeper: list[SearchHit] = []
            # fewer than asked: every passage that passes is placed, none lies deeper
            if end + 1 > first and len(hits) == wanted:
                deep = await self.engine.store.search(request._replace(top_k=DEEPEST))
                placed = {hit.chunk.id for hit in hits}
                deeper = [hit for hit in deep if hit.chunk.id not in placed]
            span.set_attribute("knowledge.search.hits", len(hits) + len(deeper))
        if not plan.filters.collections:  # a store names it where several are searched
            for hit in (*hits, *deeper):
                hit.collection = plan.filters.collection
        searched = time.perf_counter() - started
        self.engine.observer.search(searched)
        found = Retrieval(
            hits,
            plan.vector,
            plan.embedding_ms,
            ms(searched),
            list(plan.warnings),
            None,
            plan.routed,
            ranking=self.trail.ranking_ran(ranking, reranking, query),
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

    def _keywords_ahead(
        self, asked: Asked, filters: SearchFilters, route: bool
    ) -> AbstractContextManager[None]:
        """The keyword list of the search `retrieve` is about to ask, sent off while the
        query is embedded, where the store runs it aside (HybridSearch.keywords_ahead)
        and the vector cannot change where the search looks (routing)."""
        store = self.engine.store
        if asked.mode != "hybrid" or self._may_route(filters, route):
            return nullcontext()
        if not isinstance(store, HybridSearch):
            return nullcontext()
        reranking = self._reranking(asked.ranking, asked.rerank, asked.mode)
        _, wanted = self._depth(asked.limit, asked.offset, asked.ranking, reranking)
        return store.keywords_ahead(asked.query, wanted, filters, asked.ranking)

    def _depth(self, limit: int, offset: int, ranking: Ranking, reranking: bool) -> tuple[int, int]:
        """The first places a search ranks in one order, and the hits the page asks
        of the store (see `search`)."""
        settings = self.engine.settings
        first = max(settings.candidates, settings.rerank_top if reranking else 0)
        # one hit more than the page: whether another page follows
        wanted = first if ranking.recency is not None else min(offset + limit + 1, first)
        if reranking:
            wanted = max(wanted, settings.rerank_top)
        return first, wanted

    def _may_route(self, filters: SearchFilters, route: bool) -> bool:
        """Whether routing may narrow `filters` once the query's vector is known."""
        if not route or self.engine.settings.routing != "on":
            return False
        return filters.source_types is None and not filters.collections

    def _reranking(self, ranking: Ranking, rerank: bool, mode: SearchMode) -> bool:
        """Whether this search is reranked; a request that asks for reranking when no
        reranker is configured is a 400."""
        if ranking.rerank and self.engine.reranker.name == "none":
            raise InvalidRequest(
                "ranking.rerank",
                "needs a reranker: KNOWLEDGE_RERANKER is none on this service",
                setting="KNOWLEDGE_RERANKER",
            )
        asked = rerank and ranking.rerank is not False
        return asked and mode == "hybrid" and self.engine.reranker.name != "none"

    async def facets(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets | None:
        """How many passages `filters` lets through hold each value of each field
        (knowledge_api.facets): all of them, not a page; None when none is asked for."""
        if not fields:
            return None
        attributes = {"knowledge.facets.fields": list(fields)}
        with tracing.span("knowledge.search.facets", attributes):
            return await self.engine.store.facet_counts(filters, fields)

    def _search_attributes(self, plan: Plan, query: str, mode: SearchMode) -> dict[str, Any]:
        if not tracing.recording():
            return {}
        return {
            "knowledge.search.mode": mode,
            "db.collection.name": ",".join(plan.filters.searched),
            "knowledge.search.sources": list(plan.filters.source_types or ("all",)),
            **tracing.query_attributes(query),
        }

    # -- routing --------------------------------------------------------------------

    async def route(self, query: str, vector: np.ndarray | None, collection: str) -> Route:
        """The sources `query` needs in `collection`. The collection's centroids are
        learned again in the background when the store changed; until they are, the
        last ones are used (none at first: every source is searched)."""
        known = self.engine.centroids.get(collection)
        if known is None or known.generation != await self.engine.store.generation():
            self._learn_in_background(collection)
        return route(query, vector, known, self.engine.settings.routing_margin)

    def _learn_in_background(self, collection: str) -> None:
        learning = self.engine.learning.get(collection)
        if learning is None or learning.done():
            self.engine.learning[collection] = asyncio.create_task(self.learn_routes(collection))

    async def learn_routes(self, collection: str) -> Centroids:
        """The collection's source centroids, learned again if the store changed since."""
        generation = await self.engine.store.generation()
        known = self.engine.centroids.get(collection)
        if known is None or known.generation != generation:
            known = await learn_centroids(generation, self.engine.store.iter_documents(collection))
            self.engine.centroids[collection] = known
        return known

    async def _reranked(self, query: str, found: Retrieval) -> Retrieval:
        started = time.perf_counter()
        reranker = self.engine.reranker
        attributes = {
            "knowledge.rerank.provider": reranker.name,
            "knowledge.rerank.hits": len(found.hits),
        }
        with tracing.span("knowledge.rerank", attributes) as span:
            reranked = await reranker.rerank(query, found.hits, self.engine.settings.rerank_top)
            if reranked.warnings:
                span.set_attribute("knowledge.rerank.warnings", list(reranked.warnings))
        return replace(
            found,
            hits=reranked.hits,
            warnings=found.warnings + reranked.warnings,
            rerank_ms=elapsed_ms(started),
            # what really ran: a reranker that could not rank left the fused order
            ranking={
                **found.ranking,
                "reranker": reranker.name if reranked.ran else "none",
            },
        )

    async def _query_vector(self, normalized: str, warnings: list[str]) -> np.ndarray | None:
        if not self.engine.embedder_ready:
            warnings.append("embedder unavailable: results ranked by keyword relevance only")
            return None

        async def compute() -> tuple[np.ndarray, bool]:
            start = time.perf_counter()
            with tracing.span("knowledge.embed", self.engine.embed_attributes("query")) as span:
                vector = await self.engine.query_batcher.embed(normalized)
                if (size := self.engine._batch_sizes.pop(normalized, None)) is not None:
                    span.set_attribute("knowledge.embed.batch_size", size)
            self.engine.observer.embedding("query", time.perf_counter() - start)
            return vector, True

        try:
            vector: np.ndarray
            vector, _ = await self.engine.caches.embeddings.get_or_compute(normalized, compute)
        except EmbeddingError as e:
            warnings.append(f"embedding failed ({e.message}): keyword relevance only")
            return None
        return vector

    def forget_query_embeddings(self) -> None:
        """Empty tier 2, so the next queries are embedded again (latency measurements)."""
        self.engine.caches.embeddings.clear()
