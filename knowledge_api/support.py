"""The sidecar contract in process: `retrieve_knowledge(intent, message, metadata)` for
a host program that is not async (spec: Knowledge Retriever, internal contract).

The engine runs on an event loop of its own thread; the function never raises and
answers the fallback until the model is loaded. The first call starts the default
engine, configured from the environment (.env).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from knowledge_api.compose import build_service
from knowledge_api.settings import Settings
from knowledge_api.usecases import support

log = logging.getLogger("knowledge_api.support")
Body = dict[str, Any]
T = TypeVar("T")


class SupportRetriever:
    """retrieve_knowledge for a host program that is not async: the engine runs on an
    event loop of its own thread. Until the model is loaded, calls get the fallback."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.service = build_service(self.settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="knowledge-support", daemon=True
        )
        self._thread.start()
        self._started = asyncio.run_coroutine_threadsafe(self.service.start(), self._loop)

    def retrieve_knowledge(self, intent: str, message: str, metadata: dict[str, Any]) -> Body:
        try:
            if not self._started.done():
                return unavailable("still starting (loading the model)")
            self._started.result()
            # the coroutine keeps its own budget; this bound only guards a stuck loop
            guard = self.settings.support_timeout_ms / 1000 + 1.0
            return self.run(support.retrieve(self.service, intent, message, metadata), guard)
        except Exception as e:
            log.warning("support retrieval unavailable: %s", e)
            return unavailable(getattr(e, "message", type(e).__name__))

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine of the engine (an ingest, a sync) on its loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def close(self) -> None:
        if self._started.done() and self._started.exception() is None:
            self.run(self.service.stop(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


_default: SupportRetriever | None = None
_default_lock = threading.Lock()


def retrieve_knowledge(intent: str, message: str, metadata: dict[str, Any]) -> Body:
    """The sidecar contract, in process, configured from the environment (.env).

    The first call starts the engine in the background and answers the fallback;
    later calls search. Never raises."""
    global _default
    try:
        with _default_lock:
            if _default is None:
                _default = SupportRetriever()
            retriever = _default
    except Exception as e:
        log.warning("support retrieval cannot start: %s", e)
        return unavailable(getattr(e, "message", type(e).__name__))
    return retriever.retrieve_knowledge(intent, message, metadata)


def unavailable(why: str) -> Body:
    return support.fallback(f"{support.UNAVAILABLE}: {why}")
