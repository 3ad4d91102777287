"""Micro-batching of query embeddings.

Concurrent distinct queries are embedded together: one forward pass of a few short
texts costs little more than one of a single text, so under load the model keeps up
with many more queries per second. A query that arrives while the model is busy
waits for the next batch; one that arrives when the model is idle goes at once,
after at most `window_ms` spent waiting for company. The queue is bounded: past
`max_queue` waiting queries, `embed` refuses with Overloaded (503 + Retry-After)
instead of letting waits grow without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from knowledge_api.errors import Overloaded

RunBatch = Callable[[Sequence[str]], Awaitable[np.ndarray]]
RETRY_AFTER_S = 1
Waiting = tuple[str, "asyncio.Future[np.ndarray]"]


class QueryBatcher:
    def __init__(self, run: RunBatch, window_ms: float, max_batch: int, max_queue: int) -> None:
        self.run = run
        self.window_s = window_ms / 1000
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batches = 0
        self.embedded = 0
        self.refused = 0
        self._waiting: deque[Waiting] = deque()
        self._arrived: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None

    async def embed(self, text: str) -> np.ndarray:
        """The query's vector, computed in the next batch the model runs."""
        if len(self._waiting) >= self.max_queue:
            self.refused += 1
            raise Overloaded(
                f"{len(self._waiting)} queries are waiting for the embedding model: "
                f"retry in {RETRY_AFTER_S} s",
                RETRY_AFTER_S,
                queued=len(self._waiting),
            )
        arrived, full = self._events()
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, future))
        arrived.set()
        if len(self._waiting) >= self.max_batch:
            full.set()
        return await future

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        """The worker and its events, (re)made in the running loop when needed."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._arrived, self._full = asyncio.Event(), asyncio.Event()
            self._worker = loop.create_task(self._work(self._arrived, self._full))
        assert self._arrived is not None and self._full is not None
        return self._arrived, self._full

    async def _work(self, arrived: asyncio.Event, full: asyncio.Event) -> None:
        while True:
            await arrived.wait()
            arrived.clear()
            while self._waiting:
                if self.window_s > 0 and len(self._waiting) < self.max_batch:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(full.wait(), self.window_s)
                full.clear()
                await self._run_one(self._take())

    def _take(self) -> list[Waiting]:
        """Up to max_batch waiting queries whose callers still wait for them."""
        batch: list[Waiting] = []
        while self._waiting and len(batch) < self.max_batch:
            text, future = self._waiting.popleft()
            if not future.done():
                batch.append((text, future))
        return batch

    async def _run_one(self, batch: list[Waiting]) -> None:
        if not batch:
            return
        try:
            vectors = await self.run([text for text, _ in batch])
        except Exception as e:
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        self.batches += 1
        self.embedded += len(batch)
        for (_, future), vector in zip(batch, vectors, strict=True):
            if not future.done():
                future.set_result(vector)

    async def close(self) -> None:
        """Stop the worker; queries still waiting are cancelled."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await self._worker
            self._worker = None
        while self._waiting:
            self._waiting.popleft()[1].cancel()

    def stats(self) -> dict[str, int | float]:
        """Batches run, queries embedded in them, queries refused, queries waiting."""
        return {
            "batches": self.batches,
            "embedded": self.embedded,
            "mean_batch": round(self.embedded / self.batches, 2) if self.batches else 0,
            "refused": self.refused,
            "waiting": len(self._waiting),
        }
