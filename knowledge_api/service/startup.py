"""Opening and closing the service: the store and the logs beside it opened, the
models loaded, the empty store seeded in the background; each closed in turn when the
service stops."""

from __future__ import annotations

import asyncio
import logging

from knowledge_api.errors import BackendConnectionError, EmbeddingError
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Engine
from knowledge_api.service.trail import Trail

log = logging.getLogger("knowledge_api")


class Startup:
    """Opening and closing what the engine holds, and the seed of an empty store."""

    def __init__(self, engine: Engine, catalog: Catalog, trail: Trail) -> None:
        self.engine = engine
        self.catalog = catalog
        self.trail = trail
        self._seeding: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the store, then load the models (commands and scripts; the app opens
        and loads in two steps, checking its keys between them)."""
        await self.open()
        await self.load()

    async def open(self) -> None:
        """Open the store and the logs beside it, no model: a refusal the store can
        tell (it holds another embedder's vectors) comes within a second of start,
        before a model loads or anything is written. A store that cannot open degrades
        the service (reported by /health, 503 on requests) instead of stopping it."""
        single_threaded_blas()
        try:
            await self.open_storage()
        except BackendConnectionError as e:
            log.error("store unavailable: %s", e)

    async def load(self) -> None:
        """Load the models. A failure degrades the service (reported by /health and in
        responses) instead of stopping it."""
        await self.engine.synthesizer.open()
        # before the embedder: loading the local model turns the model hub off for the
        # whole process, and a cross-encoder given by model id may need to fetch it
        await self.engine.reranker.open()
        try:
            await self.engine.in_model_thread(self.engine.embedder.load)
            self.engine.embedder_ready = True
        except EmbeddingError as e:
            log.error("embedder unavailable, searching by keyword only: %s", e)

    async def seed_in_background(self) -> None:
        """With KNOWLEDGE_SEED_ON_EMPTY and an empty store, index the seed documents in
        the background: the service answers meanwhile, from what is indexed so far, and
        /health says how far the seed is (`seeding`)."""
        if not self.engine.settings.seed_on_empty:
            return
        try:
            empty = await self.engine.store.count() == 0
        except BackendConnectionError:
            return  # the store did not open: /health says so
        if empty and self.engine.embedder_ready:
            options = LoadOptions(max_chars=self.engine.settings.max_file_chars)
            loaded = await asyncio.to_thread(load_paths, [self.catalog.seed_path()], options)
            self.engine.seeding = {"done": 0, "total": len(loaded.documents)}
            self._seeding = asyncio.create_task(self.catalog.seed(loaded))
        elif empty:
            log.warning("not seeding the empty store: the embedder is unavailable")

    async def seeded(self) -> None:
        """Once the seed started by `seed_in_background` is over (at once without one)."""
        if self._seeding is not None:
            await asyncio.shield(self._seeding)

    async def load_embedder(self) -> None:
        """Load the model after `open_storage`, for a command that found work for it."""
        single_threaded_blas()
        await self.engine.in_model_thread(self.engine.embedder.load)
        self.engine.embedder_ready = True

    async def open_storage(self) -> None:
        """Open the store and the API keys, no model: what commands that embed nothing
        need (key management, say)."""
        engine = self.engine
        await engine.store.open()
        await engine.store.check_embedder(engine.embedder.name, engine.embedder.dimension)
        await engine.keys.open()
        await engine.audit_log.open()
        await engine.feedback_log.open()
        await engine.jobs.open()

    async def stop(self) -> None:
        engine = self.engine
        if self._seeding is not None and not self._seeding.done():
            self._seeding.cancel()
            log.warning(
                "stopped while seeding the empty store (%s): the next start does not seed "
                "a store that holds documents; `knowledge-api ingest %s` indexes the rest",
                self.catalog.seeding_progress(),
                self.catalog.seed_path(),
            )
        await engine.query_batcher.close()
        await engine.prefetcher.close()
        for task in engine.learning.values():
            task.cancel()
        await engine.reranker.close()
        await engine.synthesizer.close()
        await engine.keys.close()
        await engine.audit_log.close()
        await self.trail.recorded()
        await engine.feedback_log.close()
        await engine.jobs.close()
        await engine.store.close()
        await engine.caches.close()
        engine.close_threads()


def single_threaded_blas() -> None:
    """Exact vector search is one memory-bound matrix-vector product: a second BLAS
    thread barely speeds it up, and its spinning competes with the event loop (on a
    busy 2-core host, 5k-chunk searches went from 0.6 ms to 2.9 ms with two)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
