"""The postgres store with a read replica (KNOWLEDGE_DATABASE_READ_URLS): a real primary
and its streaming standby (tests/pg_replication.py). Reads see every acknowledged
write, a replica that dies or lags costs no request, and /health, the log and the
metrics say where reads went."""

from __future__ import annotations

import logging
import random
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.config.fields import Secret
from knowledge_api.errors import ConfigurationError
from knowledge_api.settings import Settings
from knowledge_api.stores.postgres.replicas import (
    EVERY_COLLECTION,
    Reading,
    Replicas,
    read_urls,
)
from knowledge_api.stores.postgres.store import PostgresStore
from tests.conftest import corpus, make_settings
from tests.pg import run_sync
from tests.pg_replication import Replicated
from tests.test_adopt import (  # gemini: a fixture
    adopted,
    adopted_settings,
    eventually_found,
    gemini,  # noqa: F401
    pipeline_writes,
    seed,
)
from tests.test_adopt import query as adopted_query

QUERY = "/v1/knowledge/query"
DOCUMENTS = "/v1/knowledge/documents"
DELAY = "400ms"
"""The standby applies each commit this long after the primary made it (for the
read-your-writes test): a read sent to it right after a write would miss the write."""


# -- routing, without servers ---------------------------------------------------------


def up(replicas: Replicas, *replayed: int) -> None:
    for replica, position in zip(replicas.replicas, replayed, strict=True):
        replica.state, replica.replayed = "up", position


def test_a_collection_is_read_from_a_replica_once_it_has_replayed_its_last_write() -> None:
    replicas = Replicas(["postgresql://r1:5432/db"])
    up(replicas, 100)
    replicas.record(["a"], 150)
    assert replicas.route(Reading("a")) is None  # the primary answers
    assert replicas.route(Reading("b")) is replicas.replicas[0]  # b was not written
    assert replicas.route(EVERY_COLLECTION) is None  # a read of every collection sees a's write
    up(replicas, 150)
    assert replicas.route(Reading("a")) is replicas.replicas[0]
    replicas.record(None, 200)  # a write whose collection is unknown: every collection waits
    assert replicas.route(Reading("b")) is None


def test_replicas_are_taken_in_turn_and_only_when_up() -> None:
    replicas = Replicas(["postgresql://r1:5432/db", "postgresql://r2:5433/db"])
    up(replicas, 10, 10)
    chosen = [replicas.route(Reading("a")) for _ in range(4)]
    assert [r.name for r in chosen if r] == ["r1:5432", "r2:5433", "r1:5432", "r2:5433"]
    replicas.replicas[0].state = "lagging"
    replicas.replicas[1].state = "down"
    assert replicas.route(Reading("a")) is None


def test_lag_is_the_time_since_the_primary_was_where_the_replica_is() -> None:
    replicas = Replicas(["postgresql://r1:5432/db"], max_lag_ms=5000)
    for at, position in [(0.0, 100), (1.0, 200), (2.0, 300), (3.0, 400)]:
        replicas.remember(at, position)
    assert replicas.lag_ms(250, 3.0) == pytest.approx(2000)  # reached 200, the primary at 1 s
    assert replicas.lag_ms(400, 3.0) == 0
    assert replicas.lag_ms(50, 3.0) == pytest.approx(3000)  # behind all: since the oldest


def test_read_urls_must_be_postgres_urls_and_hide_their_password() -> None:
    assert read_urls(" postgresql://u:p@h1:5432/db , postgres://h2/db,") == [
        "postgresql://u:p@h1:5432/db",
        "postgres://h2/db",
    ]
    with pytest.raises(ConfigurationError) as refused:
        read_urls("postgresql://u:hunter2@h1/db,http://u:hunter2@h2/db")
    assert "KNOWLEDGE_DATABASE_READ_URLS" in refused.value.message
    assert "hunter2" not in refused.value.message


