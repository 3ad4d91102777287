"""Bulk writes of the `postgres` store: COPY into staging tables, one statement into the
tables, and the search indexes built once when a load outgrows the table.

Each document set is copied (binary COPY, vectors in pgvector's binary form) into the
transaction's staging tables and moved into the tables by `knowledge_index_staged()`,
the function the JSON way in (`knowledge_index_documents`, the supabase store's) ends
in too: both store the same rows. Linking passages one by one into the HNSW graph (and
entering their words in the GIN index, their keys in the secondary btrees) is what
bounds a large load; when at least `rebuild_rows` passages come into a table holding no
more, those indexes are dropped first and built once at the end, in the same
transaction: a load that fails leaves the tables and the indexes as they were. The next
set is read while the database moves this one, so a load from another store waits less
on the sum of the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_api.models import Document
from knowledge_api.stores import records
from knowledge_api.stores.postgres.rows import require_embeddings

LOAD_TIMEOUT = 3600.0
"""Seconds a bulk statement (the move of a large set, an index build) may take: the
pool's per-statement timeout is sized for searches."""
VECTOR_INDEX = "siam_vectors_embedding"
MOVE_LOOKUP_INDEX = "siam_vectors_document"
"""Kept through a load: replacing a document deletes its passages by this index."""
DOCUMENT_COLUMNS = (
    "id",
    "collection",
    "source_type",
    "source_id",
    "title",
    "content",
    "metadata",
    "content_hash",
    "source",
    "created_at",
    "updated_at",
    "acl",
)
PASSAGE_COLUMNS = (
    "id",
    "document_id",
    "chunk_index",
    "chunk_count",
    "title",
    "section",
    "content",
    "content_hash",
    "embedding",
    "start_offset",
    "end_offset",
    "page",
)


@dataclass(frozen=True, slots=True)
class IndexBuild:
    """How the vector index of the passages is built: its graph's links per vector and
    build candidates, the memory of the build, and from which load size it is rebuilt."""

    m: int = 16
    ef_construction: int = 64
    memory: str = "1GB"
    rebuild_rows: int = 10000

    def rebuilds(self, incoming: int, stored: int) -> bool:
        """Building once beats linking each passage when the load outgrows the table."""
        return incoming >= self.rebuild_rows and stored <= incoming

    def create_sql(self) -> str:
        return (
            f"CREATE INDEX {VECTOR_INDEX} ON siam_vectors USING hnsw "
            f"(embedding vector_cosine_ops) WITH (m = {int(self.m)}, "
            f"ef_construction = {int(self.ef_construction)})"
        )


DEFAULT_BUILD = IndexBuild()


async def load(
    conn: Any, batches: AsyncIterable[Sequence[Document]], expected: int, build: IndexBuild
) -> int:
    """Write every set of `batches` on `conn`, inside the caller's transaction; the
    passages written."""
    rebuilt = []
    if build.rebuilds(expected, await stored_passages(conn, expected, build)):
        rebuilt = await drop_search_indexes(conn, build)
    written = await write_sets(conn, batches)
    if rebuilt:
        await conn.execute(f"SET LOCAL maintenance_work_mem = '{build.memory}'")
    for definition in rebuilt:
        await conn.execute(definition, timeout=LOAD_TIMEOUT)
    return written


async def drop_search_indexes(conn: Any, build: IndexBuild) -> list[str]:
    """Drop the indexes of passages and wiki pages that every row written costs a graph
    insertion, dozens of entries or a random btree insertion, and that building once from
    the full table does faster: all but those of keys and constraints and the one the
    move finds a document's passages by. The statements that build them again (the
    passages' HNSW index with the configured parameters, the others as they were)."""
    rows = await conn.fetch(
        """SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
           FROM pg_index i
           WHERE i.indrelid IN ('siam_vectors'::regclass, 'wiki_documents'::regclass)
             AND NOT i.indisunique
             AND i.indexrelid <> $1::regclass
           ORDER BY 1""",
        MOVE_LOOKUP_INDEX,
    )
    for row in rows:
        await conn.execute(f"DROP INDEX {row['name']}")
    return [build.create_sql() if r["name"] == VECTOR_INDEX else r["definition"] for r in rows]


async def stored_passages(conn: Any, expected: int, build: IndexBuild) -> int:
    """The passages stored, counted only when the load is large enough to matter."""
    if expected < build.rebuild_rows:
        return 0
    count: int = await conn.fetchval("SELECT count(*) FROM siam_vectors")
    return count


async def write_sets(conn: Any, batches: AsyncIterable[Sequence[Document]]) -> int:
    """Stage and move every set; the passages written. The next set is read while the
    database moves this one (its longest statement): a source that reads in Python, such
    as a SQLite store, then works beside the database instead of in turn with it."""
    written = 0
    source = aiter(batches)
    batch = await anext(source, None)
    while batch is not None:
        move = await stage_set(conn, batch)
        try:
            batch = await anext(source, None)
        finally:
            if move is not None:
                written += int((await move)["passages"])
    return written


async def stage_set(conn: Any, documents: Sequence[Document]) -> asyncio.Future[Any] | None:
    """Stage one set (the last version of a document wins) and start its move into the
    tables: the move's row to come, None for an empty set."""
    unique = list({doc.id: doc for doc in documents}.values())
    if not unique:
        return None
    for doc in unique:
        require_embeddings(doc)
    await conn.execute("SELECT knowledge_stage_documents()")
    await conn.copy_records_to_table(
        "knowledge_staged_documents",
        records=document_records(unique),
        columns=DOCUMENT_COLUMNS,
        timeout=LOAD_TIMEOUT,
    )
    await conn.copy_records_to_table(
        "knowledge_staged_passages",
        records=passage_records(unique),
        columns=PASSAGE_COLUMNS,
        timeout=LOAD_TIMEOUT,
    )
    move: asyncio.Future[Any] = asyncio.ensure_future(
        conn.fetchrow("SELECT * FROM knowledge_index_staged()", timeout=LOAD_TIMEOUT)
    )
    await asyncio.sleep(0)  # the move is sent: a source may read a whole set without a pause
    return move


def document_records(documents: Sequence[Document]) -> Iterator[tuple[Any, ...]]:
    for doc in documents:
        yield (
            *doc.leading_columns(),
            doc.metadata,
            doc.content_hash,
            doc.source,
            *records.carried_dates(doc),
            list(doc.acl),
        )


def passage_records(documents: Sequence[Document]) -> Iterator[tuple[Any, ...]]:
    for doc in documents:
        for chunk in doc.chunks:
            yield (
                chunk.id,
                doc.id,
                chunk.chunk_index,
                len(doc.chunks),
                chunk.title,
                chunk.section,
                chunk.content,
                chunk.content_hash,
                chunk.embedding,
                chunk.start,
                chunk.end,
                chunk.page,
            )
