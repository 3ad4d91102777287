"""Bulk writes of the postgres store: COPY and staging tables, one transaction per load,
the search indexes built once after a load that outgrows the table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import asyncpg
import numpy as np
import pytest

from knowledge_api.errors import IndexingError
from knowledge_api.ingest.migrate import migrate
from knowledge_api.models import Chunk, Document, EmbedderIdentity, SearchFilters, chunk_id
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.postgres.codecs import register_codecs
from knowledge_api.stores.postgres.load import IndexBuild, drop_search_indexes
from knowledge_api.stores.postgres.server import buffers_size
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.postgres.store import PostgresStore
from tests.conftest import make_settings, make_store
from tests.pg import postgres_settings
from tests.test_store_conformance import EMBEDDER

IDENTITY = EmbedderIdentity(EMBEDDER.name, EMBEDDER.dimension)
PASSAGES = """SELECT id, document_id, collection, organization, division, app_under_test,
                     source_type, source_id, title, section, chunk_index, chunk_count, content,
                     content_hash, embedding::text, metadata, fts::text
              FROM siam_vectors ORDER BY id"""
DOCUMENTS = """SELECT id, collection, source_type, source_id, title, content, metadata,
                      organization, division, app_under_test, content_hash
               FROM knowledge_documents ORDER BY id"""
PAGES = """SELECT id, title, markdown_content, url, app_name, embedding::text, fts::text
           FROM wiki_documents ORDER BY id"""
INDEXES = """SELECT indexname, indexdef FROM pg_indexes
             WHERE tablename IN ('siam_vectors', 'wiki_documents') ORDER BY 1"""


def documents(n: int = 12, seed: int = 5) -> list[Document]:
    """Documents of every kind the write path treats apart: wiki pages (a page vector),
    tenancy metadata (copied into columns), several passages, a non-string tenancy value
    (left out of the columns)."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        kind = ("wiki", "jira", "git")[i % 3]
        metadata: dict[str, Any] = {"organization": "sony", "app_under_test": f"app{i % 2}"}
        metadata["division"] = 7 if i == 4 else "music"
        doc = Document(kind, f"{kind}-{i}", f"Body {i} of the release notes.", f"T{i}", metadata)
        vectors = rng.standard_normal((1 + i % 3, EMBEDDER.dimension)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        doc.chunks = [
            Chunk(
                chunk_id(doc.id, j),
                doc.id,
                j,
                f"Passage {j} about tickets and builds number {i}.",
                f"T{i}",
                f"Section {j}",
                embedding=vectors[j],
            )
            for j in range(len(vectors))
        ]
        docs.append(doc)
    return docs


@pytest.fixture
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return postgres_settings(request, tmp_path)


async def open_store(settings: Settings, **changes: Any) -> PostgresStore:
    store = make_store("postgres", settings.replace(**changes))
    assert isinstance(store, PostgresStore)
    await store.open()
    return store


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    store = await open_store(settings)  # the schema
    await store.close()
    conn = await asyncpg.connect(settings.database_url.get())
    await register_codecs(conn)
    yield conn
    await conn.close()


async def snapshot(db: asyncpg.Connection) -> list[list[tuple[Any, ...]]]:
    return [[tuple(r) for r in await db.fetch(sql)] for sql in (DOCUMENTS, PASSAGES, PAGES)]


async def sets(*batches: Sequence[Document]) -> AsyncIterator[Sequence[Document]]:
    for batch in batches:
        yield batch


@pytest.mark.parametrize("rebuild_rows", [0, 1_000_000], ids=["index-rebuilt", "index-kept"])
async def test_the_bulk_path_stores_what_the_json_function_stores(
    settings: Settings, db: asyncpg.Connection, rebuild_rows: int
) -> None:
    """Rows, vectors (exact), full-text vectors and page vectors are the same whether
    written by COPY (with the indexes rebuilt or kept) or by the JSON function the
    supabase store calls, which wrote every document before."""
    indexes = await db.fetch(INDEXES)
    by_json = await open_store(settings)
    try:
        await SiamStore.index_documents(by_json, documents())
        expected = await snapshot(db)
        await db.execute("DELETE FROM knowledge_documents")
    finally:
        await by_json.close()
    store = await open_store(settings, postgres_rebuild_rows=rebuild_rows)
    try:
        await store.index_documents(documents())
    finally:
        await store.close()
    assert await snapshot(db) == expected
    assert len(expected[1]) == sum(len(d.chunks) for d in documents())
    assert [r[8] for r in expected[0]].count(None) == 1  # division 7: a number is no tenant
    assert await db.fetch(INDEXES) == indexes  # built again as they were


async def test_the_index_is_rebuilt_with_the_configured_parameters(
    settings: Settings, db: asyncpg.Connection
) -> None:
    store = await open_store(
        settings, postgres_rebuild_rows=5, postgres_hnsw_m=8, postgres_hnsw_ef_construction=40
    )
    try:
        await store.index_documents(documents())
        hits = await store.search(
            SearchRequest("tickets builds", documents()[3].chunks[0].embedding, 3, SearchFilters())
        )
    finally:
        await store.close()
    definition = await db.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'siam_vectors_embedding'"
    )
    assert "m='8'" in definition and "ef_construction='40'" in definition
    assert hits[0].chunk.id == documents()[3].chunks[0].id


