"""Opening and closing the service: the model loaded, the store and the logs beside it
opened, the empty store seeded; each closed in turn when the service stops."""

from __future__ import annotations

import logging

from knowledge_api.catalog import Catalog
from knowledge_api.errors import BackendConnectionError, EmbeddingError

log = logging.getLogger("knowledge_api")


class Startup(Catalog):
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


def single_threaded_blas() -> None:
    """Exact vector search is one memory-bound matrix-vector product: a second BLAS
    thread barely speeds it up, and its spinning competes with the event loop (on a
    busy 2-core host, 5k-chunk searches went from 0.6 ms to 2.9 ms with two)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
