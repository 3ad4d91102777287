"""What the service holds: its seams (store, embedder, reranker, synthesis chain,
caches), the logs kept beside the store (keys, audit trail, answers and ratings, upload
jobs), and the threads model calls run on.

KnowledgeService (knowledge.py) is built on it, and holds its parts, each over this
engine and reading its seams when called (a seam replaced after construction applies
to every part): trail.py (the audit trail, answers recorded for their ratings),
catalog.py (documents and ingestion), startup.py (opening and closing), health.py
(/health and readiness).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from knowledge_api import tracing
from knowledge_api.cache import caches
from knowledge_api.cache.base import ResponseTier
from knowledge_api.embeddings.base import Embedder
from knowledge_api.embeddings.batching import QueryBatcher
from knowledge_api.models import EmbedderIdentity
from knowledge_api.observer import UNOBSERVED, Observer
from knowledge_api.prefetch import Prefetcher
from knowledge_api.rerankers.base import NoReranker, Reranker
from knowledge_api.routing import Centroids
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.stores.fusion import SearchTuning
from knowledge_api.stores.tables.keys import RememberedKeys
from knowledge_api.synthesis.base import Synthesizer
from knowledge_api.synthesis.chain import SynthesisChain

Body = dict[str, Any]


class Engine:
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
        self.seeding: dict[str, Any] = {}
        """The seed of an empty store while it runs: {"done", "total"} documents, and
        "error" if it failed (/health); empty otherwise."""
        self._model_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder")
        self._query_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder-queries")
        """Queries have a thread of their own: one never waits behind an ingestion batch
        (an upload, a sync, the seed of an empty store) that may take seconds."""
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
        tables = store.side_tables(settings.db_path)
        self.keys = RememberedKeys(tables.keys)
        self.audit_log = tables.audit
        self.feedback_log = tables.feedback
        self.jobs = tables.jobs
        self.observer: Observer = UNOBSERVED
        self.centroids: dict[str, Centroids] = {}
        """Each collection's source centroids (routing), at the generation they were learned."""
        self.learning: dict[str, asyncio.Task[Centroids]] = {}
        self.prefetcher = Prefetcher.from_settings(settings)
        if self.prefetcher.enabled:
            self.health_reports["prefetch"] = self.prefetcher.report
        self.hold_parts()

    def hold_parts(self) -> None:
        """Make the parts a service built on the engine holds, once its seams are set
        (the engine alone holds none)."""

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

    def close_threads(self) -> None:
        """Stop the model threads; a batch under way finishes alone."""
        self._model_thread.shutdown(wait=False, cancel_futures=True)
        self._query_thread.shutdown(wait=False, cancel_futures=True)

    async def in_model_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Loading and document batches run one at a time on their own thread, off the
        event loop (queries on another: `_query_thread`)."""
        return await asyncio.get_running_loop().run_in_executor(self._model_thread, fn, *args)

    async def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """One micro-batch of concurrent queries (QueryBatcher), on the query thread.
        Traced, each query's embed span says the size of the batch it was in (the
        batch runs in the batcher's task, outside any request's trace)."""
        loop = asyncio.get_running_loop()
        embed = self.embedder.embed_queries
        vectors: np.ndarray = await loop.run_in_executor(self._query_thread, embed, texts)
        if tracing.recording():
            if len(self._batch_sizes) > 4 * self.settings.query_queue_size:
                self._batch_sizes.clear()  # queries whose callers left never take theirs
            self._batch_sizes.update(dict.fromkeys(texts, len(texts)))
        return vectors

    def embed_attributes(self, kind: str, batch_size: int | None = None) -> dict[str, Any]:
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
