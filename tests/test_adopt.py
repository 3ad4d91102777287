"""Serving a database other pipelines fill: `migrate --adopt`, its undo, the read-only
mode and the wiki vector migration, on embedded Postgres seeded with the spec's
original shape by SQL (the way another pipeline writes it), with 768-d vectors of the
Gemini embedder (its HTTP API answered by respx)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service, build_store
from knowledge_api.config.fields import Secret
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import ConfigurationError, EmbedderMismatchError
from knowledge_api.models import EmbedderIdentity, SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.existing import adopt
from knowledge_api.stores.existing import wiki_vectors as conversion
from knowledge_api.stores.existing.store import ExistingTables
from knowledge_api.stores.postgres.codecs import register_codecs
from tests import providers
from tests.conftest import make_settings
from tests.pg import SERVICE_ROLE_KEY, SUPABASE_URL, fresh_database, run_sync
from tests.postgrest import PostgREST
from tests.providers import GEMINI_KEY, GEMINI_URL
from tests.test_cloud_embedders import GEMINI_EMBED, gemini_embeddings

DIMENSION = 768
ORIGINAL_SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE siam_vectors (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization text,
    division text,
    app_under_test text,
    content text,
    embedding vector(768),
    source_type text,
    source_id text,
    metadata jsonb,
    created_at timestamptz DEFAULT now()
);
CREATE TABLE wiki_documents (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    title text,
    markdown_content text,
    url text,
    app_name text,
    embedding text
);
-- The RPC other callers use, with a signature of its own.
CREATE FUNCTION match_siam_vectors_gemini(
    query_embedding vector(768), match_threshold float DEFAULT 0.5, match_count int DEFAULT 10
) RETURNS TABLE (id uuid, content text, source_type text, source_id text, metadata jsonb,
                 organization text, division text, app_under_test text, similarity float)
LANGUAGE sql STABLE AS $$
    SELECT v.id, v.content, v.source_type, v.source_id, v.metadata, v.organization,
           v.division, v.app_under_test, 1 - (v.embedding <=> query_embedding)
    FROM siam_vectors v
    WHERE 1 - (v.embedding <=> query_embedding) > match_threshold
    ORDER BY v.embedding <=> query_embedding
    LIMIT match_count
$$;
"""
PASSAGES = [
    # (organization, division, app, source_type, source_id, content)
    (
        "sony-music",
        "digital-operations",
        "aoma",
        "jira",
        "AOMA-101",
        "Asset upload fails with a timeout when the file exceeds two gigabytes.",
    ),
    (
        "sony-music",
        "digital-operations",
        "aoma",
        "jira",
        "AOMA-101",
        "Workaround: split the upload into parts and raise the proxy timeout.",
    ),
    (
        "sony-music",
        "digital-operations",
        "aoma",
        "git",
        "9f3c2ab",
        "Raise the nginx proxy timeout for the asset upload endpoint.",
    ),
    (
        "sony-music",
        "finance",
        "royalties",
        "knowledge",
        "KB-7",
        "Royalty statements are generated on the first business day of each month.",
    ),
    (
        "other-label",
        "digital-operations",
        "aoma",
        "jira",
        "OTHER-5",
        "Asset upload progress bar freezes at ninety percent.",
    ),
]
WIKI_PAGES = [
    # (title, markdown, url, app, how the TEXT embedding is stored)
    (
        "Deploying AOMA",
        "Deploy the AOMA release with the blue green pipeline and verify the health checks.",
        "https://wiki.example.com/aoma/deploy",
        "AOMA",
        "vector",
    ),
    (
        "Quarterly close",
        "Finance closes the quarter after royalty reconciliation.",
        "https://wiki.example.com/finance/close",
        "Finance",
        "vector",
    ),
    (
        "Rollback runbook",
        "Roll back a failed AOMA deployment by redeploying the previous release tag.",
        "https://wiki.example.com/aoma/rollback",
        "AOMA",
        "empty",
    ),
    (
        "Glossary",
        "Metadata, assets and products explained.",
        "https://wiki.example.com/glossary",
        None,
        "malformed",
    ),
    (
        "Onboarding",
        "Request access to the asset management system on day one.",
        "https://wiki.example.com/onboarding",
        "AOMA",
        "null",
    ),
]


def embed(texts: list[str]) -> np.ndarray:
    """What the Gemini embedder answers here (the respx route), as stored vectors."""
    return 3.0 * FakeEmbedder(DIMENSION).embed_batch(texts)


def literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in vector) + "]"


async def seed(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(ORIGINAL_SCHEMA)
        vectors = embed([p[5] for p in PASSAGES])
        for (org, division, app, source_type, source_id, content), vector in zip(
            PASSAGES, vectors, strict=True
        ):
            await conn.execute(
                "INSERT INTO siam_vectors (organization, division, app_under_test, content, "
                "embedding, source_type, source_id, metadata) "
                "VALUES ($1, $2, $3, $4, $5::text::vector, $6, $7, $8::text::jsonb)",
                org,
                division,
                app,
                content,
                literal(vector),
                source_type,
                source_id,
                f'{{"pipeline": "ingest-v1", "key": "{source_id}"}}',
            )
        page_vectors = embed([f"{t}\n{m}" for t, m, *_ in WIKI_PAGES])
        stored = {"empty": "", "malformed": "[0.1, oops", "null": None}
        for (title, markdown, page_url, app, kind), vector in zip(
            WIKI_PAGES, page_vectors, strict=True
        ):
            text_embedding = literal(vector) if kind == "vector" else stored[kind]
            await conn.execute(
                "INSERT INTO wiki_documents (title, markdown_content, url, app_name, embedding) "
                "VALUES ($1, $2, $3, $4, $5)",
                title,
                markdown,
                page_url,
                app,
                text_embedding,
            )
    finally:
        await conn.close()


async def invalid_indexes(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM pg_index WHERE NOT indisvalid")
        return count
    finally:
        await conn.close()


async def snapshot(url: str) -> dict[str, Any]:
    """Everything of the original shape: columns, rows (vectors as text), the old RPC's
    definition and what it answers, and the indexes and functions that exist."""
    conn = await asyncpg.connect(url)
    try:
        columns = {
            table: [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT attnum, attname, format_type(atttypid, atttypmod), attnotnull "
                    "FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 "
                    "AND NOT attisdropped ORDER BY attnum",
                    table,
                )
            ]
            for table in ("siam_vectors", "wiki_documents")
        }
        siam = await conn.fetch(
            "SELECT id, organization, division, app_under_test, content, embedding::text, "
            "source_type, source_id, metadata::text, created_at FROM siam_vectors ORDER BY id"
        )
        wiki = await conn.fetch(
            "SELECT id, title, markdown_content, url, app_name, embedding "
            "FROM wiki_documents ORDER BY id"
        )
        query = literal(embed(["asset upload timeout"])[0])
        answers = await conn.fetch(
            "SELECT id, round(similarity::numeric, 6) FROM "
            "match_siam_vectors_gemini($1::text::vector, 0.0, 3)",
            query,
        )
        functions = await conn.fetch(
            "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
            "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid "
            "AND d.deptype = 'e') ORDER BY 1"
        )
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        )
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
        return {
            "columns": columns,
            "siam": [tuple(r) for r in siam],
            "wiki": [tuple(r) for r in wiki],
            "answers": [tuple(r) for r in answers],
            "functions": [tuple(r) for r in functions],
            "indexes": [tuple(r) for r in indexes],
            "tables": [r[0] for r in tables],
        }
    finally:
        await conn.close()


def original(state: dict[str, Any]) -> dict[str, Any]:
    """What adoption must leave exactly as it was: the tables' own columns, rows and old
    function (the columns it adds, named knowledge_*, come after them)."""
    own = {
        table: [c for c in columns if not c[1].startswith("knowledge_")]
        for table, columns in state["columns"].items()
    }
    return {key: state[key] for key in ("siam", "wiki", "answers")} | {
        "columns": own,
        "old_rpc": [f for f in state["functions"] if f[0].startswith("match_siam_vectors_gemini")],
    }


def added_columns(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        table: [c[1:] for c in columns if c not in before["columns"][table]]
        for table, columns in after["columns"].items()
    }


def seeded_database(server: Any, name: str = "knowledge_adopt") -> str:
    """A fresh database of the original shape, filled as the other pipelines fill it."""
    url = fresh_database(server, name)
    run_sync(seed(url))
    return url


def gemini_answering() -> Iterator[respx.MockRouter]:
    """The Gemini embedder's HTTP API, answered with `embed`'s vectors."""
    for router in providers.mocked():
        router.post(GEMINI_EMBED).mock(side_effect=gemini_embeddings)
        yield router