async def test_a_rebuilding_load_keeps_only_the_indexes_of_keys_and_of_the_move(
    db: asyncpg.Connection,
) -> None:
    """Every other index of passages and pages costs each row written an insertion and
    is built again at the end; replacing a document finds its passages by document id."""
    before = [r["indexname"] for r in await db.fetch(INDEXES)]
    load = db.transaction()
    await load.start()
    try:
        rebuilt = await drop_search_indexes(db, IndexBuild())
        kept = [r["indexname"] for r in await db.fetch(INDEXES)]
    finally:
        await load.rollback()
    assert kept == ["siam_vectors_document", "siam_vectors_pkey", "wiki_documents_pkey"]
    assert sorted(statement.split()[2] for statement in rebuilt) == [
        name for name in before if name not in kept
    ]


async def test_a_small_write_into_a_large_table_keeps_the_index(
    settings: Settings, db: asyncpg.Connection
) -> None:
    store = await open_store(settings, postgres_rebuild_rows=5)
    try:
        await store.index_documents(documents(12))  # 24 passages into none: rebuilt
        oid = await db.fetchval("SELECT 'siam_vectors_embedding'::regclass::oid")
        await store.index_documents(documents(12, seed=9)[:4])  # 7 passages into 24: kept
    finally:
        await store.close()
    assert await db.fetchval("SELECT 'siam_vectors_embedding'::regclass::oid") == oid


@pytest.mark.parametrize("rebuild_rows", [0, 1_000_000], ids=["index-rebuilt", "index-kept"])
async def test_a_load_that_fails_midway_leaves_the_previous_state(
    settings: Settings, db: asyncpg.Connection, rebuild_rows: int
) -> None:
    store = await open_store(settings, postgres_rebuild_rows=rebuild_rows)
    try:
        await store.index_documents(documents(3))
        before, indexes = await snapshot(db), await db.fetch(INDEXES)
        generation = await db.fetchval("SELECT generation FROM knowledge_store_state")
        changed = documents(12, seed=8)  # the same documents, other vectors
        broken = documents(2, seed=1)
        broken[1].chunks[0].embedding = np.ones(EMBEDDER.dimension + 1, dtype=np.float32)
        with pytest.raises(IndexingError, match="dimensions"):
            await store.index_batches(sets(changed[:6], changed[6:], broken), expected=100)
        missing = documents(2, seed=1)
        missing[1].chunks[0].embedding = None
        with pytest.raises(IndexingError, match="has no embedding"):
            await store.index_batches(sets(changed, missing), expected=100)
    finally:
        await store.close()
    assert await snapshot(db) == before
    assert await db.fetch(INDEXES) == indexes
    assert await db.fetchval("SELECT generation FROM knowledge_store_state") == generation


