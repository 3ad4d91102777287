"""Two replicas of one deployment (two apps over the same embedded Postgres and the
same real Redis, KNOWLEDGE_CACHE=redis): they share their cache, answer from a write
made by the other or by any other process once their poll of the store's generations
has noticed it (and never from before it after that), and keep answering without
Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cache.redis import RETRY_SECONDS
from knowledge_api.config.fields import Secret
from knowledge_api.models import DEFAULT_COLLECTION, Document
from knowledge_api.stores.postgres.store import PostgresStore
from tests.conftest import ask as ask_service
from tests.conftest import corpus, make_settings, query_params, replicas_sharing
from tests.pg import postgres_settings, run_sync
from tests.redis_server import RedisServer, free_port

QUERY = "/v1/knowledge/query"
DOCUMENTED_WITHIN = 1.0
"""operations.md: a write by any process reaches every replica's response cache within
a second (the generations are polled every half second). Not asserted: a loaded
machine stretches every request."""
GUARD = 60 * DOCUMENTED_WITHIN
"""How long a replica may take to notice a write before the test gives up: a guard
against hanging, far above the documented bound."""


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer) -> Any:
    return postgres_settings(
        request,
        tmp_path,
        cache="redis",
        redis_url=Secret(redis_server.url),
        redis_prefix="replicas:",
    )


@pytest.fixture
def replicas(database: Any) -> Iterator[tuple[TestClient, TestClient]]:
    with TestClient(create_app(database)) as first, TestClient(create_app(database)) as second:
        first.portal.call(first.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        yield first, second


def ask(client: TestClient, query: str) -> dict[str, Any]:
    response = client.post(QUERY, json={"query": query, "synthesize": False, "threshold": 0})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def sources(body: dict[str, Any]) -> list[str]:
    return [result["source_id"] for result in body["results"]]


def test_a_query_made_on_one_replica_is_a_hit_on_the_other(
    replicas: tuple[TestClient, TestClient],
) -> None:
    first, second = replicas
    computed = ask(first, "login timeout")
    assert computed["metrics"]["cache_hit"] is False
    served = ask(second, "login timeout")
    assert served["metrics"]["cache_hit"] is True
    assert served["results"] == computed["results"] and "SIAM-101" in sources(served)
    cache = second.get("/health").json()["cache"]
    assert cache["backend"] == "redis" and cache["redis"]["status"] == "ok"
    assert cache["embedding_hit_rate"] == 0.0  # tier 1 answered: nothing was embedded


def test_a_query_embedded_on_one_replica_is_not_embedded_again_on_the_other(
    replicas: tuple[TestClient, TestClient],
) -> None:
    first, second = replicas
    ask(first, "login timeout")
    other_options = {"query": "Login  TIMEOUT", "synthesize": False, "limit": 2}
    response = second.post(QUERY, json=other_options).json()
    assert response["metrics"]["cache_hit"] is False  # another tier 1 key
    assert second.get("/health").json()["cache"]["embedding_hit_rate"] == 1.0


def test_a_grounded_answer_made_on_one_replica_is_a_hit_on_the_other(
    replicas: tuple[TestClient, TestClient],
) -> None:
    first, second = replicas
    body = {"query": "Why does the login page time out?", "threshold": 0.0}
    made = first.post("/v1/knowledge/answer", json=body).json()
    served = second.post("/v1/knowledge/answer", json=body).json()
    assert made["metadata"]["cache_hit"] is False and served["metadata"]["cache_hit"] is True
    assert served["answer"] == made["answer"] and served["sources"] == made["sources"]


def fresh_once_noticed(
    client: TestClient, url: str, query: str, wanted: Callable[[list[str]], bool]
) -> None:
    """Ask `client` `query` until its store has noticed the last write (its generation
    of the collection at least the database's now) and then some more: the answers
    before the notice may be from before the write, every one after it must be one
    `wanted(sources)` accepts (a stale answer served from any cache tier after the
    notice fails the test)."""
    written = run_sync(collection_generation(url, DEFAULT_COLLECTION))
    store: PostgresStore = client.app.state.service.store  # type: ignore[attr-defined]
    deadline = time.monotonic() + GUARD
    after_notice = 0
    while after_notice < 3:
        noticed = client.portal.call(store.collection_generation, DEFAULT_COLLECTION) >= written
        answer = sources(ask(client, query))
        assert wanted(answer) or not noticed, f"{query!r} answered from before the write: {answer}"
        after_notice += noticed
        assert time.monotonic() < deadline, f"the write was not noticed within {GUARD} s"
        if not noticed:
            time.sleep(0.02)


async def collection_generation(url: str, collection: str) -> int:
    """The collection's generation in the database: every write to it moves it up."""
    conn = await asyncpg.connect(url)
    try:
        sql = "SELECT generation FROM knowledge_collection_state WHERE collection = $1"
        return int(await conn.fetchval(sql, collection))
    finally:
        await conn.close()


def test_a_write_on_one_replica_is_served_by_the_other_once_it_noticed_it(
    replicas: tuple[TestClient, TestClient], database: Any
) -> None:
    first, second = replicas
    before = ask(second, "zebra crossing sensor")
    assert "zebra-1" not in sources(before)
    assert ask(second, "zebra crossing sensor")["metrics"]["cache_hit"] is True
    document = {
        "source_type": "wiki",
        "source_id": "zebra-1",
        "content": "The zebra crossing sensor reports pedestrians to the traffic lights.",
    }
    assert first.post("/v1/knowledge/documents", json=document).status_code == 201
    url = database.database_url.get()
    fresh_once_noticed(second, url, "zebra crossing sensor", lambda s: "zebra-1" in s)


def test_a_write_by_another_process_reaches_both_replicas_once_they_noticed_it(
    replicas: tuple[TestClient, TestClient], database: Any
) -> None:
    """What `knowledge-api ingest`, a sync or plain SQL writes moves the generation in
    the database: no replica answers from before it once its poll has seen it."""
    for replica in replicas:
        assert "SIAM-101" in sources(ask(replica, "login timeout"))
        assert ask(replica, "login timeout")["metrics"]["cache_hit"] is True
    url = database.database_url.get()
    run_sync(delete_by_sql(url, "SIAM-101"))
    for replica in replicas:
        fresh_once_noticed(replica, url, "login timeout", lambda s: "SIAM-101" not in s)


async def delete_by_sql(url: str, source_id: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM knowledge_documents WHERE source_id = $1", source_id)
    finally:
        await conn.close()


def metric(client: TestClient, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rpartition(" ")[2])
    raise AssertionError(f"no {name} in /metrics")


@pytest.mark.fault
def test_redis_stopped_mid_run_degrades_to_memory_and_recovers(
    replicas: tuple[TestClient, TestClient], redis_server: RedisServer
) -> None:
    first, second = replicas
    ask(first, "login timeout")
    healthy = first.get("/health").json()["status"]
    redis_server.stop()
    for replica in replicas:
        assert "SIAM-101" in sources(ask(replica, "login timeout"))
        assert "a1b2c3d" in sources(ask(replica, "pagination bug asset search"))
    health = second.get("/health").json()
    assert health["status"] == "degraded"
    assert health["cache"]["redis"]["status"] == "unavailable"
    assert metric(second, "knowledge_cache_redis_up") == 0.0
    assert metric(second, "knowledge_cache_redis_errors_total") >= 1
    # each replica goes on with its own memory tier
    assert ask(second, "pagination bug asset search")["metrics"]["cache_hit"] is True

    redis_server.start()
    time.sleep(RETRY_SECONDS + 0.1)
    ask(first, "asset ingestion audio formats")  # kept in the new, empty Redis
    assert ask(second, "asset ingestion audio formats")["metrics"]["cache_hit"] is True
    health = second.get("/health").json()
    assert health["cache"]["redis"]["status"] == "ok" and health["status"] == healthy
    assert metric(second, "knowledge_cache_redis_up") == 1.0


async def test_sqlite_replicas_share_the_cache_by_the_generation_in_the_file(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Two processes on one SQLite file read the same generation (store_state), so an
    answer one of them kept is the other's hit, and none outlives a write."""
    async with replicas_sharing(tmp_path, redis_server, "sqlite:") as (first, second):
        await first.ingest(corpus())
        assert await first.store.generation() == await second.store.generation()
        request = query_params({"query": "quarterly roadmap", "synthesize": False})
        assert (await ask_service(first, request))["metrics"]["cache_hit"] is False
        assert (await ask_service(second, request))["metrics"]["cache_hit"] is True
        await second.ingest([Document("wiki", "roadmap", "The quarterly roadmap.", "Roadmap")])
        assert await first.store.generation() == await second.store.generation()
        fresh = await ask_service(first, request)
        assert fresh["metrics"]["cache_hit"] is False
        assert [r["source_id"] for r in fresh["results"]][:1] == ["roadmap"]


def test_a_replica_starts_and_answers_when_redis_was_never_there(tmp_path: Path) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    settings = make_settings(tmp_path, cache="redis", redis_url=Secret(closed))
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        assert "SIAM-101" in sources(ask(client, "login timeout"))
        assert ask(client, "login timeout")["metrics"]["cache_hit"] is True  # from memory
        health = client.get("/health").json()
        assert health["status"] == "degraded"
        assert health["cache"]["redis"]["status"] == "unavailable"
