"""KnowledgeService: the query pipeline (cache -> embed -> search -> synthesize),
documents, detail and health. Nothing here knows HTTP or which backend runs."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api import __version__, grounding, validation
from knowledge_api.cache import Caches
from knowledge_api.embeddings import embedders
from knowledge_api.embeddings.base import Embedder
from knowledge_api.errors import (
    BackendConnectionError,
    EmbeddingError,
    InvalidRequest,
    KnowledgeAPIError,
    NotFound,
)
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.pipeline import Ingestor
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    SOURCE_TYPES,
    AnswerRequest,
    Document,
    IndexSummary,
    QueryRequest,
    SearchFilters,
    SearchHit,
    normalize_query,
)
from knowledge_api.settings import Settings
from knowledge_api.stores import stores
from knowledge_api.stores.base import KnowledgeStore, SearchMode
from knowledge_api.synthesis.base import Synthesizer
from knowledge_api.synthesis.chain import Outcome, SynthesisChain

log = logging.getLogger("knowledge_api")
Body = dict[str, Any]
Event = tuple[str, Any]
COMPUTED = "computed"
"""The last event of a computation: (value to cache, whether it may be cached)."""
EXCERPT_CHARS = 240
INSUFFICIENT = (
    "I cannot find sufficient information in the knowledge base to answer this question. "
    "The most relevant passages found had similarity scores below the {threshold:g} "
    "threshold (best: {best:.2f}). Try rephrasing the question or lowering the threshold."
)
NOTHING_FOUND = (
    "I cannot find sufficient information in the knowledge base to answer this question: "
    "no passage matches it (check the sources and filters of the request)."
)
UNCITED = (
    "I cannot find sufficient information in the passages found to answer this question: "
    "the answer written by {model} cited none of them. Try rephrasing the question."
)


@dataclass(frozen=True, slots=True)
class Retrieval:
    hits: list[SearchHit]
    vector: np.ndarray | None
    embedding_ms: float
    search_ms: float
    warnings: list[str]


@dataclass(slots=True)
class Written:
    """Where `_write` leaves the synthesis chain's Outcome once the text has streamed."""

    outcome: Outcome | None = None

    @property
    def result(self) -> Outcome:
        if self.outcome is None:
            raise RuntimeError("the synthesis chain ended without an outcome")
        return self.outcome


