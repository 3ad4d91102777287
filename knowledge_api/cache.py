"""The two cache tiers: responses (tier 1) and query embeddings (tier 2).

Each tier is a bounded LRU with a TTL, counts its hits and misses, and computes a
missing value once however many identical requests arrive together (single-flight).
Tier 1 entries belong to a store generation: when the store changes, tier 1 is
emptied, so no answer outlives an ingest or a delete. With KNOWLEDGE_CACHE=redis both
tiers are shared by the replicas (`shared_cache.py`), behind a small tier of this kind.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from knowledge_api.shared_cache import RedisLink

V = TypeVar("V")
Event = tuple[str, Any]
COMPUTED = "computed"
"""The last event of a computation: (value to cache, whether it may be cached)."""


class TTLCache(Generic[V]):
    def __init__(self, max_entries: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.max_entries = max_entries
        self.ttl = ttl
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._pending: dict[Hashable, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        """The live value for `key`, counted as a hit, or None (a miss)."""
        entry = self._entries.get(key)
        if entry is not None:
            if entry[0] > self.clock():
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
            del self._entries[key]
        self.misses += 1
        return None

    def peek(self, key: Hashable) -> V | None:
        """The live value for `key`, neither counted nor moved."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] > self.clock() else None

    def hit_if(self, key: Hashable, value: V) -> bool:
        """Whether `key` still holds this very value (alive): then counted as a hit."""
        if self.peek(key) is not value:
            return False
        self._entries.move_to_end(key)
        self.hits += 1
        return True

    def put(self, key: Hashable, value: V) -> None:
        self._entries[key] = (self.clock() + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def follow(self, scope: Hashable) -> None:
        """Entries made under another scope (a store generation) are no longer valid."""
        self.clear()

    async def fetch(self, key: Hashable) -> V | None:
        """`get`, for tiers whose entries may live in another process."""
        return self.get(key)

    async def keep(self, key: Hashable, value: V) -> None:
        self.put(key, value)

    async def get_or_compute(
        self, key: Hashable, compute: Callable[[], Awaitable[tuple[V, bool]]]
    ) -> tuple[V, bool]:
        """(value, computed_here). `compute` returns (value, cacheable)."""
        value = await self.fetch(key)
        if value is not None:
            return value, False
        pending = self._pending.get(key)
        if pending is not None:
            self.misses -= 1
            self.hits += 1
            return await asyncio.shield(pending), False
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value, computed = await self.computed_once(key, compute)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # followers re-raise it; nobody else needs to look
            raise
        finally:
            del self._pending[key]
        future.set_result(value)
        return value, computed

    async def computed_once(
        self, key: Hashable, compute: Callable[[], Awaitable[tuple[V, bool]]]
    ) -> tuple[V, bool]:
        """(value, computed_here) of a miss no other request of this process computes:
        here, computed and kept when cacheable; a shared tier may get it from another."""
        value, cacheable = await compute()
        if cacheable:
            await self.keep(key, value)
        return value, True


@dataclass
class Caches:
    responses: TTLCache[Any]
    embeddings: TTLCache[Any]
    generation: Hashable = None
    shared: RedisLink | None = None
    """The Redis link both tiers share (KNOWLEDGE_CACHE=redis), else None."""

    @classmethod
    def from_settings(cls, settings: Any) -> Caches:
        if settings.cache == "redis":
            from knowledge_api.shared_cache import shared_caches

            responses, embeddings, link = shared_caches(settings)
            return cls(responses, embeddings, shared=link)
        return cls(
            responses=TTLCache(settings.response_cache_size, settings.response_cache_ttl),
            embeddings=TTLCache(settings.embedding_cache_size, settings.embedding_cache_ttl),
        )

    def follow_store(self, generation: Hashable) -> None:
        """Empty tier 1 when the store's content changed since the last call."""
        if generation != self.generation:
            self.responses.follow(generation)
            self.generation = generation

    def health(self) -> dict[str, Any]:
        """Where the tiers live and, when shared, whether Redis answers ("unavailable":
        each replica serves from its own memory until it is back)."""
        if self.shared is None:
            return {"backend": "memory", "status": "ok"}
        return self.shared.health()

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()

    def stats(self) -> dict[str, Any]:
        return {
            "backend": "memory" if self.shared is None else "redis",
            "response_entries": len(self.responses),
            "embedding_entries": len(self.embeddings),
            "hit_rate": hit_rate(self.responses),
            "response_hits": self.responses.hits,
            "response_misses": self.responses.misses,
            "embedding_hit_rate": hit_rate(self.embeddings),
            **({} if self.shared is None else {"redis": self.health()}),
        }


def hit_rate(cache: TTLCache[Any]) -> float:
    total = cache.hits + cache.misses
    return round(cache.hits / total, 4) if total else 0.0


@dataclass(frozen=True, slots=True)
class Served(Generic[V]):
    """A value as one request got it: from tier 1 or computed for it."""

    value: V
    cache_hit: bool
    started: float
    """perf_counter() when the request began: its total time is measured from here."""

    @property
    def total_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 3)


class ResponseTier:
    """Tier 1 as requests use it: a value served from it or computed once, following
    the store's generation so no answer outlives a change of the store."""

    def __init__(self, caches: Caches, generation: Callable[[], Awaitable[Hashable]]) -> None:
        self.caches = caches
        self.store_generation = generation

    async def generation(self) -> Hashable:
        generation = await self.store_generation()
        self.caches.follow_store(generation)
        return generation

    async def still(self, key: Hashable, value: Any) -> bool:
        """Whether tier 1 still serves `value` for `key` (the store unchanged since, the
        entry alive); not counted: `hit` counts it once it is served."""
        await self.generation()
        return self.peek(key) is value

    def hit(self, key: Hashable, value: Any) -> None:
        """Count `value`, served from `key` by other means than `served`, as a hit."""
        self.caches.responses.hit_if(key, value)

    def peek(self, key: Hashable) -> Any:
        """The value tier 1 holds for `key`, or None; not counted."""
        return self.caches.responses.peek(key)

    async def served(
        self, key: Hashable, compute: Callable[[], Awaitable[tuple[V, bool]]]
    ) -> Served[V]:
        """The value of `key`, or `compute()`'s (value, cacheable), computed once for
        identical concurrent requests."""
        start = time.perf_counter()
        await self.generation()
        value, computed = await self.caches.responses.get_or_compute(key, compute)
        return Served(value, not computed, start)

    async def served_events(
        self,
        key: Hashable,
        run: AsyncGenerator[Event, None],
        replay: Callable[[Any], list[Event]],
    ) -> AsyncGenerator[Event, None]:
        """A hit replayed, or `run`'s events passed on as they come (the value it
        computes last, as (COMPUTED, (value, cacheable)), is cached); then
        ("done", Served)."""
        start = time.perf_counter()
        await self.generation()
        async with aclosing(run):
            cached = await self.caches.responses.fetch(key)
            if cached is not None:
                for event in replay(cached):
                    yield event
                yield "done", Served(cached, True, start)
                return
            async for name, data in run:
                if name != COMPUTED:
                    yield name, data
                    continue
                value, cacheable = data
                if cacheable:
                    await self.caches.responses.keep(key, value)
                yield "done", Served(value, False, start)
