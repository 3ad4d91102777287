"""A source's lease is taken by one holder at a time even when two take it at once: two
processes, each with a store of its own on one place, race for it round after round,
and exactly one wins each round. A local Qdrant folder opens in one client at a time,
so there the takers are two tasks of one store."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from tests.conftest import corpus, make_store
from tests.test_store_conformance import BACKENDS, index

ROUNDS = 30


async def recorded(settings: Settings) -> KnowledgeStore:
    """The open store of `settings` holding the corpus and the connector source raced for."""
    store = make_store(settings.store, settings)
    await store.open()
    await index(store, corpus())
    await store.record_source("mail", "inbox", connector='{"kind": "imap"}')
    return store


async def written(settings: Settings) -> None:
    store = await recorded(settings)
    await store.close()


async def round_of(store: KnowledgeStore, holder: str) -> bool:
    """Whether `holder` took the lease; it lets it go again once both takers asked."""
    return await store.lease_source("mail", "inbox", holder, 60)


def taker(settings: Settings, n: int, barrier: Any, took: Any) -> None:
    """A process taking the lease round after round as `taker-n`, letting it go again
    once both takers asked, with what it took on `took`."""

    async def run() -> list[bool]:
        store = make_store(settings.store, settings)
        await store.open()
        held: list[bool] = []
        try:
            for _ in range(ROUNDS):
                barrier.wait()
                held.append(await round_of(store, f"taker-{n}"))
                barrier.wait()
                if held[-1]:  # (refused when the other took it over meanwhile)
                    await store.lease_source("mail", "inbox", f"taker-{n}", 0)
            return held
        finally:
            await store.close()

    took.put((n, asyncio.run(run())))


def raced_by_processes(settings: Settings) -> list[int]:
    """How many of two taking processes held the lease, round by round."""
    asyncio.run(written(settings))
    context = multiprocessing.get_context("spawn")
    barrier, took = context.Barrier(2, timeout=60), context.Queue()
    takers = [context.Process(target=taker, args=(settings, n, barrier, took)) for n in (0, 1)]
    for process in takers:
        process.start()
    held = dict(took.get(timeout=120) for _ in takers)
    for process in takers:
        process.join(60)
    return [int(a) + int(b) for a, b in zip(held[0], held[1], strict=True)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "chroma"])
def test_two_processes_never_both_take_a_lease(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    settings = BACKENDS[backend](request, tmp_path)
    assert raced_by_processes(settings) == [1] * ROUNDS


async def test_two_syncs_of_one_local_qdrant_never_both_take_a_lease(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = await recorded(BACKENDS["qdrant"](request, tmp_path))
    try:
        for _ in range(ROUNDS):
            took = await asyncio.gather(round_of(store, "a"), round_of(store, "b"))
            assert sorted(took) == [False, True]
            assert await store.lease_source("mail", "inbox", "ab"[took.index(True)], 0)
    finally:
        await store.close()