async def test_a_migration_loads_in_bulk_and_running_it_again_skips_everything(
    settings: Settings, db: asyncpg.Connection, tmp_path: Path
) -> None:
    source = make_store("sqlite", make_settings(tmp_path, db_path=tmp_path / "source.db"))
    await source.open()
    target = await open_store(settings, postgres_rebuild_rows=10)
    try:
        await source.check_embedder(IDENTITY.name, IDENTITY.dimension)
        await source.index_documents(documents(600))
        first = await migrate(source, target, IDENTITY)
        oid = await db.fetchval("SELECT 'siam_vectors_embedding'::regclass::oid")
        generation = await db.fetchval("SELECT generation FROM knowledge_store_state")
        again = await migrate(source, target, IDENTITY)
        hit = await target.search(
            SearchRequest("tickets", documents(600)[77].chunks[1].embedding, 1, SearchFilters())
        )
    finally:
        await target.close()
        await source.close()
    passages = sum(len(d.chunks) for d in documents(600))
    assert (first["default"].documents, first["default"].chunks) == (600, passages)
    assert (again["default"].documents, again["default"].skipped) == (0, 600)
    assert await db.fetchval("SELECT count(*) FROM siam_vectors") == passages
    assert await db.fetchval("SELECT 'siam_vectors_embedding'::regclass::oid") == oid
    assert await db.fetchval("SELECT generation FROM knowledge_store_state") == generation
    assert hit[0].chunk.id == documents(600)[77].chunks[1].id


async def test_the_next_set_is_read_while_the_database_moves_this_one(
    settings: Settings, db: asyncpg.Connection
) -> None:
    """The move of a set waits here on a lock the test holds; the source, asked for the
    next set, finds that move running, and only then lets it go. Read after the move, the
    load would never get past its first set."""
    seen: list[asyncpg.Record] = []

    async def source() -> AsyncIterator[Sequence[Document]]:
        yield documents(6)[:3]
        for _ in range(600):  # the move was sent; the server may not be at the lock yet
            # inside a transaction pg_stat_activity is read once and then kept: drop it
            await db.execute("SELECT pg_stat_clear_snapshot()")
            seen[:] = await db.fetch(
                """SELECT wait_event_type FROM pg_stat_activity
                   WHERE query LIKE '%knowledge_index_staged()%' AND state = 'active'
                     AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"""
            )
            if seen:
                break
            await asyncio.sleep(0.05)
        await lock.commit()
        yield documents(6)[3:]

    store = await open_store(settings)
    lock = db.transaction()
    await lock.start()
    try:
        await db.execute("SELECT 1 FROM knowledge_store_state FOR UPDATE")
        await asyncio.wait_for(store.index_batches(source(), expected=6), timeout=60)
    finally:
        if db.is_in_transaction():  # the source was never asked for the next set
            await db.execute("ROLLBACK")
        await store.close()
    assert len(seen) == 1
    assert await db.fetchval("SELECT count(*) FROM knowledge_documents") == 6


async def test_ef_search_is_the_callers_and_ends_with_the_call(db: asyncpg.Connection) -> None:
    """The function sets hnsw.ef_search for its own query only."""
    async with db.transaction():
        await db.execute("SET LOCAL hnsw.ef_search = 7")
        await db.fetch(
            "SELECT * FROM match_siam_vectors_gemini($1, ef_search => 300)",
            np.ones(EMBEDDER.dimension, dtype=np.float32),
        )
        assert await db.fetchval("SELECT current_setting('hnsw.ef_search')") == "7"


@pytest.mark.parametrize(
    ("memory", "limit", "expected"),
    [
        (2**28, "max", "128MB"),
        (2**32, "max", "1024MB"),
        (2**36, "max", "2048MB"),
        (2**36, str(2**31), "512MB"),  # a container of 2 GiB on a larger host
        (2**32, str(2**63 - 4096), "1024MB"),  # cgroup v1's "no limit"
    ],
)
def test_the_embedded_page_cache_is_a_quarter_of_usable_memory_within_bounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, memory: int, limit: str, expected: str
) -> None:
    import psutil

    from knowledge_api.stores.postgres import server

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(total=memory))
    (tmp_path / "memory.max").write_text(limit + "\n")
    monkeypatch.setattr(server, "CGROUP_LIMITS", (tmp_path / "none", tmp_path / "memory.max"))
    assert buffers_size("auto") == expected
    assert buffers_size("512MB") == "512MB"
    assert Settings.from_env(environ={}, env_file=None).postgres_shared_buffers == "auto"
