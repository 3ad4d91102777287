"""The two cache tiers: responses (tier 1) and query embeddings (tier 2).

A tier's entries live in a `cachetools.TTLCache`, which expires them and evicts the
least recently used; on top of it a tier counts its hits and misses, computes a
missing value once however many identical requests arrive together (single-flight),
and keeps each entry under a scope: an entry is found only by a lookup in the same
scope. Tier 2's scope is the embedder's identity; tier 1's is the collection the
answer searched and that collection's generation in the store, so a write empties
only its own collection's answers, whichever process or replica wrote. Where the
tiers live is chosen by name (KNOWLEDGE_CACHE, the registry in `__init__.py`):
`memory.py`, or `redis.py` shared by the replicas behind a small tier of this kind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from cachetools import TTLCache

V = TypeVar("V")
Event = tuple[str, Any]
COMPUTED = "computed"
"""The last event of a computation: (value to cache, whether it may be cached)."""
Scope = Hashable
Collections = str | tuple[str, ...]
"""What a tier-1 answer is kept under: its collection, or the several it searched."""
Compute = Callable[[], Awaitable[tuple[V, bool]]]


class Tier(Generic[V]):
    """A bounded tier with a TTL whose entries each belong to a scope (by default the
    one `follow` set): a lookup in another scope misses."""

    def __init__(self, max_entries: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self.entries: TTLCache[Hashable, tuple[Scope, V]] = TTLCache(max_entries, ttl, clock)
        self.scope: Scope = None
        self.hits = 0
        self.misses = 0
        self._pending: dict[tuple[Hashable, Scope], asyncio.Future[V]] = {}

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        """Another clock (a simulation's): the entries kept by the old one are dropped."""
        self._clock = clock
        self.entries = TTLCache(self.max_entries, self.ttl, clock)

    def __len__(self) -> int:
        self.entries.expire()
        return len(self.entries)

    def entry(self, key: Hashable) -> tuple[Scope, V] | None:
        """The live (scope, value) of `key`, whatever its scope; not counted."""
        try:  # not TTLCache.get: it looks the key up twice, the hit path's main cost
            return self.entries[key]
        except KeyError:
            return None

    def get(self, key: Hashable, scope: Scope = None) -> V | None:
        """The live value of `key` in `scope`, counted as a hit, or None (a miss)."""
        found = self.entry(key)
        if found is not None and found[0] == (self.scope if scope is None else scope):
            self.hits += 1
            return found[1]
        self.misses += 1
        return None

    def peek(self, key: Hashable, scope: Scope = None) -> V | None:
        """The live value of `key` in `scope`, not counted."""
        found = self.entry(key)
        if found is not None and found[0] == (self.scope if scope is None else scope):
            return found[1]
        return None

    def put(self, key: Hashable, value: V, scope: Scope = None) -> None:
        self.entries[key] = (self.scope if scope is None else scope, value)

    def clear(self) -> None:
        self.entries.clear()

    def follow(self, scope: Scope) -> None:
        """Look up and keep in `scope` from now on: what other scopes hold is no answer."""
        self.clear()
        self.scope = scope

    async def fetch(self, key: Hashable, scope: Scope = None) -> V | None:
        """`get`, for tiers whose entries may live in another process."""
        return self.get(key, scope)

    async def keep(self, key: Hashable, value: V, scope: Scope = None) -> None:
        self.put(key, value, scope)

    async def get_or_compute(
        self, key: Hashable, compute: Compute[V], scope: Scope = None
    ) -> tuple[V, bool]:
        """(value, computed_here). `compute` returns (value, cacheable)."""
        scope = self.scope if scope is None else scope
        value = await self.fetch(key, scope)
        if value is not None:
            return value, False
        pending = self._pending.get((key, scope))
        if pending is not None:
            self.misses -= 1
            self.hits += 1
            return await asyncio.shield(pending), False
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key, scope] = future
        try:
            value, computed = await self.computed_once(key, compute, scope)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # followers re-raise it; nobody else needs to look
            raise
        finally:
            del self._pending[key, scope]
        future.set_result(value)
        return value, computed

    async def computed_once(
        self, key: Hashable, compute: Compute[V], scope: Scope
    ) -> tuple[V, bool]:
        """(value, computed_here) of a miss no other request of this process computes:
        here, computed and kept when cacheable; a shared tier may get it from another."""
        value, cacheable = await compute()
        if cacheable:
            await self.keep(key, value, scope)
        return value, True