def test_the_supabase_store_refuses_read_urls(tmp_path: Path) -> None:
    from knowledge_api.stores.postgres.supabase import SupabaseStore

    settings = make_settings(
        tmp_path, store="supabase", database_read_urls=Secret("postgresql://h/db")
    )
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_STORE=postgres"):
        SupabaseStore.from_settings(settings)


# -- a primary and its standby ---------------------------------------------------------


def replicated_settings(cluster: Replicated, tmp_path: Path, **changes: Any) -> Settings:
    """A postgres store on the cluster's emptied database, its standby the replica (its
    URL with a password the standby never asks for, to see it masked)."""
    return make_settings(
        tmp_path,
        store="postgres",
        database_url=Secret(cluster.fresh_database()),
        database_read_urls=Secret(cluster.url(cluster.standby_port, "standby-secret")),
        **changes,
    )


@pytest.fixture
def cluster(replicated: Replicated) -> Iterator[Replicated]:
    yield replicated
    # whatever a test did to it, the next one finds the standby running and replaying
    if not (replicated.standby / "postmaster.pid").exists():
        replicated.start_standby()
    replicated.psql(
        replicated.standby_port,
        "SELECT pg_wal_replay_resume()",
        "ALTER SYSTEM RESET recovery_min_apply_delay",
        "SELECT pg_reload_conf()",
    )


def reads(client: TestClient) -> dict[str, float]:
    """knowledge_store_reads_total by target."""
    text = client.get("/metrics").text
    sample = r'knowledge_store_reads_total\{replica="([^"]*)",target="(\w+)"\} (\S+)'
    found = re.findall(sample, text)
    counts: dict[str, float] = {}
    for _, target, value in found:
        counts[target] = counts.get(target, 0.0) + float(value)
    return counts


def replica_state(client: TestClient) -> dict[str, Any]:
    [replica] = client.get("/health").json()["store"]["replicas"]
    state: dict[str, Any] = replica
    return state


