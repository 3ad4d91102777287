"""Smart prefetching: follow-ups learned from the query log and from the answer's own
sources are answered in the background, so asking them next is a cache hit; the
budget bounds how many run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.prefetch import FOLLOWERS_KEPT, Prefetcher, Successions
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import query as use
from tests.conftest import corpus, make_settings, query_params
from tests.test_cache import Clock

LOGIN = "why does the login time out"
PAGES = "asset search pagination duplicates"


async def prefetching(tmp_path: Path, **changes: object) -> KnowledgeService:
    service = build_service(make_settings(tmp_path, prefetch="on", **changes))
    await service.start()
    await service.ingest(corpus())
    return service


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[KnowledgeService]:
    svc = await prefetching(tmp_path)
    yield svc
    await svc.stop()


async def asked(service: KnowledgeService, query: str, client: str) -> bool:
    """Whether the query was served from tier 1."""
    served = await use.query(service, query_params({"query": query}), client)
    await service.prefetcher.drain()
    return served.cache_hit


async def test_what_another_user_asked_next_is_served_from_cache(
    service: KnowledgeService,
) -> None:
    await asked(service, LOGIN, "ana")
    await asked(service, PAGES, "ana")
    service.caches.responses.clear()  # e.g. expired, or the store changed
    assert await asked(service, LOGIN, "ben") is False
    assert await asked(service, PAGES, "ben") is True
    assert service.prefetcher.counts["warmed"] >= 1


async def test_the_title_of_a_source_is_prefetched(service: KnowledgeService) -> None:
    await asked(service, "Which audio formats does ingestion accept?", "ana")
    assert await asked(service, "Supported audio formats", "ben") is True


async def test_without_prefetch_the_follow_up_misses(tmp_path: Path) -> None:
    service = build_service(make_settings(tmp_path))
    await service.start()
    try:
        await service.ingest(corpus())
        await asked(service, LOGIN, "ana")
        await asked(service, PAGES, "ana")
        service.caches.responses.clear()
        await asked(service, LOGIN, "ben")
        assert await asked(service, PAGES, "ben") is False
        assert "prefetch" not in await service.health()
    finally:
        await service.stop()


async def test_the_budget_per_minute_bounds_prefetches(tmp_path: Path) -> None:
    service = await prefetching(tmp_path, prefetch_per_minute=2, prefetch_concurrent=5)
    clock = Clock()
    service.prefetcher.clock = clock
    try:
        await asked(service, "Which audio formats does ingestion accept?", "ana")
        await asked(service, "how do I create a test case", "ana")
        counts = service.prefetcher.counts
        assert counts["started"] == 2 and counts["over_budget"] >= 1
        clock.now = 61.0  # a minute later the budget is back
        await asked(service, "release date of 4.2", "ana")
        assert counts["started"] > 2
        health = await service.health()
        assert health["prefetch"]["started"] == counts["started"]
    finally:
        await service.stop()


async def test_at_most_the_concurrent_budget_runs_at_once(service: KnowledgeService) -> None:
    prefetcher = service.prefetcher  # KNOWLEDGE_PREFETCH_CONCURRENT 1
    release = asyncio.Event()
    warmed: list[str] = []

    async def warm(query: str) -> None:
        warmed.append(query)
        await release.wait()

    for query in ("a", "b", "c", "d"):
        prefetcher.log.record("ana", query)
    assert prefetcher.after("ben", "b", (), warm) == 1  # c, warmed in the background
    await asyncio.sleep(0.01)
    assert warmed == ["c"] and len(prefetcher.running) == 1
    assert prefetcher.after("ben", "c", (), warm) == 0  # d: dropped, one run is under way
    assert prefetcher.counts["over_budget"] == 1
    release.set()
    await prefetcher.drain()
    assert warmed == ["c"]


async def test_nothing_is_prefetched_while_a_live_query_is_answered(
    service: KnowledgeService,
) -> None:
    prefetcher = service.prefetcher
    warmed: list[str] = []

    async def warm(query: str) -> None:
        warmed.append(query)

    prefetcher.log.record("ana", "a")
    prefetcher.log.record("ana", "b")
    with prefetcher.answering():
        prefetcher.after("ben", "a", (), warm)
        await asyncio.sleep(0.01)
    await prefetcher.drain()
    assert warmed == [] and prefetcher.counts["busy"] == 1


def test_the_succession_log_is_bounded_per_query() -> None:
    log = Successions()
    for n in range(FOLLOWERS_KEPT + 5):
        log.record(f"user{n}", "start")
        log.record(f"user{n}", f"next{n}")
    log.record("again", "start")
    log.record("again", "next0")
    followers = log.next_of("start")
    assert len(followers) == FOLLOWERS_KEPT and followers[0] == "next0"


def test_predictions_never_repeat_the_query_and_respect_the_count() -> None:
    prefetcher = Prefetcher(True, 30, 1, followups=2)
    for client in ("a", "b", "c"):
        prefetcher.log.record(client, "q")
        prefetcher.log.record(client, "q1" if client != "c" else "q2")
    prefetcher.log.record("d", "q")
    prefetcher.log.record("d", "Q")  # the same query, asked again
    assert prefetcher.predict("Q", ()) == ["q1", "q2"]


def test_a_repeated_body_answered_by_the_hit_path_is_still_logged(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, prefetch="on"))
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())  # type: ignore[union-attr]
        for question in (LOGIN, PAGES, LOGIN):  # the second LOGIN: the same bytes again
            response = client.post("/v1/knowledge/query", json={"query": question})
            assert response.status_code == 200
        assert response.json()["metrics"]["cache_hit"] is True
        log = app.state.service.prefetcher.log  # type: ignore[union-attr]
    assert log.next_of(PAGES) == [LOGIN]


async def test_a_follow_up_already_cached_is_not_counted_as_a_hit(
    service: KnowledgeService,
) -> None:
    await asked(service, LOGIN, "ana")
    await asked(service, PAGES, "ana")
    await asked(service, LOGIN, "ben")  # its follow-ups are cached already: nothing to warm
    assert service.caches.responses.hits == 1  # ben's LOGIN, the one live hit
