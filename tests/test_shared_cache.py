"""KNOWLEDGE_CACHE=redis against a real Redis server: the tiers shared by replicas,
bounded like the memory tiers, computed once across replicas, and never needed to
answer (Redis going away degrades to memory and comes back)."""

from __future__ import annotations

import asyncio
import os
import pickle
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cache import caches as backends
from knowledge_api.cache import redis as redis_cache
from knowledge_api.cache.base import Caches
from knowledge_api.cache.redis import HEALTH_SECONDS, RETRY_SECONDS, RedisLink, SharedTier
from knowledge_api.config.fields import Secret
from knowledge_api.settings import Settings
from knowledge_api.stores.records import Generation
from tests.conftest import Computation, make_settings
from tests.redis_server import RedisServer, free_port


def redis_settings(tmp_path: Path, server: RedisServer, **changes: Any) -> Settings:
    return make_settings(
        tmp_path, cache="redis", redis_url=Secret(server.url), redis_prefix="test:", **changes
    )


@pytest.fixture
async def replicas(tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[list[Caches]]:
    """The caches of two replicas of one deployment (their Redis calls given 5 s, as
    redis_server gives them: a slow answer is not taken for Redis being down)."""
    settings = redis_settings(tmp_path, redis_server, response_cache_size=3)
    both = [backends.create("redis", settings) for _ in range(2)]
    for caches in both:
        caches.responses.follow(("default", 7))
    yield both
    for caches in both:
        await caches.close()


async def test_a_response_kept_by_one_replica_is_a_hit_on_the_other(
    replicas: list[Caches],
) -> None:
    first, second = (caches.responses for caches in replicas)
    await first.keep(("query", "login timeout"), {"results": [1, 2]})
    assert await second.fetch(("query", "login timeout")) == {"results": [1, 2]}
    assert isinstance(second, SharedTier)
    assert (second.hits, second.shared_hits, second.misses) == (1, 1, 0)
    assert await second.fetch(("query", "other")) is None and second.misses == 1


async def test_entries_of_another_generation_of_their_collection_are_never_found(
    replicas: list[Caches],
) -> None:
    first, second = (caches.responses for caches in replicas)
    await first.keep("qa", "before the write", ("a", 7))
    await first.keep("qb", "b's answer", ("b", 3))
    assert await second.fetch("qa", ("a", 8)) is None  # collection a moved on
    assert await first.fetch("qa", ("a", 8)) is None  # in its own memory tier too
    assert await second.fetch("qb", ("b", 3)) == "b's answer"  # b did not move


async def test_embeddings_are_shared_with_their_ttl(
    replicas: list[Caches], redis_server: RedisServer
) -> None:
    first, second = replicas
    vector = np.arange(4, dtype=np.float32)
    await first.embeddings.keep("login timeout", vector)
    found = await second.embeddings.fetch("login timeout")
    assert found is not None and found.dtype == np.float32 and np.array_equal(found, vector)
    shared = first.embeddings
    assert isinstance(shared, SharedTier)
    ttl_ms = await shared.link.client.pttl(shared.redis_key("login timeout"))
    assert 0 < ttl_ms <= shared.ttl * 1000


async def test_redis_keeps_at_most_the_tier_size_least_recently_used_first(
    replicas: list[Caches],
) -> None:
    tier = replicas[0].responses
    assert isinstance(tier, SharedTier)
    for key in "abc":
        await tier.keep(key, key.upper())
    assert await replicas[1].responses.fetch("a") == "A"  # a is now the most recent
    for key in "de":
        await tier.keep(key, key.upper())
    client = tier.link.client
    assert await client.zcard(tier.index_key) == 3
    alive = [k for k in "abcde" if await client.exists(tier.redis_key(k))]
    assert alive == ["a", "d", "e"]


async def test_a_miss_is_computed_once_across_replicas(replicas: list[Caches]) -> None:
    compute = Computation("answer", 0.2)
    results = await asyncio.gather(
        *(caches.responses.get_or_compute("q", compute) for caches in replicas)
    )
    assert compute.calls == 1
    assert sorted(computed for _, computed in results) == [False, True]
    assert [value for value, _ in results] == ["answer", "answer"]


async def test_a_waiter_computes_itself_when_the_lock_holder_dies(
    replicas: list[Caches],
) -> None:
    tier = replicas[0].responses
    assert isinstance(tier, SharedTier)
    # a replica took the lock and died: no value will come, the lock expires
    await tier.link.client.set(tier.redis_key("q", kind="lock"), "dead", px=300)

    async def compute() -> tuple[str, bool]:
        return "computed here", True

    started = time.monotonic()
    assert await tier.get_or_compute("q", compute) == ("computed here", True)
    assert time.monotonic() - started >= 0.25
    assert await replicas[1].responses.fetch("q") == "computed here"


async def test_an_uncacheable_answer_releases_the_waiters(replicas: list[Caches]) -> None:
    degraded = Computation("degraded", 0.1, cacheable=False)
    results = await asyncio.gather(
        *(caches.responses.get_or_compute("q", degraded) for caches in replicas)
    )
    assert degraded.calls == 2 and all(computed for _, computed in results)
    assert await replicas[0].responses.fetch("q") is None


async def test_a_planted_entry_runs_no_code(replicas: list[Caches], tmp_path: Path) -> None:
    tier = replicas[0].responses
    assert isinstance(tier, SharedTier)
    marker = tmp_path / "ran"
    planted = pickle.dumps(Boom(str(marker)))
    await tier.link.client.set(tier.redis_key("q"), planted)
    assert await replicas[1].responses.fetch("q") is None
    assert not marker.exists()


class Boom:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


async def test_redis_going_away_degrades_to_memory_and_recovers(
    replicas: list[Caches], redis_server: RedisServer
) -> None:
    caches = replicas[0]
    tier = caches.responses
    assert isinstance(tier, SharedTier)
    await tier.keep("kept", 1)
    redis_server.stop()
    assert await tier.fetch("kept") == 1  # the memory tier in front
    computed = await tier.get_or_compute("new", lambda: answer("fresh"))
    assert computed == ("fresh", True)
    assert await tier.fetch("new") == "fresh"
    health = await caches.health()
    assert health["status"] == "unavailable" and "error" in health
    assert caches.stats()["redis"]["status"] == "unavailable"
    assert tier.link.errors >= 1
    redis_server.start()
    await asyncio.sleep(RETRY_SECONDS + 0.1)
    await tier.keep("after", 2)
    assert (await caches.health())["status"] == "ok"
    assert await replicas[1].responses.fetch("after") == 2


async def answer(value: str) -> tuple[str, bool]:
    return value, True


def test_health_never_shows_the_redis_password(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, cache="redis", redis_url=Secret("redis://:s3cret-pass@10.1.2.3:6380/2")
    )
    link = backends.create("redis", settings).shared
    assert isinstance(link, RedisLink)
    assert link.health()["location"] == "10.1.2.3:6380/2"
    assert "s3cret-pass" not in repr(link.health()) + repr(settings)


async def test_chroma_and_qdrant_replicas_name_the_same_content_alike() -> None:
    """Their generation is the token every writer stores in the engine, not a count of
    what one process saw: a shared tier 1 keyed on it means the same content for all."""
    stored = {"token": ""}

    async def read_token() -> str:
        return stored["token"]

    writer, reader = Generation(poll_seconds=0), Generation(poll_seconds=0)
    assert await writer.current(read_token) == await reader.current(read_token)
    stored["token"] = writer.wrote()
    stored["token"] = writer.wrote()  # two writes here, none seen by the reader yet
    assert await reader.current(read_token) == await writer.current(read_token) != ""


@pytest.mark.fault
async def test_health_asks_redis_itself_when_it_goes_and_comes_back(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """No request needs to touch the cache for /health to see Redis gone or back."""
    caches = backends.create("redis", redis_settings(tmp_path, redis_server))
    try:
        assert (await caches.health())["status"] == "ok"
        redis_server.stop()
        await asyncio.sleep(HEALTH_SECONDS)
        assert (await caches.health())["status"] == "unavailable"
        redis_server.start()
        await asyncio.sleep(HEALTH_SECONDS)
        assert (await caches.health())["status"] == "ok"
        assert caches.stats()["redis"]["status"] == "ok"
    finally:
        await caches.close()


@pytest.mark.fault
async def test_health_of_a_redis_never_there_is_unavailable_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_cache, "HEALTH_SECONDS", 60.0)  # the second ask is within it
    closed = f"redis://127.0.0.1:{free_port()}/0"
    settings = make_settings(tmp_path, cache="redis", redis_url=Secret(closed))
    caches = backends.create("redis", settings)
    try:
        started = time.monotonic()
        health = await caches.health()
        assert health["status"] == "unavailable" and "error" in health
        assert time.monotonic() - started < 1.0  # bounded by the call's timeout
        assert await caches.health() is not None and caches.shared is not None
        assert caches.shared.errors == 1  # asked again within HEALTH_SECONDS: not retried
    finally:
        await caches.close()


@pytest.mark.fault
def test_health_follows_redis_with_no_request_using_the_cache(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    app = create_app(redis_settings(tmp_path, redis_server))
    with TestClient(app) as client:
        assert client.get("/health").json()["status"] == "healthy"
        redis_server.stop()
        time.sleep(HEALTH_SECONDS)
        health = client.get("/health").json()
        assert health["status"] == "degraded"
        assert health["cache"]["redis"]["status"] == "unavailable"
        redis_server.start()
        time.sleep(HEALTH_SECONDS)
        health = client.get("/health").json()
        assert health["status"] == "healthy" and health["cache"]["redis"]["status"] == "ok"