class SharedLink(Protocol):
    """The connection of tiers shared with other processes, as /health and /metrics
    read it."""

    @property
    def up(self) -> bool: ...

    @property
    def errors(self) -> int: ...

    def health(self) -> dict[str, Any]: ...

    async def checked(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@dataclass
class Caches:
    """Both tiers of a service; a backend (the registry's) builds them from settings."""

    responses: Tier[Any]
    embeddings: Tier[Any]
    shared: SharedLink | None = None
    """The connection both tiers share with the other replicas, if they do."""
    backend: ClassVar[str] = "memory"

    async def health(self) -> dict[str, Any]:
        """Where the tiers live and, when shared, whether the shared tier answers now
        ("unavailable": each replica serves from its own memory until it is back)."""
        if self.shared is None:
            return {"backend": self.backend, "status": "ok"}
        return await self.shared.checked()

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()

    def stats(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "response_entries": len(self.responses),
            "embedding_entries": len(self.embeddings),
            "hit_rate": hit_rate(self.responses),
            "response_hits": self.responses.hits,
            "response_misses": self.responses.misses,
            "embedding_hit_rate": hit_rate(self.embeddings),
            **({} if self.shared is None else {self.backend: self.shared.health()}),
        }


def hit_rate(tier: Tier[Any]) -> float:
    total = tier.hits + tier.misses
    return round(tier.hits / total, 4) if total else 0.0


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
    """Tier 1 as requests use it: a value served from it or computed once, kept under
    its collection's generation in the store (read before it is computed), so no
    answer outlives a change of its collection and a change of another leaves it be."""

    def __init__(self, caches: Caches, generation: Callable[[str], Awaitable[Hashable]]) -> None:
        self.caches = caches
        self.store_generation = generation
        """The store's generation of a collection."""
        self.seen: dict[str, Hashable] = {}
        """Each collection's generation when last read."""

    async def scope(self, collection: Collections) -> tuple[Collections, Hashable]:
        """The scope answers of `collection` are kept and found in now; of several
        collections searched as one, every one's generation: a write to any of them
        makes the answer a miss."""
        names = (collection,) if isinstance(collection, str) else collection
        generations = []
        for name in names:
            generation = await self.store_generation(name)
            self.seen[name] = generation
            generations.append(generation)
        if isinstance(collection, str):
            return collection, generations[0]
        return collection, tuple(generations)

    async def still(self, key: Hashable, value: Any) -> bool:
        """Whether tier 1 still serves `value` for `key` (its collection unchanged since,
        the entry alive); not counted: `hit` counts it once it is served."""
        entry = self.caches.responses.entry(key)
        if entry is None or entry[1] is not value or not isinstance(entry[0], tuple):
            return False
        return bool(entry[0] == await self.scope(entry[0][0]))

    def hit(self, key: Hashable, value: Any) -> None:
        """Count `value`, which `still` found at `key` and which was then served by other
        means than `served`, as a hit (`still`'s lookup made it the most recent)."""
        self.caches.responses.hits += 1

    def peek(self, key: Hashable) -> Any:
        """The value tier 1 holds for `key` in its collection's generation as last
        read, or None; not counted."""
        entry = self.caches.responses.entry(key)
        if entry is None or not isinstance(entry[0], tuple):
            return None
        collection, generation = entry[0]
        if isinstance(collection, str):
            return entry[1] if self.seen.get(collection) == generation else None
        seen = tuple(self.seen.get(name) for name in collection)
        return entry[1] if seen == generation else None

    async def served(
        self, key: Hashable, compute: Compute[V], collection: Collections
    ) -> Served[V]:
        """The value of `key` in `collection`, or `compute()`'s (value, cacheable),
        computed once for identical concurrent requests."""
        start = time.perf_counter()
        scope = await self.scope(collection)
        value, computed = await self.caches.responses.get_or_compute(key, compute, scope)
        return Served(value, not computed, start)

    async def served_events(
        self,
        key: Hashable,
        run: AsyncGenerator[Event, None],
        replay: Callable[[Any], list[Event]],
        collection: Collections,
    ) -> AsyncGenerator[Event, None]:
        """A hit replayed, or `run`'s events passed on as they come (the value it
        computes last, as (COMPUTED, (value, cacheable)), is cached); then
        ("done", Served)."""
        start = time.perf_counter()
        scope = await self.scope(collection)
        async with aclosing(run):
            cached = await self.caches.responses.fetch(key, scope)
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
                    await self.caches.responses.keep(key, value, scope)
                yield "done", Served(value, False, start)
