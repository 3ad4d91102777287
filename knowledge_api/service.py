"""KnowledgeService: the query pipeline (cache -> embed -> search -> synthesize),
documents, detail and health. Nothing here knows HTTP or which backend runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api import __version__
from knowledge_api.cache import Caches
from knowledge_api.embeddings import embedders
from knowledge_api.embeddings.base import Embedder
from knowledge_api.errors import BackendConnectionError, EmbeddingError, InvalidRequest, NotFound
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.pipeline import Ingestor
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    SOURCE_TYPES,
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
from knowledge_api.synthesis import synthesizers
from knowledge_api.synthesis.base import Synthesizer

log = logging.getLogger("knowledge_api")
Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Retrieval:
    hits: list[SearchHit]
    vector: np.ndarray | None
    embedding_ms: float
    search_ms: float
    warnings: list[str]


class KnowledgeService:
    def __init__(
        self,
        settings: Settings,
        store: KnowledgeStore,
        embedder: Embedder,
        synthesizer: Synthesizer,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.synthesizer = synthesizer
        self.caches = Caches.from_settings(settings)
        self.started = time.monotonic()
        self.embedder_ready = False
        self._model_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")

    @classmethod
    def from_settings(cls, settings: Settings) -> KnowledgeService:
        return cls(
            settings,
            stores.create(settings.store, settings),
            embedders.create(settings.embedder, settings),
            synthesizers.create(settings.synthesizer, settings),
        )

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, seed: bool = False) -> None:
        """Load the model and open the store. A failure of either degrades the service
        (reported by /health and in responses) instead of stopping it."""
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
            request.cache_key(), lambda: self._answer(request)
        )
        if not computed:
            timings = {name: 0.0 for name in timings}
        metrics = {"total_ms": elapsed_ms(start), "cache_hit": not computed, **timings}
        return {**body, "metrics": metrics}

    async def query_events(self, request: QueryRequest) -> AsyncIterator[tuple[str, Any]]:
        """The query as events: results, then the synthesis, then the metrics."""
        response = await self.query(request)
        yield "results", {"results": response["results"]}
        if "synthesis" in response:
            yield "synthesis", {"synthesis": response["synthesis"]}
        yield "done", {"metrics": response["metrics"], "warnings": response.get("warnings", [])}

    async def _answer(self, request: QueryRequest) -> tuple[tuple[Body, Body], bool]:
        generation = await self.store.generation()
        found = await self.retrieve(
            request.query, request.limit, request.search_filters(), request.threshold
        )
        timings = {"embedding_ms": found.embedding_ms, "search_ms": found.search_ms}
        body: Body = {"results": [result_view(hit) for hit in found.hits]}
        if request.synthesize:
            synthesized = time.perf_counter()
            body["synthesis"] = (await self.synthesizer.synthesize(request.query, found.hits)).text
            timings["synthesis_ms"] = elapsed_ms(synthesized)
        if found.warnings:
            body["warnings"] = found.warnings
        cacheable = not found.warnings and await self.store.generation() == generation
        return (body, timings), cacheable

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

    async def detail(self, source_type: str, key: str) -> Body:
        if source_type not in SOURCE_TYPES:
            raise InvalidRequest("type", f"must be one of: {', '.join(SOURCE_TYPES)}")
        doc = await self.store.find_document(source_type, key, DEFAULT_COLLECTION)
        if doc is None:
            raise NotFound(f"no {source_type} record with id {key!r}", type=source_type, id=key)
        return document_view(doc)

    # -- health ---------------------------------------------------------------------

    async def health(self) -> Body:
        store = await self.store.health_check()
        embedder = self.embedder.health()
        synthesizer = self.synthesizer.health()
        if store.get("status") != "ok":
            status = "unhealthy"
        elif embedder.get("status") != "ok" or synthesizer.get("status") != "ok":
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
        }


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
