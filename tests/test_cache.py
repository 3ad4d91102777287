from __future__ import annotations

import asyncio

from knowledge_api.cache.base import Tier
from knowledge_api.models import CacheKey
from tests.conftest import Computation


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_after_their_ttl() -> None:
    clock = Clock()
    cache: Tier[str] = Tier(10, ttl=5, clock=clock)
    cache.put("k", "v")
    clock.now = 4.9
    assert cache.get("k") == "v"
    clock.now = 5.0
    assert cache.get("k") is None
    assert len(cache) == 0 and (cache.hits, cache.misses) == (1, 1)


def test_size_is_bounded_least_recently_used_first() -> None:
    cache: Tier[int] = Tier(2, ttl=60)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3


async def test_identical_concurrent_misses_compute_once() -> None:
    cache: Tier[str] = Tier(10, ttl=60)
    compute = Computation("value", 0.01)
    results = await asyncio.gather(*(cache.get_or_compute("k", compute) for _ in range(20)))
    assert compute.calls == 1
    assert [value for value, _ in results] == ["value"] * 20
    assert sum(computed for _, computed in results) == 1
    assert (cache.hits, cache.misses) == (19, 1)


async def test_a_failed_computation_reaches_every_waiter_and_is_not_cached() -> None:
    cache: Tier[str] = Tier(10, ttl=60)

    async def fail() -> tuple[str, bool]:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    results = await asyncio.gather(
        *(cache.get_or_compute("k", fail) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ValueError) for r in results)
    assert len(cache) == 0


async def test_uncacheable_values_are_returned_but_not_kept() -> None:
    cache: Tier[str] = Tier(10, ttl=60)

    async def degraded() -> tuple[str, bool]:
        return "partial", False

    assert await cache.get_or_compute("k", degraded) == ("partial", True)
    assert len(cache) == 0


def test_a_lookup_in_another_scope_misses_and_follow_sets_the_scope() -> None:
    tier: Tier[str] = Tier(10, ttl=60)
    tier.put("q", "answer", ("a", 1))
    assert tier.get("q", ("a", 2)) is None and tier.peek("q", ("a", 1)) == "answer"
    assert tier.get("q", ("a", 1)) == "answer" and (tier.hits, tier.misses) == (1, 1)
    tier.follow("embedder/384")
    tier.put("q", "vector")
    assert tier.entry("q") == ("embedder/384", "vector") and tier.get("q") == "vector"


async def test_identical_misses_in_different_scopes_are_computed_apart() -> None:
    """A request that began after a write does not share the answer of one that began
    before it."""
    tier: Tier[str] = Tier(10, ttl=60)

    async def compute(value: str) -> tuple[str, bool]:
        await asyncio.sleep(0.01)
        return value, True

    before, after = await asyncio.gather(
        tier.get_or_compute("q", lambda: compute("old"), ("a", 1)),
        tier.get_or_compute("q", lambda: compute("new"), ("a", 2)),
    )
    assert (before, after) == (("old", True), ("new", True))


def test_a_cache_key_is_the_tuple_of_its_values() -> None:
    values = ("QueryParams", "how are queries answered", 0.2, None, ("git",), frozenset({"a"}))
    key = CacheKey(values)
    assert key == values and hash(key) == hash(values) and repr(key) == repr(values)
    assert {values: 1}[key] == 1 and {key: 1}[values] == 1