@pytest.fixture
def database(postgres_server: Any) -> str:
    return seeded_database(postgres_server)


@pytest.fixture
def gemini() -> Iterator[respx.MockRouter]:
    yield from gemini_answering()


def adopted_settings(tmp_path: Path, url: str, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "store": "postgres",
        "database_url": Secret(url),
        "schema_mode": "adopted",
        "embedder": "gemini",
        "gemini_api_key": Secret(GEMINI_KEY),
        "gemini_base_url": GEMINI_URL,
    }
    return make_settings(tmp_path, **{**values, **changes})


@pytest.fixture
def cli_env(database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    for name, value in {
        "KNOWLEDGE_STORE": "postgres",
        "KNOWLEDGE_DATABASE_URL": database,
        "KNOWLEDGE_EMBEDDER": "gemini",
        "GOOGLE_GENERATIVE_AI_API_KEY": GEMINI_KEY,
        "KNOWLEDGE_GEMINI_BASE_URL": GEMINI_URL,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return database


async def adopted(url: str, wiki_vectors: bool = False) -> None:
    conn = await asyncpg.connect(url)
    try:
        await adopt.apply(conn, await adopt.adoption_plan(conn), lambda step: None)
        if wiki_vectors:
            await conversion.convert_wiki_vectors(conn, embed_list, DIMENSION, 2, lambda s: None)
    finally:
        await conn.close()


def embed_list(texts: list[str]) -> np.ndarray:
    return embed(texts)


def query(client: TestClient, text: str, **extra: Any) -> dict[str, Any]:
    body = {"query": text, "synthesize": False, "threshold": 0.0, "limit": 10, **extra}
    response = client.post("/v1/knowledge/query", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# -- migrate --adopt, --dry-run and --undo -------------------------------------------------


def test_dry_run_prints_the_plan_and_changes_nothing(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = run_sync(snapshot(cli_env))
    assert main(["migrate", "--adopt", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "CREATE INDEX CONCURRENTLY knowledge_siam_vectors_fts ON siam_vectors" in out
    assert "USING hnsw (embedding vector_cosine_ops)" in out
    assert "CREATE FUNCTION knowledge_match_siam_vectors(" in out
    assert "applying" not in out
    assert run_sync(snapshot(cli_env)) == before


def test_adopt_only_adds_and_undo_takes_exactly_that_back(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = run_sync(snapshot(cli_env))
    assert before["answers"], "the old RPC answers before the adoption"
    assert main(["migrate", "--adopt"]) == 0
    out = capsys.readouterr().out
    assert out.index("-- adopt: knowledge_siam_vectors_embedding") < out.index("applying")
    after = run_sync(snapshot(cli_env))
    assert original(after) == original(before)  # rows, columns, the old RPC and its answers
    added = {name for name, _ in after["indexes"] if not name.startswith(adopt.RECORD)} - {
        name for name, _ in before["indexes"]
    }
    assert added == {
        "knowledge_siam_vectors_embedding",
        "knowledge_siam_vectors_fts",
        "knowledge_siam_vectors_source",
        "knowledge_wiki_documents_fts",
        "knowledge_siam_vectors_acl_index",
        "knowledge_wiki_documents_acl_index",
    }
    acl = [("knowledge_acl", "text[]", True)]  # appended, with a default: no rewrite
    assert added_columns(before, after) == {"siam_vectors": acl, "wiki_documents": acl}
    assert set(after["tables"]) - set(before["tables"]) == {"knowledge_adoption"}
    assert run_sync(invalid_indexes(cli_env)) == 0

    assert main(["migrate", "--adopt"]) == 0  # adopted: nothing left to do
    assert "adopt: nothing to do" in capsys.readouterr().out

    assert main(["migrate", "--undo", "--dry-run"]) == 0
    assert "DROP INDEX CONCURRENTLY IF EXISTS knowledge_siam_vectors_fts" in capsys.readouterr().out
    assert run_sync(snapshot(cli_env)) == after
    assert main(["migrate", "--undo"]) == 0
    assert run_sync(snapshot(cli_env)) == before


def test_the_own_schema_is_not_created_over_the_pipelines_tables(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = run_sync(snapshot(cli_env))
    assert main(["migrate"]) == 2
    assert "KNOWLEDGE_SCHEMA_MODE=read_only, or adopt it" in capsys.readouterr().err
    assert run_sync(snapshot(cli_env)) == before


async def test_a_step_that_cannot_get_its_lock_fails_cleanly_and_a_rerun_finishes(
    database: str,
) -> None:
    """A long transaction of a pipeline holds the table: the step gives up (instead of
    queueing every reader behind it), leaves no invalid index, and the next run
    applies everything."""
    pipeline = await asyncpg.connect(database)
    conn = await asyncpg.connect(database)
    try:
        transaction = pipeline.transaction()
        await transaction.start()
        await pipeline.execute("LOCK TABLE wiki_documents IN ACCESS EXCLUSIVE MODE")
        plan = await adopt.adoption_plan(conn)
        with pytest.raises(asyncpg.LockNotAvailableError):
            await adopt.apply(conn, plan, lambda step: None, lock_timeout="200ms")
        await transaction.rollback()
        done = await adopt.applied_steps(conn)
        assert done == ["knowledge_siam_vectors_embedding", "knowledge_siam_vectors_fts"]
        assert await conn.fetchval("SELECT count(*) FROM pg_index WHERE NOT indisvalid") == 0
        assert await conn.fetchval("SELECT to_regclass('knowledge_wiki_documents_fts')") is None
        await adopt.apply(conn, await adopt.adoption_plan(conn), lambda step: None)
        assert len(await adopt.applied_steps(conn)) == 10
        assert await adopt.adoption_plan(conn) == []
    finally:
        await conn.close()
        await pipeline.close()


def test_adopting_needs_the_database_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("KNOWLEDGE_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["migrate", "--adopt", "--dry-run"]) == 2
    assert "KNOWLEDGE_DATABASE_URL: must name the existing database" in capsys.readouterr().err


def test_a_database_without_the_original_tables_is_not_adopted(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fresh_database(postgres_server, "knowledge_adopt_empty")
    monkeypatch.setenv("KNOWLEDGE_DATABASE_URL", url)
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    assert main(["migrate", "--adopt"]) == 2
    assert "cannot adopt siam_vectors: it lacks column(s)" in capsys.readouterr().err


# -- the adopted database, served --------------------------------------------------------


@pytest.fixture
def adopted_client(database: str, tmp_path: Path, gemini: respx.MockRouter) -> Iterator[TestClient]:
    run_sync(adopted(database))
    with TestClient(create_app(adopted_settings(tmp_path, database))) as client:
        yield client


def test_the_adopted_database_is_searched_by_meaning_and_keyword(
    adopted_client: TestClient,
) -> None:
    results = query(adopted_client, "asset upload timeout")["results"]
    sources = [(r["source_type"], r["source_id"]) for r in results]
    assert sources[0] == ("jira", "AOMA-101")
    assert ("git", "9f3c2ab") in sources
    top = results[0]
    assert top["metadata"]["organization"] == "sony-music"
    assert top["metadata"]["app_under_test"] == "aoma"
    assert top["metadata"]["pipeline"] == "ingest-v1"
    wiki = query(adopted_client, "blue green deploy")["results"]
    assert ("wiki", "https://wiki.example.com/aoma/deploy") in [
        (r["source_type"], r["source_id"]) for r in wiki
    ]


def test_filters_on_tenancy_apply_to_both_tables(adopted_client: TestClient) -> None:
    other = query(adopted_client, "asset upload", filters={"organization": "other-label"})
    assert {r["source_id"] for r in other["results"]} == {"OTHER-5"}  # wiki pages have none
    aoma = query(adopted_client, "deploy release", filters={"app_under_test": "aoma"})
    assert {
        r["metadata"].get("app_under_test", r["metadata"].get("app_name")) for r in aoma["results"]
    } <= {"aoma", "AOMA"}
    assert any(r["source_type"] == "wiki" for r in aoma["results"])
    jira_only = query(adopted_client, "asset upload", sources=["jira"])
    assert {r["source_type"] for r in jira_only["results"]} == {"jira"}


def test_detail_by_source_type_and_id(adopted_client: TestClient) -> None:
    doc = adopted_client.get("/v1/knowledge/detail/jira/AOMA-101").json()
    assert "exceeds two gigabytes" in doc["content"] and "split the upload" in doc["content"]
    page = adopted_client.get(
        "/v1/knowledge/detail/wiki/https://wiki.example.com/aoma/rollback"
    ).json()
    assert page["title"] == "Rollback runbook"
    assert adopted_client.get("/v1/knowledge/detail/jira/NOPE-1").status_code == 404


def test_writes_are_refused_naming_why(adopted_client: TestClient, database: str) -> None:
    before = run_sync(snapshot(database))
    response = adopted_client.post(
        "/v1/knowledge/documents",
        json={"source_type": "jira", "source_id": "NEW-1", "content": "A new ticket."},
    )
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert (
        error["type"] == "store_read_only" and "KNOWLEDGE_SCHEMA_MODE=adopted" in error["message"]
    )
    upload = adopted_client.post("/v1/knowledge/files", files=[("file", ("a.md", b"# A\n\nB"))])
    assert upload.status_code == 409 and upload.json()["error"]["type"] == "store_read_only"
    assert run_sync(snapshot(database)) == before


def test_health_names_the_schema_mode_and_what_it_leaves_out(
    adopted_client: TestClient,
) -> None:
    store = adopted_client.get("/health").json()["store"]
    assert store["status"] == "ok" and store["schema_mode"] == "adopted"
    assert store["capabilities"]["wiki_search"] == "keyword"
    assert any("migrate --wiki-vectors" in item for item in store["left_out"])


async def test_a_mismatched_embedder_is_refused_at_start(database: str, tmp_path: Path) -> None:
    await adopted(database)
    service = build_service(adopted_settings(tmp_path, database, embedder="fake"))  # 64-d
    with pytest.raises(EmbedderMismatchError, match=r"holds 768-d vectors; KNOWLEDGE_EMBEDDER"):
        await service.start()
    await service.stop()


async def test_adopted_mode_on_a_database_not_adopted_says_what_to_run(
    database: str, tmp_path: Path
) -> None:
    store = build_store(
        adopted_settings(tmp_path, database), EmbedderIdentity("gemini:x", DIMENSION)
    )
    with pytest.raises(ConfigurationError, match="run `knowledge-api migrate --adopt`"):
        await store.open()
    await store.close()


async def pipeline_writes(url: str, content: str) -> None:
    """Another pipeline adds a passage, as it always did."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO siam_vectors (organization, division, app_under_test, content, "
            "embedding, source_type, source_id, metadata) VALUES ('sony-music', "
            "'digital-operations', 'aoma', $1, $2::text::vector, 'jira', 'AOMA-202', '{}')",
            content,
            literal(embed([content])[0]),
        )
    finally:
        await conn.close()


def eventually_found(client: TestClient, text: str, source_id: str) -> bool:
    """Whether a repeated query finds `source_id` within 10 s (the store's generation
    follows other writers' commits through the database's statistics)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if source_id in [r["source_id"] for r in query(client, text)["results"]]:
            return True
        time.sleep(0.25)
    return False


@pytest.mark.parametrize("mode", ["adopted", "read_only"])
def test_cached_answers_follow_other_pipelines_writes(
    mode: str, database: str, tmp_path: Path, gemini: respx.MockRouter
) -> None:
    if mode == "adopted":
        run_sync(adopted(database))
    with TestClient(create_app(adopted_settings(tmp_path, database, schema_mode=mode))) as client:
        text = "metadata ingestion backlog"
        first = query(client, text)
        assert "AOMA-202" not in [r["source_id"] for r in first["results"]]
        assert query(client, text)["metrics"]["cache_hit"] is True
        run_sync(pipeline_writes(database, "The metadata ingestion backlog grows on Mondays."))
        assert eventually_found(client, text, "AOMA-202")


# -- read-only mode ------------------------------------------------------------------------

READER = "knowledge_reader"


def reader_url(url: str, server: Any) -> str:
    """A role that may read the tables and call functions, and nothing else."""
    database = urlsplit(url).path.lstrip("/")
    server.psql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READER}') "
        f"THEN CREATE ROLE {READER} LOGIN; END IF; END $$;\n"
        f"\\c {database}\n"
        f"REVOKE CREATE ON SCHEMA public FROM PUBLIC;\n"
        f"GRANT USAGE ON SCHEMA public TO {READER};\n"
        f"GRANT SELECT ON siam_vectors, wiki_documents TO {READER};\n"
    )
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{READER}@{host}"))


@pytest.fixture
def reader_client(
    database: str, postgres_server: Any, tmp_path: Path, gemini: respx.MockRouter
) -> Iterator[TestClient]:
    settings = adopted_settings(
        tmp_path, reader_url(database, postgres_server), schema_mode="read_only"
    )
    with TestClient(create_app(settings)) as client:
        yield client


async def test_the_reader_role_really_cannot_change_anything(
    database: str, postgres_server: Any
) -> None:
    conn = await asyncpg.connect(reader_url(database, postgres_server))
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CREATE INDEX knowledge_x ON siam_vectors (content)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                "CREATE FUNCTION knowledge_f() RETURNS int LANGUAGE sql AS 'SELECT 1'"
            )
    finally:
        await conn.close()


@pytest.mark.parametrize("mode", ["adopted", "read_only"])
def test_a_filter_beyond_metadata_equality_is_a_400_naming_operator_and_mode(
    mode: str, request: pytest.FixtureRequest
) -> None:
    """The tables' functions take metadata equalities only: anything else is refused,
    never applied to what they return."""
    client = request.getfixturevalue("adopted_client" if mode == "adopted" else "reader_client")
    body = {"query": "asset upload", "filters": {"organization": {"$ne": "other-label"}}}
    response = client.post("/v1/knowledge/query", json=body)
    assert response.status_code == 400, response.text
    details = response.json()["error"]["details"]
    assert details["operator"] == "$ne" and details["backend"] == f"existing database ({mode})"
    equal = query(client, "asset upload", filters={"organization": "other-label"})
    assert {r["source_id"] for r in equal["results"]} == {"OTHER-5"}


@pytest.mark.parametrize("mode", ["adopted", "read_only"])
def test_facets_are_a_400_naming_the_mode_and_health_says_so(
    mode: str, request: pytest.FixtureRequest
) -> None:
    client = request.getfixturevalue("adopted_client" if mode == "adopted" else "reader_client")
    body = {"query": "asset upload", "synthesize": False, "facets": ["source_type"]}
    response = client.post("/v1/knowledge/query", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    details = error["details"]
    assert details["field"] == "facets" and details["backend"] == f"existing database ({mode})"
    assert "cannot count facets" in error["message"]
    left_out = client.get("/health").json()["store"]["left_out"]
    assert any(item.startswith("facets") for item in left_out)


@pytest.mark.parametrize("mode", ["adopted", "read_only"])
def test_recency_on_the_passages_own_dates_counts_each_undated_and_health_says_so(
    mode: str, request: pytest.FixtureRequest
) -> None:
    """The tables' functions return no dates: recency on created_at still answers, in
    the order of relevance, and says every passage was ranked without its date."""
    client = request.getfixturevalue("adopted_client" if mode == "adopted" else "reader_client")
    plain = query(client, "asset upload timeout")
    recency = {"field": "created_at", "half_life_days": 1}
    dated = query(client, "asset upload timeout", ranking={"recency": recency})
    ids = [r["id"] for r in dated["results"]]
    assert ids and ids == [r["id"] for r in plain["results"]]
    assert dated["metrics"]["ranking"]["recency"] == {**recency, "undated": len(ids)}
    left_out = client.get("/health").json()["store"]["left_out"]
    assert any(item.startswith("recency on created_at") for item in left_out)


def test_read_only_mode_searches_the_tables_as_they_are(
    reader_client: TestClient, database: str
) -> None:
    before = run_sync(snapshot(database))
    results = query(reader_client, "asset upload timeout")["results"]
    assert results[0]["source_id"] == "AOMA-101"
    assert results[0]["metadata"]["division"] == "digital-operations"
    wiki = query(reader_client, "rollback deployment")["results"]
    assert ("wiki", "https://wiki.example.com/aoma/rollback") in [
        (r["source_type"], r["source_id"]) for r in wiki
    ]
    filtered = query(reader_client, "asset upload", filters={"organization": "other-label"})
    assert {r["source_id"] for r in filtered["results"]} == {"OTHER-5"}
    detail = reader_client.get("/v1/knowledge/detail/git/9f3c2ab").json()
    assert "nginx proxy timeout" in detail["content"]
    write = reader_client.post(
        "/v1/knowledge/documents",
        json={"source_type": "jira", "source_id": "NEW-1", "content": "A new ticket."},
    )
    assert write.status_code == 409 and "read_only" in write.json()["error"]["message"]
    upload = reader_client.post("/v1/knowledge/files", files=[("file", ("a.md", b"# A\n\nB"))])
    assert upload.status_code == 409 and "read_only" in upload.json()["error"]["message"]
    assert run_sync(snapshot(database)) == before


def test_read_only_listings_read_the_tables_and_deletes_are_refused(
    reader_client: TestClient, database: str
) -> None:
    before = run_sync(snapshot(database))
    collections = reader_client.get("/v1/knowledge/collections").json()["collections"]
    assert [(c["name"], c["documents"]) for c in collections] == [("default", None)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = reader_client.get("/v1/knowledge/documents", params=params).json()
        seen += page["documents"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [d["id"] for d in seen] == sorted(d["id"] for d in seen)
    found = {(d["source_type"], d["source_id"]) for d in seen}
    assert ("jira", "AOMA-101") in found
    assert ("wiki", "https://wiki.example.com/aoma/rollback") in found
    wiki = reader_client.get("/v1/knowledge/documents", params={"source_type": "wiki"}).json()
    assert {d["source_type"] for d in wiki["documents"]} == {"wiki"}
    assert reader_client.get("/v1/knowledge/sources").json() == {"sources": []}
    refused = reader_client.delete("/v1/knowledge/sources/anything")
    assert refused.status_code == 409 and "read_only" in refused.json()["error"]["message"]
    assert run_sync(snapshot(database)) == before


def test_read_only_health_says_what_is_left_out(reader_client: TestClient) -> None:
    health = reader_client.get("/health").json()
    store = health["store"]
    assert store["status"] == "ok" and store["schema_mode"] == "read_only"
    assert store["capabilities"]["vector_search"].endswith("match_siam_vectors_gemini")
    assert any(item.startswith("full-text ranking") for item in store["left_out"])
    assert any(item.startswith("wiki search by meaning") for item in store["left_out"])


# -- wiki vectors ----------------------------------------------------------------------------


class Interrupted(Exception):
    pass


async def wiki_vectors(url: str) -> dict[str, np.ndarray | None]:
    conn = await asyncpg.connect(url)
    try:
        await register_codecs(conn)
        rows = await conn.fetch("SELECT title, knowledge_embedding FROM wiki_documents")
        return {r["title"]: r["knowledge_embedding"] for r in rows}
    finally:
        await conn.close()


async def test_wiki_vectors_resume_after_an_interruption(database: str) -> None:
    await adopted(database)
    conn = await asyncpg.connect(database)

    def stop(total: conversion.WikiConversion) -> None:
        raise Interrupted

    try:
        with pytest.raises(Interrupted):
            await conversion.convert_wiki_vectors(conn, embed_list, DIMENSION, 2, print, stop)
        half = await wiki_vectors(database)
        assert sum(v is not None for v in half.values()) == 2  # one batch committed
        assert await conversion.remaining_wiki_pages(conn) == 3

        embedded: list[str] = []

        def counting(texts: list[str]) -> np.ndarray:
            embedded.extend(texts)
            return embed(texts)

        done = await conversion.convert_wiki_vectors(conn, counting, DIMENSION, 2, print)
        assert done.converted + done.embedded == 3  # the rest, not the first batch again
        assert await conversion.remaining_wiki_pages(conn) == 0
    finally:
        await conn.close()
    vectors = await wiki_vectors(database)
    texts = {t: f"{t}\n{m}" for t, m, *_ in WIKI_PAGES}
    for title, *_ in WIKI_PAGES:
        stored = vectors[title]
        assert stored is not None
        expected = embed([texts[title]])[0]  # parsed from TEXT, or embedded anew: same text
        np.testing.assert_allclose(stored, expected, atol=1e-5)
    # pages with a well-formed TEXT vector are never sent to the embedder
    assert not {text.split("\n")[0] for text in embedded} & {"Deploying AOMA", "Quarterly close"}


def test_wiki_pages_are_searched_by_meaning_after_the_migration(
    database: str, tmp_path: Path, gemini: respx.MockRouter
) -> None:
    before = run_sync(snapshot(database))
    run_sync(adopted(database, wiki_vectors=True))
    after = run_sync(snapshot(database))
    assert after["siam"] == before["siam"] and after["answers"] == before["answers"]
    assert [row[:6] for row in after["wiki"]] == [row[:6] for row in before["wiki"]]
    with TestClient(create_app(adopted_settings(tmp_path, database))) as client:
        store = client.get("/health").json()["store"]
        assert store["capabilities"]["wiki_search"] == "meaning and keyword"
        service = client.app.state.service  # type: ignore[attr-defined]
        vector = embed(["blue green pipeline release"])[0]
        asked = SearchRequest("", vector, 5, SearchFilters(), 0.0, "vector")
        hits = client.portal.call(service.store.search, asked)
        assert ("wiki", "https://wiki.example.com/aoma/deploy") in [
            (h.source_type, h.source_id) for h in hits
        ]
        assert isinstance(service.store, ExistingTables)
    run_sync(undo_all(database))
    assert run_sync(snapshot(database)) == before


def test_the_wiki_vectors_command(
    cli_env: str,
    gemini: respx.MockRouter,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert main(["migrate", "--wiki-vectors"]) == 2  # adoption comes first
    assert "run `knowledge-api migrate --adopt` first" in capsys.readouterr().err
    assert main(["migrate", "--adopt"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")  # 64-d: not the passages' space
    assert main(["migrate", "--wiki-vectors"]) == 2
    assert "holds 768-d vectors and KNOWLEDGE_EMBEDDER makes 64-d" in capsys.readouterr().err
    assert run_sync(adopt_record(cli_env)) == 10  # nothing added by the refused run
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "gemini")
    assert main(["migrate", "--adopt", "--wiki-vectors", "--dry-run"]) == 0
    assert "wiki vectors: 5 pages to convert in batches of 200" in capsys.readouterr().out
    assert main(["migrate", "--adopt", "--wiki-vectors", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "wiki vectors: 2 converted, 3 embedded anew" in out
    assert "applying knowledge_wiki_vector_function" in out
    assert "applying knowledge_wiki_acl_vector_function" in out  # within access lists too
    assert all(v is not None for v in run_sync(wiki_vectors(cli_env)).values())
    sent = [json.loads(call.request.content) for call in gemini.calls]
    assert sum(len(body["requests"]) for body in sent) == 3  # only the pages lacking one


async def adopt_record(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return len(await adopt.applied_steps(conn))
    finally:
        await conn.close()


async def undo_all(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await adopt.undo(conn, lambda step: None)
    finally:
        await conn.close()


# -- the same through Supabase's REST API ------------------------------------------------------


@pytest.mark.parametrize("mode", ["adopted", "read_only"])
def test_supabase_serves_the_existing_tables(
    mode: str, database: str, tmp_path: Path, gemini: respx.MockRouter
) -> None:
    """The supabase store reaches the same tables through PostgREST (answered here by a
    stand-in on the seeded database): RPCs and table reads only."""
    if mode == "adopted":
        run_sync(adopted(database))
    gemini.route(url__startswith=f"{SUPABASE_URL}/rest/v1").mock(
        side_effect=PostgREST(database, SERVICE_ROLE_KEY)
    )
    settings = adopted_settings(
        tmp_path,
        "",
        store="supabase",
        schema_mode=mode,
        supabase_url=SUPABASE_URL,
        supabase_service_role_key=Secret(SERVICE_ROLE_KEY),
        supabase_backoff=0.0,
    )
    with TestClient(create_app(settings)) as client:
        results = query(client, "asset upload timeout")["results"]
        assert results[0]["source_id"] == "AOMA-101"
        assert results[0]["metadata"]["organization"] == "sony-music"
        wiki = query(client, "rollback deployment")["results"]
        assert "https://wiki.example.com/aoma/rollback" in [r["source_id"] for r in wiki]
        assert client.get("/health").json()["store"]["schema_mode"] == mode
        # within access lists where the adoption keeps them (every row public here)
        hidden = query(client, "asset upload timeout", filters={"acl": "group:hr"})["results"]
        assert hidden == []
        public = query(client, "asset upload timeout", filters={"acl": "public"})["results"]
        assert [r["id"] for r in public] == [r["id"] for r in results]


def test_read_only_reads_every_row_as_public(reader_client: TestClient) -> None:
    """The tables keep no access lists: a filter on `acl` finds every row for `public`
    and none for another principal, changing one is a 400 naming `acl`, and /health
    says so."""
    client = reader_client
    plain = query(client, "asset upload timeout")["results"]
    public = query(client, "asset upload timeout", filters={"acl": "public"})["results"]
    assert plain and [r["id"] for r in public] == [r["id"] for r in plain]
    assert query(client, "asset upload timeout", filters={"acl": "group:hr"})["results"] == []
    left_out = client.get("/health").json()["store"]["left_out"]
    assert any(item.startswith("document permissions") for item in left_out)
    doc = client.get("/v1/knowledge/detail/jira/AOMA-101").json()
    refused = client.patch(f"/v1/knowledge/documents/{doc['id']}", json={"acl": ["group:hr"]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["details"]["field"] == "acl" and "read_only" in error["message"]
