"""The SQLite store's keyword index kept in few FTS5 segments (migration 012): FTS5 looks
each query term up in every segment, so a store written in small transactions must not
pile them up, and one written before is merged once."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np

from knowledge_api.models import DEFAULT_COLLECTION, Chunk, Document, SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.keyword import KeywordEntry, KeywordIndex
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import opened_sqlite


def document(name: str, text: str) -> Document:
    doc = Document("wiki", name, text, name)
    doc.chunks = [Chunk(f"{name}-0", doc.id, 0, text, embedding=np.ones(4) / 2)]
    return doc


def segments(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone()[0])


async def write_one_by_one(path: Path, count: int) -> None:
    store = await opened_sqlite(path, "test", 4)
    for i in range(count):
        words = " ".join(f"w{i * 7 % (j + 2)}" for j in range(20))
        await store.index_documents([document(f"d{i}", f"deployment {words}")])
    await store.close()


async def keyword(path: Path, query: str) -> list[tuple[str, float]]:
    store = SQLiteStore(path)
    await store.open()
    hits = await store.search(SearchRequest(query, None, 10, SearchFilters(), mode="keyword"))
    await store.close()
    return [(hit.source_id, hit.score) for hit in hits]


async def test_small_writes_leave_few_segments(tmp_path: Path) -> None:
    await write_one_by_one(tmp_path / "k.db", 40)
    assert segments(tmp_path / "k.db") <= 3  # FTS5's own setting leaves 10 here


async def test_an_index_written_before_is_merged_once_and_ranks_alike(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    await write_one_by_one(path, 0)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM chunks_fts_config WHERE k = 'crisismerge'")  # as before 012
    await write_one_by_one(path, 30)
    assert segments(path) > 6
    before = await keyword(path, "deployment w1 w3")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA user_version = 11")
    after = await keyword(path, "deployment w1 w3")  # opened: migrated
    assert segments(path) == 1
    assert after == before and len(after) == 10


def test_the_in_memory_keyword_index_merges_alike() -> None:
    """The index Chroma's store keeps beside its collections is built from the same
    text, and written one document at a time too."""
    index = KeywordIndex()
    for i in range(40):
        entry = KeywordEntry(f"c{i}", f"d{i}", DEFAULT_COLLECTION, "wiki", {}, "", "", "deploy")
        index.replace([f"d{i}"], [entry])
    segments = index._db.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx")
    assert segments.fetchone()[0] <= 3
    assert len(index.search("deploy", 50, SearchFilters())) == 40
