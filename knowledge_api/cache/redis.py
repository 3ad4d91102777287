"""Both cache tiers in Redis, shared by every replica (KNOWLEDGE_CACHE=redis).

Each tier keeps a small in-process tier in front (a hit there costs no round trip)
and Redis behind it. Redis entries live under KNOWLEDGE_REDIS_PREFIX, each with the
tier's TTL, and a sorted set per tier bounds their number the way the memory tier
does: least recently used first, at the tier's KNOWLEDGE_*_CACHE_SIZE. An entry's
Redis key carries its scope (for tier 1, its collection's generation in the store),
so an answer made before a write of its collection is never found after it, by any
replica, while the other collections' answers stay. A miss is computed once across
the replicas: the first takes a short lock (SET NX PX) and the others wait for its
value, computing it themselves if the lock goes away without one (the holder died,
or its answer was not cacheable).

Redis is never needed to answer: when a call fails, the tiers go on from memory alone,
/health and /metrics say so, and Redis is tried again a second later; /health asks
Redis itself (at most once a second), so it reports a Redis that went away or came
back before any request notices.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import pickle
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from knowledge_api.cache.base import Caches, Compute, Scope, Tier
from knowledge_api.registry import import_extra

V = TypeVar("V")
T = TypeVar("T")
log = logging.getLogger("knowledge_api")

LOCAL_ENTRIES = 1000
"""Entries each tier keeps in process, in front of Redis: the hottest queries."""
RETRY_SECONDS = 1.0
"""After a failed call, Redis is left alone this long (calls go to memory only)."""
HEALTH_SECONDS = 1.0
"""How long /health trusts its last PING of Redis."""
TIMEOUT_SECONDS = 0.25
"""Connect and read timeout of one call: a hung Redis costs a query at most this."""
LOCK_MS = 10_000
"""How long a computing replica holds a miss: past it a waiter computes itself."""
POLL_SECONDS = 0.02
"""How often a waiting replica looks for the value the lock holder computes."""

PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3] - ARGV[2])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, over - 1)
    redis.call('DEL', unpack(oldest))
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
"""
"""Keep a value and its recency; drop what expired from the index and the least
recently used entries past the bound (all keys of a tier live on one Redis)."""
GET = """
local value = redis.call('GET', KEYS[1])
if value then redis.call('ZADD', KEYS[2], 'XX', ARGV[1], KEYS[1]) end
return value
"""
"""A value, made the most recently used: one call, one round trip."""
UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""Release a lock only if it is still ours (it may have expired and been retaken)."""


class RedisLink:
    """The one Redis connection of a service, and whether it answers."""

    def __init__(self, url: str, prefix: str) -> None:
        redis = import_extra("redis.asyncio", "redis")
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError
        from redis.retry import Retry

        self.url = url
        self.prefix = prefix
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=TIMEOUT_SECONDS,
            socket_connect_timeout=TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),  # a failure degrades at once; RETRY_SECONDS paces
        )
        self.get_script = self.client.register_script(GET)
        self.put_script = self.client.register_script(PUT)
        self.unlock_script = self.client.register_script(UNLOCK)
        self.error = ""
        """Why the last call failed; empty while Redis answers."""
        self.errors = 0
        self._retry_at = 0.0
        self._checked_at = -HEALTH_SECONDS
        self._failures = (TimeoutError, RedisError, OSError)

    @property
    def up(self) -> bool:
        return not self.error

    async def call(self, work: Callable[[Any], Awaitable[T]]) -> T | None:
        """`work(client)`'s result, or None when Redis is down or the call fails (the
        failure is remembered, logged once, and calls skip Redis for RETRY_SECONDS)."""
        if self.error and time.monotonic() < self._retry_at:
            return None
        return await self._called(work)

    async def _called(self, work: Callable[[Any], Awaitable[T]]) -> T | None:
        try:
            result = await work(self.client)
        except self._failures as e:
            self.errors += 1
            if not self.error:
                log.warning("redis cache unavailable, serving from memory: %s", e)
            self.error = f"{type(e).__name__}: {e}"
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return None
        if self.error:
            log.info("redis cache answers again")
            self.error = ""
        return result

    async def checked(self) -> dict[str, Any]:
        """`health` after asking Redis (a PING, at most once every HEALTH_SECONDS and
        within TIMEOUT_SECONDS): a Redis that went away or came back shows at once,
        not when a request next uses the cache."""
        if time.monotonic() - self._checked_at >= HEALTH_SECONDS:
            self._checked_at = time.monotonic()
            await self._called(lambda client: client.ping())
        return self.health()

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {
            "backend": "redis",
            "status": "ok" if self.up else "unavailable",
            "location": location(self.url),
            "prefix": self.prefix,
            "errors": self.errors,
        }
        if self.error:
            report["error"] = self.error
            report["serving"] = "memory only, retrying every second"
        return report

    async def close(self) -> None:
        await self.client.aclose()


class SharedTier(Tier[V]):
    """A tier in Redis behind an in-process one. `hits` count both; `shared_hits`
    the ones Redis answered."""

    def __init__(self, link: RedisLink, name: str, max_entries: int, ttl: float) -> None:
        super().__init__(min(LOCAL_ENTRIES, max_entries), ttl)
        self.link = link
        self.name = name
        self.shared_max_entries = max_entries
        self.shared_hits = 0

    def redis_key(self, key: Hashable, scope: Scope = None, kind: str = "v") -> str:
        scoped = (self.scope if scope is None else scope, key)
        digest = hashlib.blake2b(repr(scoped).encode(), digest_size=16).hexdigest()
        return f"{self.link.prefix}{self.name}:{kind}:{digest}"

    @property
    def index_key(self) -> str:
        return f"{self.link.prefix}{self.name}:lru"

    async def fetch(self, key: Hashable, scope: Scope = None) -> V | None:
        value = self.get(key, scope)
        if value is not None:
            return value
        value = await self._fetch_shared(key, scope)
        if value is not None:
            self._shared_hit(key, value, scope)
        return value

    def _shared_hit(self, key: Hashable, value: V, scope: Scope) -> None:
        """A value found in Redis: a hit (not the miss `get` counted), kept in front."""
        self.misses -= 1
        self.hits += 1
        self.shared_hits += 1
        self.put(key, value, scope)

    async def _fetch_shared(self, key: Hashable, scope: Scope) -> V | None:
        keys, now = [self.redis_key(key, scope), self.index_key], time.time() * 1000
        raw = await self.link.call(lambda _: self.link.get_script(keys=keys, args=[now]))
        return None if raw is None else decoded(raw)

    async def keep(self, key: Hashable, value: V, scope: Scope = None) -> None:
        self.put(key, value, scope)
        name = self.redis_key(key, scope)
        ttl_ms = max(1, int(self.ttl * 1000))
        args = [encoded(value), ttl_ms, time.time() * 1000, self.shared_max_entries]
        await self.link.call(lambda _: self.link.put_script(keys=[name, self.index_key], args=args))

    async def computed_once(
        self, key: Hashable, compute: Compute[V], scope: Scope
    ) -> tuple[V, bool]:
        """Compute under the replicas' lock of `key`, or wait for the replica that holds
        it; compute here when Redis is down or the holder leaves no value."""
        lock, token = self.redis_key(key, scope, "lock"), secrets.token_hex(8)

        async def take(client: Any) -> bool:
            return bool(await client.set(lock, token, nx=True, px=LOCK_MS))

        taken = await self.link.call(take)  # None: Redis is down, compute here
        if taken is False:
            value = await self._awaited(key, scope, lock)
            if value is not None:
                return value, False
        try:
            return await super().computed_once(key, compute, scope)
        finally:
            if taken:
                await self.link.call(lambda _: self.link.unlock_script(keys=[lock], args=[token]))

    async def _awaited(self, key: Hashable, scope: Scope, lock: str) -> V | None:
        """The value another replica computes under `lock`, or None once the lock is
        gone without one (or Redis stopped answering)."""
        deadline = time.monotonic() + LOCK_MS / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            value = await self._fetch_shared(key, scope)
            if value is not None:
                self._shared_hit(key, value, scope)
                return value
            if not await self.link.call(lambda c: c.exists(lock)):
                return await self._fetch_shared(key, scope)  # kept just before the unlock
        return None


class RedisCaches(Caches):
    backend = "redis"

    @classmethod
    def from_settings(cls, settings: Any) -> RedisCaches:
        """Both tiers over one Redis connection."""
        link = RedisLink(settings.redis_url.get(), settings.redis_prefix)
        responses: SharedTier[Any] = SharedTier(
            link, "responses", settings.response_cache_size, settings.response_cache_ttl
        )
        embeddings: SharedTier[Any] = SharedTier(
            link, "embeddings", settings.embedding_cache_size, settings.embedding_cache_ttl
        )
        return cls(responses, embeddings, link)


def encoded(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class _Unpickler(pickle.Unpickler):
    """Builds only what the tiers keep (the package's own values, numpy arrays and
    plain containers): a value planted in Redis cannot run other code."""

    SAFE_PACKAGES = ("knowledge_api", "numpy", "datetime", "collections")
    SAFE_NAMES: ClassVar[set[tuple[str, str]]] = {
        ("copyreg", "_reconstructor"),
        ("copyreg", "__newobj__"),
        *(("builtins", n) for n in ("tuple", "list", "dict", "set", "frozenset", "object")),
        *(("builtins", n) for n in ("float", "int", "str", "bytes", "bool", "complex")),
    }

    def find_class(self, module: str, name: str) -> Any:
        package = module.split(".", 1)[0]
        if (module, name) in self.SAFE_NAMES or package in self.SAFE_PACKAGES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a cached value's type")


def decoded(raw: bytes) -> Any:
    try:
        return _Unpickler(io.BytesIO(raw)).load()
    except Exception as e:  # an entry of another version or a planted one: a miss
        log.warning("ignored a redis cache entry that does not decode: %s", e)
        return None


def location(url: str) -> str:
    """host:port/db of a Redis URL, never its password."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or ''}"
