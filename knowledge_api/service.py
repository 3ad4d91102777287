"""KnowledgeService: the engine every use case goes through.

It owns the seams (store, embedder, reranker, synthesis chain, caches) and offers the
steps the use cases are made of: retrieve (embed through tier 2, search, rerank), write
an answer from passages, keep values in tier 1, ingest and read documents, report
health. It returns domain values; nothing here knows HTTP or which backend runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api import __version__, tracing
from knowledge_api.cache import caches
from knowledge_api.cache.base import COMPUTED, Event, ResponseTier, Served
from knowledge_api.embeddings.base import Embedder
from knowledge_api.embeddings.batching import QueryBatcher
from knowledge_api.errors import (
    BackendConnectionError,
    CollectionNotFound,
    EmbeddingError,
    InvalidRequest,
    KnowledgeAPIError,
)
from knowledge_api.facets import Facets
from knowledge_api.filters import as_json
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.pipeline import Ingestor
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    SETTINGS_RANKING,
    Document,
    EmbedderIdentity,
    IndexSummary,
    Ranking,
    SearchFilters,
    SearchHit,
    SearchMode,
    SearchParams,
    normalize_query,
)
from knowledge_api.observer import UNOBSERVED, Observer
from knowledge_api.prefetch import Prefetcher
from knowledge_api.ranking import DEEPEST, by_recency, recency_json
from knowledge_api.rerankers.base import NoReranker, Reranker
from knowledge_api.routing import Centroids, Route, learn_centroids, route
from knowledge_api.settings import Settings
from knowledge_api.stores.audit import Actor, AuditEntry, AuditQuery, stamp
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.stores.feedback import Answered
from knowledge_api.stores.fusion import SearchTuning
from knowledge_api.stores.keys import RememberedKeys
from knowledge_api.synthesis.base import Synthesizer
from knowledge_api.synthesis.chain import Outcome, SynthesisChain
from knowledge_api.timing import elapsed_ms, ms, utc_now

__all__ = [
    "COMPUTED",
    "Event",
    "KnowledgeService",
    "Plan",
    "Retrieval",
    "Served",
]
log = logging.getLogger("knowledge_api")
Body = dict[str, Any]
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


class KnowledgeService:
    def __init__(
        self,
        settings: Settings,
        store: KnowledgeStore,
        embedder: Embedder,
        synthesizer: SynthesisChain | Synthesizer,
        reranker: Reranker | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.reranker: Reranker = reranker or NoReranker()
        self.tuning = SearchTuning.from_settings(settings)
        self.synthesizer = (
            synthesizer
            if isinstance(synthesizer, SynthesisChain)
            else SynthesisChain([synthesizer])
        )
        self.caches = caches.create(settings.cache, settings)
        # another embedder's vectors are no answer, whoever shares the tier
        self.caches.embeddings.follow(f"{embedder.name}/{embedder.dimension}")
        self.tier1 = ResponseTier(self.caches, store.collection_generation)
        self.started = time.monotonic()
        self.embedder_ready = False
        self._model_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self.query_batcher = QueryBatcher(
            self._embed_queries,
            settings.query_batch_window_ms,
            settings.query_batch_size,
            settings.query_queue_size,
        )
        self._batch_sizes: dict[str, int] = {}
        """Traced: the size of the batch each query was embedded in, till its span reads it."""
        self.health_reports: dict[str, Callable[[], Body]] = {}
        """More /health lines (e.g. the KB sync): any status but ok or pending degrades."""
        self.keys = RememberedKeys(store.key_store(settings.db_path))
        self.audit_log = store.audit_log(settings.db_path)
        self.feedback_log = store.feedback_log(settings.db_path)
        self._recording: dict[str, asyncio.Task[None]] = {}
        """Answers whose record is being written, by query_id."""
        self._next_prune = 0.0
        self.jobs = store.job_store(settings.db_path)
        self.observer: Observer = UNOBSERVED
        self.centroids: dict[str, Centroids] = {}
        """Each collection's source centroids (routing), at the generation they were learned."""
        self._learning: dict[str, asyncio.Task[Centroids]] = {}
        self.prefetcher = Prefetcher.from_settings(settings)
        if self.prefetcher.enabled:
            self.health_reports["prefetch"] = self.prefetcher.report

    def observe(self, observer: Observer) -> None:
        """Report model calls, searches and syntheses to `observer` from now on."""
        self.observer = observer
        self.synthesizer.observer = observer

    @property
    def identity(self) -> EmbedderIdentity:
        return EmbedderIdentity(self.embedder.name, self.embedder.dimension)

    @property
    def answer_threshold(self) -> float:
        """Default threshold of a grounded answer: KNOWLEDGE_ANSWER_THRESHOLD, or with
        auto the embedder's own, since cosine scales differ between models."""
        configured = self.settings.answer_threshold
        return self.embedder.answer_threshold if configured == "auto" else float(configured)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, seed: bool = False) -> None:
        """Load the model and open the store. A failure of either degrades the service
        (reported by /health and in responses) instead of stopping it."""
        single_threaded_blas()
        await self.synthesizer.open()
        # before the embedder: loading the local model turns the model hub off for the
        # whole process, and a cross-encoder given by model id may need to fetch it
        await self.reranker.open()
        try:
            await self._in_model_thread(self.embedder.load)
            self.embedder_ready = True
        except EmbeddingError as e:
            log.error("embedder unavailable, searching by keyword only: %s", e)
        try:
            await self.open_storage()
        except BackendConnectionError as e:
            log.error("store unavailable: %s", e)
            return
        if seed and self.settings.seed_on_empty and await self.store.count() == 0:
            await self._seed()

    async def load_embedder(self) -> None:
        """Load the model after `open_storage`, for a command that found work for it."""
        single_threaded_blas()
        await self._in_model_thread(self.embedder.load)
        self.embedder_ready = True

    async def open_storage(self) -> None:
        """Open the store and the API keys, no model: what commands that embed nothing
        need (key management, say)."""
        await self.store.open()
        await self.store.check_embedder(self.embedder.name, self.embedder.dimension)
        await self.keys.open()
        await self.audit_log.open()
        await self.feedback_log.open()
        await self.jobs.open()

    async def _seed(self) -> None:
        if not self.embedder_ready:
            log.warning("not seeding the empty store: the embedder is unavailable")
            return
        loaded = load_paths([self.seed_path()], LoadOptions())
        summary = await self.ingest(loaded)
        await self.audit(
            Actor("service"),
            "seed",
            loaded.documents[0].collection if loaded.documents else None,
            changes(loaded.documents, summary),
        )
        log.info(
            "seeded the empty store from %s: %d documents, %d passages",
            self.seed_path(),
            summary.documents,
            summary.chunks,
        )

    async def stop(self) -> None:
        await self.query_batcher.close()
        await self.prefetcher.close()
        for task in self._learning.values():
            task.cancel()
        await self.reranker.close()
        await self.synthesizer.close()
        await self.keys.close()
        await self.audit_log.close()
        await self.recorded()
        await self.feedback_log.close()
        await self.jobs.close()
        await self.store.close()
        await self.caches.close()
        self._model_thread.shutdown(wait=False, cancel_futures=True)

    def seed_path(self) -> Path:
        if self.settings.seed_path:
            return Path(self.settings.seed_path)
        return Path(str(resources.files("knowledge_api").joinpath("docs")))

    async def _in_model_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Model calls run one at a time on their own thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._model_thread, fn, *args)

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
            if end + 1 > first:
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

    async def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """One micro-batch of concurrent queries (QueryBatcher), on the model thread.
        Traced, each query's embed span says the size of the batch it was in (the
        batch runs in the batcher's task, outside any request's trace)."""
        vectors: np.ndarray = await self._in_model_thread(self.embedder.embed_queries, texts)
        if tracing.recording():
            if len(self._batch_sizes) > 4 * self.settings.query_queue_size:
                self._batch_sizes.clear()  # queries whose callers left never take theirs
            self._batch_sizes.update(dict.fromkeys(texts, len(texts)))
        return vectors

    def _embed_attributes(self, kind: str, batch_size: int | None = None) -> dict[str, Any]:
        """An embed span's attributes (the GenAI semantic conventions' embeddings)."""
        if not tracing.recording():
            return {}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": self.embedder.name,
            "gen_ai.embeddings.dimension.count": self.embedder.dimension,
            "knowledge.embed.kind": kind,
        }
        if batch_size is not None:
            attributes["knowledge.embed.batch_size"] = batch_size
        return attributes

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

    # -- documents ------------------------------------------------------------------

    async def ingest(
        self,
        documents: Iterable[Document],
        progress: Callable[[int], object] | None = None,
        source: str | None = None,
    ) -> IndexSummary:
        """Index `documents`; with a `source`, as that source's (see Ingestor.ingest)."""
        if not self.embedder_ready:
            raise EmbeddingError("the embedder is not loaded: documents cannot be indexed")
        ingestor = Ingestor(self.store, self.identity, self.embed_documents)
        return await ingestor.ingest(documents, progress, source)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter()
        with tracing.span("knowledge.embed", self._embed_attributes("documents", len(texts))):
            vectors: np.ndarray = await self._in_model_thread(self.embedder.embed_documents, texts)
        self.observer.embedding("documents", time.perf_counter() - start)
        return vectors

    async def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of the sentences an offline answer is chosen from; EmbeddingError
        when the model is not loaded, so the answer falls back to words."""
        if not self.embedder_ready:
            raise EmbeddingError("the embedder is not loaded")
        return await self.embed_documents(texts)

    async def document(self, doc_id: str) -> Document | None:
        return await self.store.get_by_id(doc_id)

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        """A document by source id, document id or the id of one of its chunks."""
        return await self.store.find_document(source_type, key, collection)

    async def delete_document(self, doc_id: str) -> bool:
        return await self.store.delete(doc_id)

    async def collections(self) -> dict[str, int]:
        """Document count of every collection that holds documents."""
        return await self.store.collections()

    async def require_collection(self, collection: str) -> None:
        """CollectionNotFound, listing the collections, unless `collection` holds
        documents or is the default one (an empty knowledge base is not a typo). The
        reading routes call it once a search found nothing, so a found passage costs no
        count of the collections."""
        if collection == DEFAULT_COLLECTION:
            return
        existing = await self.collections()
        if collection not in existing:
            raise CollectionNotFound.among(collection, existing)

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        return self.store.iter_documents(collection)

    # -- audit trail ----------------------------------------------------------------

    async def audit(
        self, actor: Actor, action: str, collection: str | None, changed: dict[str, Any]
    ) -> None:
        """Append one record of a write to the audit trail: what every door (a route, an
        MCP tool, a command, the KB sync) calls once it wrote, with what changed (ids
        and counts, see `changes`). A trail that cannot be written is logged as an
        error; the write it records stands. Records older than KNOWLEDGE_AUDIT_DAYS are
        forgotten, checked at most hourly."""
        entry = AuditEntry(actor.name, action, collection, changed, actor.request_id, stamp())
        try:
            await self.audit_log.append(entry)
            if self.settings.audit_days and time.monotonic() >= self._next_prune:
                self._next_prune = time.monotonic() + 3600
                cutoff = time.time() - self.settings.audit_days * 86400
                await self.audit_log.prune(stamp(datetime.fromtimestamp(cutoff, UTC)))
        except KnowledgeAPIError as e:
            log.error("audit record lost: %s %s by %s: %s", action, changed, actor.name, e.message)

    async def audit_page(self, query: AuditQuery) -> list[AuditEntry]:
        """A page of the trail, newest first."""
        return await self.audit_log.page(query)

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

    async def _record(self, answered: Answered) -> None:
        try:
            await self.feedback_log.answered(answered)
        except KnowledgeAPIError as e:
            log.error(
                "answer %s not recorded, its ratings will not resolve: %s",
                answered.query_id,
                e.message,
            )

    async def find_answered(self, query_id: str) -> Answered | None:
        """A computed query or answer by its query_id (once its record is written)."""
        if (recording := self._recording.get(query_id)) is not None:
            await asyncio.shield(recording)
        return await self.feedback_log.find(query_id)

    async def recorded(self) -> None:
        """Wait until every answer computed so far is recorded."""
        await asyncio.gather(*self._recording.values())

    def ranking(self, params: SearchParams) -> dict[str, Any]:
        """What ranked a query: the request's own choices and the settings that order
        results, so a rating says which ranking it judged."""
        reranking = self.reranker.name != "none" and params.ranking.rerank is not False
        ran = self.ranking_ran(params.ranking, reranking)
        return {
            "embedder": self.embedder.name,
            **ran,
            "feedback_docs": self.tuning.adjusted(params.ranking).feedback_docs,
            "limit": params.limit,
            "offset": params.offset,
            "threshold": params.threshold,
            "sources": list(params.sources) if params.sources else None,
            "filters": as_json(params.filters),
        }

    def ranking_ran(self, ranking: Ranking, reranking: bool) -> dict[str, Any]:
        """The ranking a request's choices and the settings make, as responses report
        it: fusion, vector_weight, prf (whether the feedback round runs), recency (or
        None) and the reranker that ran ("none": no reranking)."""
        tuning = self.tuning.adjusted(ranking)
        return {
            "fusion": tuning.fusion,
            "vector_weight": tuning.vector_weight,
            "prf": tuning.feedback_docs > 0,
            "recency": None if ranking.recency is None else recency_json(ranking.recency),
            "reranker": self.reranker.name if reranking else "none",
        }

    # -- health ---------------------------------------------------------------------

    async def readiness(self) -> dict[str, str]:
        """Why each part that keeps requests from being served is not ready; empty
        when the store answers and the embedder is loaded."""
        problems = {}
        store = await self.store.health_check()
        if store.get("status") != "ok":
            problems["store"] = str(store.get("error") or store.get("status"))
        if not self.embedder_ready:
            problems["embedder"] = "not loaded"
        return problems

    async def health(self) -> Body:
        store = await self.store.health_check()
        cache = await self.caches.health()
        embedder = {**self.embedder.health(), "query_batches": self.query_batcher.stats()}
        synthesizer = self.synthesizer.health()
        reranker = self.reranker.health()
        extra = {name: report() for name, report in self.health_reports.items()}
        extra_ok = all(report.get("status") in ("ok", "pending") for report in extra.values())
        if store.get("status") == "unavailable":
            status = "unhealthy"
        elif not extra_ok or any(
            report.get("status") != "ok"
            for report in (store, embedder, synthesizer, reranker, cache)
        ):
            status = "degraded"
        else:
            status = "healthy"
        return {
            "status": status,
            "service": "knowledge-api",
            "version": __version__,
            "cache": self.caches.stats(),
            "timestamp": utc_now(),
            "uptime_s": round(time.monotonic() - self.started, 1),
            "store": store,
            "embedder": embedder,
            "synthesizer": synthesizer,
            "reranker": reranker,
            **extra,
        }


MAX_AUDITED_IDS = 1000
"""Ids one audit record lists at most (a bigger write lists these and counts them all)."""


def changes(
    documents: Sequence[Document] | None = None,
    summary: IndexSummary | None = None,
    **more: Any,
) -> dict[str, Any]:
    """What a write changed, as its audit record says it: the documents' ids (at most
    MAX_AUDITED_IDS), the index summary's counts, and any other counts or ids."""
    changed: dict[str, Any] = {}
    if documents is not None:
        ids = list(dict.fromkeys(doc.id for doc in documents))
        changed["ids"] = ids[:MAX_AUDITED_IDS]
        changed["documents"] = len(ids)
    if summary is not None:
        changed.update(
            indexed=summary.documents,
            chunks=summary.chunks,
            embedded=summary.embedded,
            unchanged=summary.skipped,
        )
    return {**changed, **more}


def single_threaded_blas() -> None:
    """Exact vector search is one memory-bound matrix-vector product: a second BLAS
    thread barely speeds it up, and its spinning competes with the event loop (on a
    busy 2-core host, 5k-chunk searches went from 0.6 ms to 2.9 ms with two)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