class KnowledgeService:
    def __init__(
        self,
        settings: Settings,
        store: KnowledgeStore,
        embedder: Embedder,
        synthesizer: SynthesisChain | Synthesizer,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.synthesizer = (
            synthesizer
            if isinstance(synthesizer, SynthesisChain)
            else SynthesisChain([synthesizer])
        )
        self.caches = Caches.from_settings(settings)
        self.started = time.monotonic()
        self.embedder_ready = False
        self._model_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self.health_reports: dict[str, Callable[[], Body]] = {}
        """More /health lines (e.g. the KB sync): any status but ok or pending degrades."""

    @property
    def answer_threshold(self) -> float:
        """Default threshold of POST /v1/knowledge/answer: KNOWLEDGE_ANSWER_THRESHOLD, or
        with auto the embedder's own, since cosine scales differ between models."""
        configured = self.settings.answer_threshold
        return self.embedder.answer_threshold if configured == "auto" else float(configured)

    @classmethod
    def from_settings(cls, settings: Settings) -> KnowledgeService:
        return cls(
            settings,
            stores.create(settings.store, settings),
            embedders.create(settings.embedder, settings),
            SynthesisChain.from_settings(settings),
        )

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, seed: bool = False) -> None:
        """Load the model and open the store. A failure of either degrades the service
        (reported by /health and in responses) instead of stopping it."""
        single_threaded_blas()
        await self.synthesizer.open()
        try:
            await self._in_model_thread(self.embedder.load)
            self.embedder_ready = True
        except EmbeddingError as e:
            log.error("embedder unavailable, searching by keyword only: %s", e)
        try:
            await self.store.open()
            await self.store.check_embedder(self.embedder.name, self.embedder.dimension)
        except BackendConnectionError as e:
            log.error("store unavailable: %s", e)
            return
        if seed and self.settings.seed_on_empty and await self.store.count() == 0:
            await self._seed()

    async def _seed(self) -> None:
        if not self.embedder_ready:
            log.warning("not seeding the empty store: the embedder is unavailable")
            return
        summary = await self.ingest(load_paths([self.seed_path()], LoadOptions()))
        log.info("seeded an empty store: %s", summary)

    async def stop(self) -> None:
        await self.synthesizer.close()
        await self.store.close()
        self._model_thread.shutdown(wait=False, cancel_futures=True)

    def seed_path(self) -> Path:
        if self.settings.seed_path:
            return Path(self.settings.seed_path)
        return Path(str(resources.files("knowledge_api").joinpath("docs")))

    async def _in_model_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Model calls run one at a time on their own thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._model_thread, fn, *args)

    # -- query ----------------------------------------------------------------------

    async def query(self, request: QueryRequest) -> Body:
        start = time.perf_counter()
        self.caches.follow_store(await self.store.generation())
        (body, timings), computed = await self.caches.responses.get_or_compute(
            request.cache_key(), lambda: computed_value(self._query_run(request))
        )
        return {**body, "metrics": query_metrics(start, timings, cache_hit=not computed)}

    def query_events(self, request: QueryRequest) -> AsyncGenerator[Event, None]:
        """The query as events: `results`, the synthesis as the provider writes it
        (`synthesis` deltas; `reset` when a link fails mid-answer), then `done` with the
        whole synthesis, its citations and the metrics."""

        def replay(value: tuple[Body, Body]) -> list[Event]:
            body = value[0]
            events: list[Event] = [("results", {"results": body["results"]})]
            if "synthesis" in body:
                events.append(("synthesis", {"delta": body["synthesis"]}))
            return events

        def done(value: tuple[Body, Body], start: float, cache_hit: bool) -> Body:
            body, timings = value
            final: Body = {key: body[key] for key in ("synthesis", "synthesizer") if key in body}
            metrics = query_metrics(start, timings, cache_hit)
            return {**final, "metrics": metrics, "warnings": body.get("warnings", [])}

        return self._cached_events(request.cache_key(), self._query_run(request), replay, done)

    async def _query_run(self, request: QueryRequest) -> AsyncGenerator[Event, None]:
        generation = await self.store.generation()
        found = await self.retrieve(
            request.query, request.limit, request.search_filters(), request.threshold
        )
        timings = {"embedding_ms": found.embedding_ms, "search_ms": found.search_ms}
        body: Body = {"results": [result_view(hit) for hit in found.hits]}
        yield "results", {"results": body["results"]}
        warnings = list(found.warnings)
        if request.synthesize:
            synthesized = time.perf_counter()
            written = Written()
            async for event in self._write(request.query, found.hits, "synthesis", written):
                yield event
            outcome = written.result
            body["synthesis"] = outcome.text
            body["synthesizer"] = outcome.view()
            warnings += outcome.warnings()
            timings["synthesis_ms"] = elapsed_ms(synthesized)
        if warnings:
            body["warnings"] = warnings
        cacheable = not warnings and await self.store.generation() == generation
        yield COMPUTED, ((body, timings), cacheable)

    async def _write(
        self, query: str, hits: Sequence[SearchHit], field: str, written: Written
    ) -> AsyncGenerator[Event, None]:
        """The synthesis chain's events: (field, {"delta": text}) as text arrives and
        ("reset", why) when a link failed mid-answer; its Outcome goes to `written`."""
        async with aclosing(self.synthesizer.stream(query, hits)) as events:
            async for name, data in events:
                if name == "delta":
                    yield field, {"delta": data}
                elif name == "done":
                    written.outcome = data
                else:
                    yield name, data

    async def _cached_events(
        self,
        key: Any,
        run: AsyncGenerator[Event, None],
        replay: Callable[[Any], list[Event]],
        done: Callable[[Any, float, bool], Body],
    ) -> AsyncGenerator[Event, None]:
        """A tier-1 hit replayed, or `run`'s events passed on as they come (the value it
        computes is cached); then ("done", done(value, start, cache_hit))."""
        start = time.perf_counter()
        self.caches.follow_store(await self.store.generation())
        async with aclosing(run):
            cached = self.caches.responses.get(key)
            if cached is not None:
                for event in replay(cached):
                    yield event
                yield "done", done(cached, start, True)
                return
            async for name, data in run:
                if name != COMPUTED:
                    yield name, data
                    continue
                value, cacheable = data
                if cacheable:
                    self.caches.responses.put(key, value)
                yield "done", done(value, start, False)

    # -- grounded answers -----------------------------------------------------------

    async def answer(self, request: AnswerRequest) -> Body:
        """A grounded answer: the AgentResponse of the retrieval-agent contract."""
        start = time.perf_counter()
        self.caches.follow_store(await self.store.generation())
        core, computed = await self.caches.responses.get_or_compute(
            request.cache_key(), lambda: computed_value(self._answer_run(request))
        )
        return agent_response(core, start, cache_hit=not computed)

    async def answer_events(self, request: AnswerRequest) -> AsyncGenerator[Event, None]:
        """`results` (the passages [n] refers to), `answer` deltas (and `reset`), then
        `done` with the whole AgentResponse: sources, confidence, metadata. A failure
        after the first event ends the stream with an AgentResponse of status error."""

        def replay(core: Body) -> list[Event]:
            events: list[Event] = [("results", {"results": core["results"]})]
            if core["answer"]:
                events.append(("answer", {"delta": core["answer"]}))
            return events

        start = time.perf_counter()
        events = self._cached_events(
            request.cache_key(), self._answer_run(request), replay, agent_response
        )
        started = False
        async with aclosing(events):
            try:
                async for event in events:
                    started = True
                    yield event
            except Exception as e:
                if not started:
                    raise  # before the stream: a status code and the error shape
                yield "done", failed_answer(e, start)

    async def _answer_run(self, request: AnswerRequest) -> AsyncGenerator[Event, None]:
        generation = await self.store.generation()
        filters = request.search_filters()
        found = await self.retrieve(request.query, request.limit, filters, request.threshold)
        retrieval_ms = round(found.embedding_ms + found.search_ms, 3)
        results = [result_view(hit) for hit in found.hits]
        yield "results", {"results": results}
        if not found.hits:
            nearest = await self.retrieve(request.query, request.limit, filters, 0.0)
            core = insufficient_answer(request, nearest.hits, found.warnings)
        else:
            started = time.perf_counter()
            written = Written()
            async for event in self._write(request.query, found.hits, "answer", written):
                yield event
            outcome = written.result
            generation_ms = elapsed_ms(started)
            core = await self._ground(request, outcome, found.warnings)
            core["timings"]["generation_time_ms"] = generation_ms
        core["results"] = results
        core["timings"]["retrieval_time_ms"] = retrieval_ms
        cacheable = not core["warnings"] and await self.store.generation() == generation
        yield COMPUTED, (core, cacheable)

    async def _ground(self, request: AnswerRequest, outcome: Outcome, warnings: list[str]) -> Body:
        """The answer's sources and confidence; an answer citing nothing is not grounded."""
        passages = outcome.passages
        cited = [passages[n - 1] for n in outcome.citations]
        warnings = warnings + outcome.warnings()
        claims = grounding.claims(outcome.text)
        embed = self.embed_documents if self.embedder_ready else None
        try:
            entailment, method = await grounding.entailment(claims, passages, embed)
        except EmbeddingError as e:
            warnings.append(f"entailment by term overlap: {e.message}")
            entailment, method = await grounding.entailment(claims, passages, None)
        confidence = grounding.Confidence(
            retrieval_quality=grounding.retrieval_quality(passages),
            coverage_score=grounding.coverage(request.query, cited),
            entailment_score=entailment,
            lexical_overlap=grounding.lexical_overlap(outcome.text, cited),
            entailment_method=method,
        )
        core = answer_core(outcome, warnings)
        if not cited:
            return {
                **core,
                "status": "insufficient_context",
                "confidence": grounding.Confidence(confidence.retrieval_quality, 0, 0, 0).view(),
                "error_message": UNCITED.format(model=outcome.model),
            }
        sources = [source_view(n, passages[n - 1]) for n in outcome.citations]
        return {
            **core,
            "status": "success",
            "answer": outcome.text,
            "sources": sources,
            "confidence": confidence.view(),
        }

    async def retrieve(
        self,
        query: str,
        limit: int,
        filters: SearchFilters,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
    ) -> Retrieval:
        """Embed (through tier 2) and search: the step every client of the engine shares."""
        warnings: list[str] = []
        start = time.perf_counter()
        vector = await self._query_vector(normalize_query(query), warnings)
        embedded = time.perf_counter()
        hits = await self.store.search(query, vector, limit, filters, threshold, mode)
        return Retrieval(hits, vector, ms(embedded - start), elapsed_ms(embedded), warnings)

    async def _query_vector(self, normalized: str, warnings: list[str]) -> np.ndarray | None:
        if not self.embedder_ready:
            warnings.append("embedder unavailable: results ranked by keyword relevance only")
            return None

        async def compute() -> tuple[np.ndarray, bool]:
            return await self._in_model_thread(self.embedder.embed_query, normalized), True

        try:
            vector: np.ndarray
            vector, _ = await self.caches.embeddings.get_or_compute(normalized, compute)
        except EmbeddingError as e:
            warnings.append(f"embedding failed ({e.message}): keyword relevance only")
            return None
        return vector

    # -- documents ------------------------------------------------------------------

    async def ingest(
        self, documents: Iterable[Document], progress: Callable[[int], object] | None = None
    ) -> IndexSummary:
        if not self.embedder_ready:
            raise EmbeddingError("the embedder is not loaded: documents cannot be indexed")
        ingestor = Ingestor(self.store, self.embedder, self.embed_documents)
        return await ingestor.ingest(documents, progress)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors: np.ndarray = await self._in_model_thread(self.embedder.embed_documents, texts)
        return vectors

    async def document(self, doc_id: str) -> Body:
        doc = await self.store.get_by_id(doc_id)
        if doc is None:
            raise NotFound(f"no document with id {doc_id!r}", id=doc_id)
        return document_view(doc)

    async def delete_document(self, doc_id: str) -> Body:
        if not await self.store.delete(doc_id):
            raise NotFound(f"no document with id {doc_id!r}", id=doc_id)
        return {"success": True, "deleted": doc_id}

    async def detail(
        self, source_type: str, key: str, collection: str = DEFAULT_COLLECTION
    ) -> Body:
        if source_type not in SOURCE_TYPES:
            raise InvalidRequest("type", f"must be one of: {', '.join(SOURCE_TYPES)}")
        collection = validation.collection_name(collection)
        doc = await self.store.find_document(source_type, key, collection)
        if doc is None:
            raise NotFound(
                f"no {source_type} record with id {key!r} in collection {collection!r}",
                type=source_type,
                id=key,
                collection=collection,
            )
        return document_view(doc)

    # -- health ---------------------------------------------------------------------

    async def health(self) -> Body:
        store = await self.store.health_check()
        embedder = self.embedder.health()
        synthesizer = self.synthesizer.health()
        extra = {name: report() for name, report in self.health_reports.items()}
        extra_ok = all(report.get("status") in ("ok", "pending") for report in extra.values())
        if store.get("status") != "ok":
            status = "unhealthy"
        elif embedder.get("status") != "ok" or synthesizer.get("status") != "ok" or not extra_ok:
            status = "degraded"
        else:
            status = "healthy"
        return {
            "status": status,
            "service": "knowledge-api",
            "version": __version__,
            "cache": self.caches.stats(),
            "timestamp": datetime.now(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "uptime_s": round(time.monotonic() - self.started, 1),
            "store": store,
            "embedder": embedder,
            "synthesizer": synthesizer,
            **extra,
        }


def single_threaded_blas() -> None:
    """Exact vector search is one memory-bound matrix-vector product: a second BLAS
    thread barely speeds it up, and its spinning competes with the event loop (on a
    busy 2-core host, 5k-chunk searches went from 0.6 ms to 2.9 ms with two)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def elapsed_ms(since: float) -> float:
    return ms(time.perf_counter() - since)


def result_view(hit: SearchHit) -> Body:
    chunk = hit.chunk
    metadata = {
        **hit.metadata,
        "title": chunk.title,
        "chunk_index": chunk.chunk_index,
        "document_id": hit.document_id,
    }
    if chunk.section:
        metadata["section"] = chunk.section
    return {
        "id": chunk.id,
        "content": chunk.content,
        "source_type": hit.source_type,
        "source_id": hit.source_id,
        "similarity": round(hit.similarity, 4),
        "metadata": metadata,
        "expandable": chunk.chunk_count > 1,
    }


def source_view(n: int, hit: SearchHit) -> Body:
    """A cited passage of a grounded answer: [n] in the answer is this source."""
    result = result_view(hit)
    metadata = {**result["metadata"], "source_type": hit.source_type, "source_id": hit.source_id}
    return {
        "chunk_id": result["id"],
        "citation_index": n,
        "relevance_score": result["similarity"],
        "excerpt": excerpt(hit.chunk.content),
        "metadata": metadata,
    }


def excerpt(content: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"


async def computed_value(run: AsyncGenerator[Event, None]) -> Any:
    """The (value, cacheable) a run ends with; its other events are not needed."""
    async with aclosing(run):
        async for name, data in run:
            if name == COMPUTED:
                return data
    raise RuntimeError("the computation ended without a value")


def query_metrics(start: float, timings: Body, cache_hit: bool) -> Body:
    if cache_hit:
        timings = {name: 0.0 for name in timings}
    return {"total_ms": elapsed_ms(start), "cache_hit": cache_hit, **timings}


def answer_core(outcome: Outcome | None, warnings: list[str]) -> Body:
    """What a grounded answer caches: everything but its id, timestamp and timings."""
    return {
        "status": "insufficient_context",
        "answer": None,
        "sources": [],
        "confidence": grounding.Confidence(0.0, 0.0, 0.0, 0.0).view(),
        "error_message": None,
        "model": outcome.model if outcome else None,
        "temperature": outcome.temperature if outcome else None,
        "tokens_used": outcome.tokens_used if outcome else 0,
        "synthesizer": outcome.view() if outcome else None,
        "warnings": warnings,
        "timings": {"retrieval_time_ms": 0.0, "generation_time_ms": 0.0},
    }


def insufficient_answer(
    request: AnswerRequest, nearest: Sequence[SearchHit], warnings: list[str]
) -> Body:
    best = grounding.retrieval_quality(nearest)
    if nearest:
        message = INSUFFICIENT.format(threshold=request.threshold, best=best)
    else:
        message = NOTHING_FOUND
    return {
        **answer_core(None, warnings),
        "confidence": grounding.Confidence(best, 0.0, 0.0, 0.0).view(),
        "error_message": message,
    }


def failed_answer(error: Exception, start: float) -> Body:
    if isinstance(error, KnowledgeAPIError):
        message = error.message
    else:
        log.exception("unhandled error while streaming an answer")
        message = "internal error: this is a bug, the log has the traceback"
    core = {**answer_core(None, []), "status": "error", "error_message": message}
    return agent_response(core, start, cache_hit=False)


def agent_response(core: Body, start: float, cache_hit: bool) -> Body:
    timings = {name: 0.0 for name in core["timings"]} if cache_hit else core["timings"]
    metadata = {
        "model": core["model"],
        "temperature": core["temperature"],
        "total_time_ms": elapsed_ms(start),
        **timings,
        "tokens_used": core["tokens_used"],
        "timestamp": utc_now(),
        "cache_hit": cache_hit,
        "synthesizer": core["synthesizer"],
    }
    response = {
        "query_id": str(uuid.uuid4()),
        "status": core["status"],
        "answer": core["answer"],
        "confidence": core["confidence"],
        "sources": core["sources"],
        "metadata": metadata,
        "error_message": core["error_message"],
    }
    if core["warnings"]:
        response["warnings"] = core["warnings"]
    return response


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def document_view(doc: Document) -> Body:
    return {
        "id": doc.id,
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "title": doc.title,
        "content": doc.content,
        "metadata": doc.metadata,
        "collection": doc.collection,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "chunks": [
            {"id": c.id, "chunk_index": c.chunk_index, "section": c.section, "content": c.content}
            for c in doc.chunks
        ],
    }