def wait_for(condition: Any, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def write(client: TestClient, collection: str, token: str) -> str:
    document = {
        "collection": collection,
        "source_type": "wiki",
        "source_id": token,
        "title": f"Note {token}",
        "content": f"The {token} runbook explains how the {token} service restarts.",
    }
    response = client.post(DOCUMENTS, json=document)
    assert response.status_code == 201, response.text
    doc_id: str = response.json()["ids"][0]
    return doc_id


def seen(client: TestClient, collection: str, token: str) -> tuple[bool, bool]:
    """Whether a search, and the listing, of `collection` have `token`'s document."""
    body = {"query": token, "collection": collection, "synthesize": False, "threshold": 0}
    searched = token in [r["source_id"] for r in answered(client.post(QUERY, json=body), "results")]
    listing = client.get(DOCUMENTS, params={"collection": collection, "limit": 100})
    listed = token in [d["source_id"] for d in answered(listing, "documents")]
    return searched, listed


def answered(response: Any, key: str) -> list[dict[str, Any]]:
    """The items of a search or a listing; none for a collection whose last document
    was deleted (it is no collection any more: a 404)."""
    if response.status_code == 404:
        assert response.json()["error"]["type"] == "collection_not_found"
        return []
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()[key]
    return items


def until_seen(
    cluster: Replicated, client: TestClient, collection: str, token: str, wanted: bool
) -> None:
    """Until the search and the listing of `client` both have `token`'s document
    (`wanted`), or both have it no more: another process's write, just acknowledged.
    `client` may miss it until its poll of the generations (every half second) has
    noticed the write, and never after: a read then sent to a replica that has not
    replayed the write fails the test. The wait is bounded by the poll, not asserted
    in seconds (a loaded machine stretches every request)."""
    written = generation(cluster, collection)
    store = store_of(client)

    def seen_once_noticed() -> bool:
        noticed = client.portal.call(store.collection_generation, collection) >= written
        answer = seen(client, collection, token)
        assert answer == (wanted, wanted) or not noticed, (token, wanted, answer)
        return answer == (wanted, wanted)

    wait_for(seen_once_noticed)


def generation(cluster: Replicated, collection: str) -> int:
    """The collection's generation on the primary: every write to it moves it up."""
    sql = f"SELECT generation FROM knowledge_collection_state WHERE collection = '{collection}'"
    return int(cluster.psql(cluster.primary_port, sql))


def found(client: TestClient, collection: str, token: str) -> bool:
    """Whether both have it: both, or neither (a half-seen write fails the test)."""
    searched, listed = seen(client, collection, token)
    assert searched == listed, (token, searched, listed)
    return searched


def test_every_read_sees_the_writes_acknowledged_before_it(
    cluster: Replicated, tmp_path: Path
) -> None:
    """Writes and reads in a random order through two service instances sharing the
    primary and the replica; the replica applies each commit 400 ms late, so a read
    sent to it before it has replayed the write would miss the write. The instance that
    wrote reads its write at once and for good; the other once its poll of the
    generations has noticed the write (every half second, as without replicas), and a
    document either has shown is shown again by id at once."""
    cluster.psql(
        cluster.standby_port,
        f"ALTER SYSTEM SET recovery_min_apply_delay = '{DELAY}'",
        "SELECT pg_reload_conf()",
    )
    settings = replicated_settings(cluster, tmp_path)
    rng = random.Random(45)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        apps = [one, two]
        one.portal.call(one.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        written: list[tuple[str, str, str, TestClient]] = []  # collection, token, id, writer
        late = 0
        for step in range(24):
            collection = rng.choice(["alpha", "beta", "gamma"])
            writer, other = rng.sample(apps, 2)
            if written and rng.random() < 0.25:  # a delete
                gone_collection, gone, doc_id, _ = written.pop(rng.randrange(len(written)))
                assert writer.get(f"{DOCUMENTS}/{doc_id}").status_code == 200  # perhaps the other's
                assert writer.delete(f"{DOCUMENTS}/{doc_id}").status_code == 200
                assert not found(writer, gone_collection, gone)
                assert writer.get(f"{DOCUMENTS}/{doc_id}").status_code == 404
                until_seen(cluster, other, gone_collection, gone, False)
                continue
            token = f"zq{step}x{uuid.uuid4().hex[:6]}"
            doc_id = write(writer, collection, token)
            late += not standby_has(cluster, token)
            assert found(writer, collection, token), (step, token)
            assert writer.get(f"{DOCUMENTS}/{doc_id}").status_code == 200
            until_seen(cluster, other, collection, token, True)
            for earlier_collection, earlier, _, by in written:  # nothing read before is lost
                assert found(by, earlier_collection, earlier)
            written.append((collection, token, doc_id, writer))
        assert late > 0  # the standby was behind right after writes: the test means something
        served = reads(one)
        assert served.get("replica", 0) > 0 and served.get("primary", 0) > 0


def standby_has(cluster: Replicated, token: str) -> bool:
    """Whether the standby has applied the write of `token`'s document yet."""
    sql = f"SELECT count(*) FROM knowledge_documents WHERE source_id = '{token}'"
    try:
        return cluster.psql(cluster.standby_port, sql) == "1"
    except subprocess.CalledProcessError as e:  # nor even the schema's creation
        assert "does not exist" in e.stderr, e.stderr
        return False


def test_health_lists_the_replica_with_its_password_masked(
    cluster: Replicated, tmp_path: Path
) -> None:
    with TestClient(create_app(replicated_settings(cluster, tmp_path))) as client:
        wait_for(lambda: replica_state(client)["state"] == "up")
        replica = replica_state(client)
        assert replica["url"] == cluster.url(cluster.standby_port, "***")
        assert "standby-secret" not in client.get("/health").text
        assert replica["lag_bytes"] >= 0 and replica["lag_ms"] >= 0
        assert client.get("/health").json()["status"] == "healthy"


def test_a_replica_stopped_and_started_under_load_fails_no_request(
    cluster: Replicated, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """20 clients search (nine in ten requests) and write; the standby is stopped at
    once (`pg_ctl stop -m immediate`) after 3 s and started again once it is seen down
    and 2 s have passed. Every request answers, the log has one line for the replica
    going and one for its return, and the replica serves reads again once back (the
    clients go on until it has: a time for all of it would be a race with the load)."""
    caplog.set_level(logging.INFO, logger="knowledge_api")
    settings = replicated_settings(cluster, tmp_path)
    outcomes: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        wait_for(lambda: replica_state(client)["state"] == "up")

        def work(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                if rng.random() < 0.1:
                    token = f"drill{seed}x{uuid.uuid4().hex[:8]}"
                    document = {"source_type": "wiki", "source_id": token, "content": token}
                    status = client.post(DOCUMENTS, json=document).status_code
                else:
                    query = f"login timeout {rng.choice(['sso', 'page', 'audio', 'release'])}"
                    body = {"query": f"{query} {rng.randrange(10**6)}", "synthesize": False}
                    status = client.post(QUERY, json=body).status_code
                with lock:
                    outcomes.append(status)

        with ThreadPoolExecutor(20) as pool:
            running = [pool.submit(work, seed) for seed in range(20)]
            try:
                time.sleep(3)
                cluster.stop_standby("immediate")
                wait_for(lambda: replica_state(client)["state"] == "down")
                assert client.get("/health").json()["status"] == "degraded"
                assert client.get("/readyz").status_code == 200
                before = reads(client).get("replica", 0)
                time.sleep(2)
                assert reads(client).get("replica", 0) == before  # none from a dead replica
                cluster.start_standby()
                wait_for(lambda: replica_state(client)["state"] == "up")
                wait_for(lambda: reads(client).get("replica", 0) > before)  # back in the reads
                wait_for(lambda: len(outcomes) > 100, 60)  # and a drill of some size
            finally:
                stop.set()
            for future in running:
                future.result()
        after = reads(client).get("replica", 0)
        assert client.get("/health").json()["status"] == "healthy"
    failed = [status for status in outcomes if status >= 400]
    print(f"drill: {len(outcomes)} requests, {len(failed)} failed")
    assert len(outcomes) > 100 and failed == []
    assert after > before  # back in the reads
    lines = [r.getMessage() for r in caplog.records if "replica 127.0.0.1" in r.getMessage()]
    name = f"127.0.0.1:{cluster.standby_port}"
    assert [line.split(":", 2)[0] + ":" + line.split(":", 2)[1] for line in lines] == [
        f"replica {name} down",
        f"replica {name} back",
    ], lines


def test_a_replica_whose_replay_is_paused_is_bypassed_and_comes_back(
    cluster: Replicated, tmp_path: Path
) -> None:
    settings = replicated_settings(cluster, tmp_path, replica_max_lag_ms=500)
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        wait_for(lambda: replica_state(client)["state"] == "up")
        cluster.psql(cluster.standby_port, "SELECT pg_wal_replay_pause()")
        token = "pausedzq1"
        write(client, "default", token)
        assert found(client, "default", token)  # the primary answered
        for n in range(4):  # the primary moves on; the replica stays where it paused
            write(client, "other", f"pausedzq{n + 2}")
            time.sleep(0.2)
        wait_for(lambda: replica_state(client)["state"] == "lagging")
        lagging = replica_state(client)
        assert lagging["lag_bytes"] > 0 and lagging["lag_ms"] > 500
        before = reads(client)
        assert found(client, "gamma", "nothing-here") is False  # unwritten: the replica would do
        assert reads(client).get("replica", 0) == before.get("replica", 0)
        cluster.psql(cluster.standby_port, "SELECT pg_wal_replay_resume()")
        wait_for(lambda: replica_state(client)["state"] == "up")
        wait_for(lambda: found(client, "gamma", "nothing-here") is False and (
            reads(client).get("replica", 0) > before.get("replica", 0)))  # fmt: skip
        assert found(client, "default", token)


BY_ID = {"GET": None, "PATCH": {"acl": ["group:ops"]}, "DELETE": None}
"""The requests that look a document up by its id: its detail, a new access list, its
deletion (each with its body)."""


def test_a_document_the_replica_lacks_is_found_by_id_on_the_primary(
    cluster: Replicated, tmp_path: Path
) -> None:
    """Another process's document that the replica has not replayed, looked up by id
    while the replica has replayed every write this process knows of: the replica is
    asked, misses, and the primary answers. The standby's replay is paused right after
    this process's own write reached it, and this process's generation poll is held
    still (the half second before it notices the other's write, made to last), so the
    replica takes the lookup every time. (Its miss taken for the answer, a DELETE right
    after a detail answered 404.)"""
    settings = replicated_settings(cluster, tmp_path, replica_max_lag_ms=600_000)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        store_of(one).generation_poll_seconds = 3600.0  # two's writes go unnoticed
        answered: dict[str, int] = {}
        for method, body in BY_ID.items():
            doc_id = unreplayed(cluster, one, two, f"unreplayed{method.lower()}")
            asked = reads(one).get("replica", 0)
            response = one.request(method, f"{DOCUMENTS}/{doc_id}", json=body)
            answered[method] = response.status_code
            assert reads(one).get("replica", 0) > asked, method  # the replica was asked first
            cluster.psql(cluster.standby_port, "SELECT pg_wal_replay_resume()")
        assert answered == dict.fromkeys(BY_ID, 200)
        assert one.get(f"{DOCUMENTS}/{doc_id}").status_code == 404  # deleted on the primary


def unreplayed(cluster: Replicated, one: TestClient, two: TestClient, token: str) -> str:
    """The id of a document `two` wrote that the standby has not replayed, while
    `one`'s replica has replayed every write `one` knows of: `one` writes and reads its
    own document (the read polls its generations), the replica replays it, the standby's
    replay is paused, and only then `two` writes."""
    own = write(one, "default", f"{token}own")
    assert one.get(f"{DOCUMENTS}/{own}").status_code == 200
    replicas = store_of(one).replicas
    wait_for(lambda: one.portal.call(replicas.route, EVERY_COLLECTION) is not None)
    cluster.psql(cluster.standby_port, "SELECT pg_wal_replay_pause()")
    doc_id = write(two, "default", token)
    assert not standby_has(cluster, token)
    return doc_id


def store_of(client: TestClient) -> PostgresStore:
    store: PostgresStore = client.app.state.service.store  # type: ignore[attr-defined]
    return store


@pytest.mark.usefixtures("gemini")
def test_an_adopted_database_is_searched_on_its_replica(
    cluster: Replicated, tmp_path: Path
) -> None:
    """The spec's tables, filled by another pipeline and adopted on the primary, read
    from the standby; a pipeline's later write is found once replayed."""
    url = cluster.fresh_database()
    run_sync(seed(url))
    run_sync(adopted(url))
    replica = Secret(cluster.standby_url)
    settings = adopted_settings(tmp_path, url, database_read_urls=replica)
    with TestClient(create_app(settings)) as client:
        wait_for(lambda: replica_state(client)["state"] == "up")
        results = adopted_query(client, "asset upload timeout")["results"]
        assert results[0]["source_id"] == "AOMA-101"
        run_sync(pipeline_writes(url, "The metadata ingestion backlog grows on Mondays."))
        assert eventually_found(client, "metadata ingestion backlog", "AOMA-202")
        assert reads(client).get("replica", 0) > 0
