"""The SQLite file's watch on commits: another connection's commit is seen at once,
asking whether one was made costs no `PRAGMA data_version` while none was, and watching
never drops the locks SQLite holds on the WAL index."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

from knowledge_api.models import Chunk, Document
from knowledge_api.stores.sqlite.file import CommitWatch
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import opened_sqlite


def document(source_id: str, collection: str) -> Document:
    doc = Document("wiki", source_id, f"text {source_id}", collection=collection)
    embedding = np.ones(4, dtype=np.float32) / 2
    doc.chunks = [Chunk(f"{source_id}-0", doc.id, 0, doc.content, embedding=embedding)]
    return doc


def test_only_a_commit_moves_the_wal_index_header(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("PRAGMA journal_mode=WAL")
    reader.execute("CREATE TABLE t (x INTEGER)")
    watch = CommitWatch(path)
    watch.open()
    first = watch.moved()
    assert first  # never looked: it may have moved
    watch.seen = first
    assert watch.moved() is None
    reader.execute("SELECT count(*) FROM t").fetchone()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.execute("ROLLBACK")
    assert watch.moved() is None  # reads and a rolled back write leave it be
    writer.execute("INSERT INTO t VALUES (2)")
    moved = watch.moved()
    assert moved and moved != first
    watch.seen = moved
    assert watch.moved() is None
    watch.close()
    assert watch.moved() == b""  # nothing to read: maybe
    writer.close()
    reader.close()


def test_a_database_in_memory_is_always_asked(tmp_path: Path) -> None:
    watch = CommitWatch(Path(":memory:"))
    watch.open()
    assert watch.moved() == b""


async def test_generations_cost_no_pragma_until_another_connection_commits(
    tmp_path: Path,
) -> None:
    store = await opened_sqlite(tmp_path / "k.db", "test", 4)
    await store.index_documents([document("a", "docs")])
    other = SQLiteStore(tmp_path / "k.db")  # its own connections, as another process's
    await other.open()
    before = await store.collection_generation("docs")
    statements: list[str] = []
    store.file.db().set_trace_callback(statements.append)
    for _ in range(5):
        assert await store.collection_generation("docs") == before
    assert not any("data_version" in s for s in statements)

    await other.index_documents([document("b", "docs")])
    assert await store.collection_generation("docs") != before  # seen at once
    assert sum("data_version" in s for s in statements) == 1
    after = await store.collection_generation("docs")
    assert sum("data_version" in s for s in statements) == 1
    assert await other.collection_generation("docs") == after
    await other.close()
    await store.close()


FIRST_OPENER = """
import fcntl, sys
with open(sys.argv[1], "r+b") as index:
    try:  # the byte SQLite locks to learn whether it is the first to open the index
        fcntl.lockf(index, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)
    except OSError:
        sys.exit(1)
"""


def would_be_first_opener(path: Path) -> bool:
    """Whether another process could take the index as the first to open it (SQLite
    then truncates it, and a process still mapping it dies of SIGBUS on its commit)."""
    shm = f"{path}-shm"
    return subprocess.run([sys.executable, "-c", FIRST_OPENER, shm]).returncode == 0


async def test_watching_keeps_the_locks_sqlite_holds_on_the_wal_index(tmp_path: Path) -> None:
    store = await opened_sqlite(tmp_path / "k.db", "test", 4)
    await store.index_documents([document("a", "docs")])
    assert store.file.commit_watch.mapped is not None  # watching
    await store.generation()
    assert not would_be_first_opener(tmp_path / "k.db")
    await store.index_documents([document("b", "docs")])
    assert not would_be_first_opener(tmp_path / "k.db")
    os.close(os.open(f"{tmp_path / 'k.db'}-shm", os.O_RDONLY))  # what the watch must not do
    assert would_be_first_opener(tmp_path / "k.db")  # the probe tells dropped locks
    await store.close()
