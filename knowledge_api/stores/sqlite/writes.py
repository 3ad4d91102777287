"""The sqlite store's writes, run on its writer thread: each document replaced with its
chunks and its filterable metadata values under a savepoint of its own, documents
deleted, and the record of the sources they came from."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from knowledge_api.errors import IndexingError
from knowledge_api.models import Chunk, Document
from knowledge_api.stores import records
from knowledge_api.stores.filter_sql import value_rows
from knowledge_api.stores.sqlite.file import SQLiteFile


def write_documents(file: SQLiteFile, docs: Sequence[Document]) -> None:
    """Replace each document under a savepoint of its own in one transaction. A failing
    document leaves the ones before it stored, as one transaction each would, for the
    price of one commit."""
    failure: BaseException | None = None
    with file.transaction() as conn:
        for doc in docs:
            conn.execute("SAVEPOINT document")
            try:
                write_document(conn, doc)
            except BaseException as e:
                conn.execute("ROLLBACK TO document")
                failure = e
                break
            finally:
                conn.execute("RELEASE document")
    if failure is not None:
        raise failure


def write_document(conn: sqlite3.Connection, doc: Document) -> None:
    """A document that carries its dates (read from a store or an export) keeps them;
    another is updated now, and created now when it is new."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc.id,))
        conn.execute(
            """INSERT INTO documents (id, collection, source_type, source_id, title,
                   content, metadata, content_hash, created_at, updated_at, source, acl)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (id) DO UPDATE SET title = excluded.title,
                   content = excluded.content, metadata = excluded.metadata,
                   content_hash = excluded.content_hash,
                   created_at = iif(?, excluded.created_at, created_at),
                   updated_at = excluded.updated_at, source = excluded.source,
                   acl = excluded.acl""",
            (
                *doc.leading_columns(),
                json.dumps(doc.metadata),
                doc.content_hash,
                doc.created_at or now,
                doc.updated_at or now,
                doc.source,
                json.dumps(doc.acl),
                bool(doc.created_at),
            ),
        )
        write_acl_rows(conn, [doc.id], doc.acl)
        conn.execute("DELETE FROM document_values WHERE document_id = ?", (doc.id,))
        conn.executemany(
            "INSERT INTO document_values (document_id, key, kind, value, ms) "
            "VALUES (?, ?, ?, ?, ?)",
            value_rows(doc.id, doc.metadata),
        )
        for chunk in doc.chunks:
            insert_chunk(conn, doc, chunk)
    except sqlite3.OperationalError:
        raise  # a lock or a lost file: SQLiteFile.write says so
    except sqlite3.Error as e:
        raise IndexingError(f"could not index {doc.source_id!r}: {e}", backend="sqlite") from e


def write_acl_rows(conn: sqlite3.Connection, ids: Sequence[str], acl: Sequence[str]) -> None:
    """The `document_acl` rows of these documents: one per principal of `acl`."""
    conn.executemany("DELETE FROM document_acl WHERE document_id = ?", [(i,) for i in ids])
    conn.executemany(
        "INSERT INTO document_acl (principal, document_id) VALUES (?, ?)",
        [(principal, i) for i in ids for principal in acl],
    )


def set_acl(conn: sqlite3.Connection, ids: list[str], acl: Sequence[str]) -> int:
    """Give these documents the access list `acl` (their collection's generation moves:
    its cached answers go); how many of them exist."""
    found = [
        row[0]
        for part in batches(ids)
        for row in conn.execute(f"SELECT id FROM documents WHERE id IN ({marks(part)})", part)
    ]
    text = json.dumps(list(acl))
    for part in batches(found):
        conn.execute(f"UPDATE documents SET acl = ? WHERE id IN ({marks(part)})", (text, *part))
    write_acl_rows(conn, found, acl)
    return len(found)


def insert_chunk(conn: sqlite3.Connection, doc: Document, chunk: Chunk) -> None:
    if chunk.embedding is None:
        raise IndexingError(f"chunk {chunk.chunk_index} of {doc.source_id!r} has no embedding")
    conn.execute(
        """INSERT INTO chunks (id, document_id, chunk_index, chunk_count, collection,
               source_type, title, section, content, content_hash, embedding,
               start_offset, end_offset, page)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (
            chunk.id,
            doc.id,
            chunk.chunk_index,
            len(doc.chunks),
            doc.collection,
            doc.source_type,
            chunk.title,
            chunk.section,
            chunk.content,
            chunk.content_hash,
            np.asarray(chunk.embedding, dtype=np.float32).tobytes(),
            chunk.start,
            chunk.end,
            chunk.page,
        ),
    )


def delete_documents(conn: sqlite3.Connection, ids: list[str]) -> int:
    """Delete the documents of `ids` (their chunks go with them); how many there were."""
    return sum(
        conn.execute(f"DELETE FROM documents WHERE id IN ({marks(part)})", part).rowcount
        for part in batches(ids)
    )


def record_source(
    conn: sqlite3.Connection, collection: str, source: str, root: str, connector: str = ""
) -> int:
    conn.execute(
        """INSERT INTO sources (collection, name, last_run, root, connector)
           VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (collection, name) DO UPDATE SET last_run = excluded.last_run,
               root = CASE excluded.root WHEN '' THEN sources.root ELSE excluded.root END,
               connector = CASE excluded.connector WHEN '' THEN sources.connector
                   ELSE excluded.connector END""",
        (collection, source, records.now(), root, connector),
    )
    return 0


def lease_source(
    conn: sqlite3.Connection, collection: str, source: str, holder: str, seconds: float
) -> int:
    """1 when `holder` holds the source's lease now (taken, renewed or let go), else 0."""
    now = datetime.now(UTC)
    until = (now + timedelta(seconds=seconds)).isoformat()
    return conn.execute(
        """UPDATE sources SET lease_holder = ?, lease_until = ?
           WHERE collection = ? AND name = ?
               AND (lease_holder IN ('', ?) OR lease_until < ?)""",
        (holder if seconds > 0 else "", until, collection, source, holder, now.isoformat()),
    ).rowcount


def delete_source(conn: sqlite3.Connection, collection: str, source: str) -> int:
    """Delete a source's record and its documents; how many documents there were."""
    where = "WHERE collection = ? AND {} = ?"
    deleted = conn.execute(
        f"DELETE FROM documents {where.format('source')}", (collection, source)
    ).rowcount
    conn.execute(f"DELETE FROM sources {where.format('name')}", (collection, source))
    return int(deleted)


def batches(values: list[str], size: int = 500) -> list[list[str]]:
    return [values[start : start + size] for start in range(0, len(values), size)]


def marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))
