"""The sqlite store's catalog: its collections and sources with their counts (of every
document, or of those some principals may read), the documents of a collection listed a
page at a time, a document read back whole, and columns of rows looked up by key."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from knowledge_api.models import (
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    ReadableCount,
    SourceInfo,
)
from knowledge_api.stores import records
from knowledge_api.stores.sqlite.file import SQLiteFile
from knowledge_api.stores.sqlite.writes import batches, marks


class SQLiteCatalog:
    """The catalog reads of the sqlite store, on its file."""

    file: SQLiteFile

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        return source_documents(self.file.db(), collection, source)

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        return sources(self.file.db(), collection)

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        return list_documents(self.file.db(), page)

    async def collection_stats(self) -> list[CollectionInfo]:
        return collection_stats(self.file.db())

    async def readable_counts(self, principals: frozenset[str]) -> list[ReadableCount]:
        return readable_counts(self.file.db(), principals)

    async def get_by_id(self, doc_id: str) -> Document | None:
        return document_by_id(self.file.db(), doc_id)

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        return find_documents(self.file.db(), source_type, key, collection)

    async def collections(self) -> dict[str, int]:
        return collections(self.file.db())

    async def count(self) -> int:
        return int(self.file.db().execute("SELECT count(*) FROM documents").fetchone()[0])


def sources(conn: sqlite3.Connection, collection: str | None) -> list[SourceInfo]:
    rows = conn.execute(
        """SELECT s.collection, s.name, s.last_run, (SELECT count(*) FROM documents d
               WHERE d.collection = s.collection AND d.source = s.name) AS documents, s.root,
               s.connector
           FROM sources s WHERE ? IS NULL OR s.collection = ?
           ORDER BY s.collection, s.name""",
        (collection, collection),
    )
    return [SourceInfo(r[0], r[1], r[3], r[2], r[4], r[5]) for r in rows]


def list_documents(conn: sqlite3.Connection, page: DocumentPage) -> list[DocumentSummary]:
    conditions, params = ["collection = ?", "id > ?"], [page.collection, page.after]
    if page.source_type:
        conditions.append("source_type = ?")
        params.append(page.source_type)
    if page.source is not None:
        conditions.append("source = ?")
        params.append(page.source)
    if page.readers is not None:
        # tested on each document of the page's range in id order (a set of every id
        # the readers may read, built first, took 0.5 s at 100,000 of them)
        conditions.append(
            "EXISTS (SELECT 1 FROM document_acl a WHERE a.document_id = d.id"
            f" AND a.principal IN ({','.join('?' * len(page.readers))}))"
        )
        params.extend(sorted(page.readers))
    rows = conn.execute(
        f"""SELECT id, collection, source_type, source_id, source, title, metadata,
               updated_at, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id),
               created_at, acl
           FROM documents d WHERE {" AND ".join(conditions)} ORDER BY id LIMIT ?""",
        (*params, page.limit),
    )
    return [records.summary_of(r, r["id"], r[8]) for r in rows]


def readable(principals: frozenset[str]) -> str:
    """The ids of the documents `principals` may read, by the principal index (the
    principals, sorted, its parameters)."""
    marks = ",".join("?" * len(principals))
    return f"(SELECT document_id FROM document_acl WHERE principal IN ({marks}))"


def readable_counts(conn: sqlite3.Connection, principals: frozenset[str]) -> list[ReadableCount]:
    """By collection and source, the documents `principals` may read (found by the
    principal index) and their passages."""
    rows = conn.execute(
        f"""SELECT d.collection, d.source, count(*),
               sum((SELECT count(*) FROM chunks c WHERE c.document_id = d.id))
           FROM documents d WHERE d.id IN {readable(principals)}
           GROUP BY d.collection, d.source ORDER BY d.collection, d.source""",
        sorted(principals),
    )
    return [ReadableCount(r[0], r[1], r[2], r[3]) for r in rows]


def collection_stats(conn: sqlite3.Connection) -> list[CollectionInfo]:
    rows = conn.execute(
        """SELECT name, sum(documents), sum(chunks), sum(sources), max(updated_at) FROM (
               SELECT collection AS name, count(*) AS documents, 0 AS chunks,
                      0 AS sources, max(updated_at) AS updated_at
               FROM documents GROUP BY collection
               UNION ALL SELECT collection, 0, count(*), 0, NULL FROM chunks GROUP BY collection
               UNION ALL SELECT collection, 0, 0, count(*), max(last_run) FROM sources
               GROUP BY collection)
           GROUP BY name ORDER BY name"""
    )
    return [CollectionInfo(r[0], r[1], r[2], r[3], r[4] or "") for r in rows]


def find_documents(
    conn: sqlite3.Connection, source_type: str, key: str, collection: str
) -> list[Document]:
    """The documents `key` names: those whose source id it is, else the one whose id or
    chunk's id it is."""
    rows = conn.execute(
        """SELECT * FROM documents WHERE source_type = ? AND collection = ? AND (
           source_id = ? OR id = ? OR id = (SELECT document_id FROM chunks WHERE id = ?))
           ORDER BY source_id = ? DESC, source""",
        (source_type, collection, key, key, key, key),
    ).fetchall()
    return [document(conn, row) for row in records.named(rows, key)]


def document(conn: sqlite3.Connection, row: sqlite3.Row) -> Document:
    """The document of a `documents` row, with its chunks in order."""
    chunks = [
        records.chunk_from_record(c["id"], c, c["content"])
        for c in conn.execute(
            """SELECT id, document_id, chunk_index, chunk_count, title, section, content,
                      start_offset, end_offset, page
               FROM chunks WHERE document_id = ? ORDER BY chunk_index""",
            (row["id"],),
        )
    ]
    return records.document_from_record(row, row["content"], chunks)


def document_by_id(conn: sqlite3.Connection, doc_id: str) -> Document | None:
    row = conn.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
    return None if row is None else document(conn, row)


def documents_in(conn: sqlite3.Connection, collection: str) -> Iterator[Document]:
    """The documents of a collection in id order, each read whole as it is reached."""
    sql = "SELECT * FROM documents WHERE collection = ? ORDER BY id"
    for row in conn.execute(sql, (collection,)).fetchall():
        yield document(conn, row)


def source_documents(conn: sqlite3.Connection, collection: str, source: str) -> dict[str, str]:
    """The ids of a source's documents, each with its source id."""
    rows = conn.execute(
        "SELECT id, source_id FROM documents WHERE collection = ? AND source = ?",
        (collection, source),
    )
    return {r[0]: r[1] for r in rows}


def collections(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT collection, count(*) FROM documents GROUP BY collection ORDER BY collection"
    )
    return {name: count for name, count in rows}


def pairs(
    conn: sqlite3.Connection, columns: str, table: str, key: str, values: Sequence[str]
) -> dict[Any, Any]:
    """Two columns of the rows of `table` whose `key` is one of `values`, as a mapping
    of the first to the second (looked up a batch of values at a time)."""
    found: dict[Any, Any] = {}
    for part in batches(list(values)):
        sql = f"SELECT {columns} FROM {table} WHERE {key} IN ({marks(part)})"
        found.update((row[0], row[1]) for row in conn.execute(sql, part))
    return found
