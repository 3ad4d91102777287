"""The sqlite store's search SQL: keyword candidates from FTS5 (over the bounded terms of
`fts_terms`), within the chunks a filter tree allows (filtered.py), and hits read back
by row id."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Hashable
from typing import Any

import numpy as np

from knowledge_api.models import Chunk, SearchFilters, SearchHit
from knowledge_api.stores import records
from knowledge_api.stores.fusion import Candidate
from knowledge_api.stores.keyword import filter_sql, fts_expression, reads_documents
from knowledge_api.stores.sqlite.filtered import best_allowed
from knowledge_api.stores.sqlite.fts_terms import TermFrequencies

HIT_COLUMNS = """c.rowid, c.id, c.document_id, c.collection, c.chunk_index, c.chunk_count,
    c.title, c.section, c.content, c.start_offset, c.end_offset, c.page, d.source_type,
    d.source_id, d.metadata, d.created_at, d.updated_at"""
WITH_DOCUMENTS = "JOIN documents d ON d.id = c.document_id"


def keyword_candidates(
    conn: sqlite3.Connection,
    frequencies: TermFrequencies,
    terms: list[str],
    chunks: int,
    unfiltered: bool,
    n: int,
    filters: SearchFilters,
    allowed: np.ndarray | None,
) -> list[Candidate]:
    """The keyword query on the reader thread (see `SQLiteFile.read_aside`):
    `unfiltered` says every chunk the store holds passes `filters`; `allowed`, the
    rows a filter tree allows (filtered.py)."""
    bounded = frequencies.bounded(conn, terms, chunks)
    match = fts_expression(bounded.terms)
    if not match:
        return []
    first = bounded.first_rowid(conn, match)
    if allowed is not None:
        return best_allowed(conn, match, first, allowed, n)
    where, params = filter_sql(filters, indexed=True)
    found = best_then_checked(conn, match, first, where, params, n) if unfiltered else None
    if found is not None:
        return found
    documents = WITH_DOCUMENTS if reads_documents(filters) else ""
    sql = f"""SELECT c.rowid, bm25(chunks_fts) AS rank FROM chunks_fts
              JOIN chunks c ON c.rowid = chunks_fts.rowid {documents}
              WHERE chunks_fts MATCH ? AND chunks_fts.rowid >= ? AND {where}
              ORDER BY rank LIMIT ?"""
    rows = plain(conn).execute(sql, (match, first, *params, n))
    return [Candidate(key, -rank) for key, rank in rows]


def best_then_checked(
    conn: sqlite3.Connection, match: str, first: int, where: str, params: list[Any], n: int
) -> list[Candidate] | None:
    """The n best matches of the whole index (from rowid `first`), then the filters
    checked on those n rows only: when every chunk the store holds passes the
    filters, this skips reading each matching chunk's row to filter it. None when a
    row fails them (written since the index last followed the file): the caller
    filters first."""
    sql = f"""SELECT f.key, f.rank, ({where}) FROM (
                  SELECT rowid AS key, bm25(chunks_fts) AS rank FROM chunks_fts
                  WHERE chunks_fts MATCH ? AND rowid >= ? ORDER BY rank LIMIT ?) f
              LEFT JOIN chunks c ON c.rowid = f.key ORDER BY f.rank"""
    rows = plain(conn).execute(sql, (*params, match, first, n)).fetchall()
    if not all(allowed for _, _, allowed in rows):
        return None
    return [Candidate(key, -rank) for key, rank, _ in rows]


def plain(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor whose rows are plain tuples, unpacked by place: a keyword query reads
    fifty rows, a search's hits ten, and a row read by name costs three times as much
    (and one more object per row for the collector)."""
    cursor = conn.cursor()
    cursor.row_factory = None
    return cursor


def hits(
    conn: sqlite3.Connection,
    ranked: list[tuple[Hashable, float]],
    similarity: dict[Hashable, float],
) -> list[SearchHit]:
    """The hits of `ranked` (row ids and scores) in their order; rows deleted since
    they were ranked are left out."""
    if not ranked:
        return []
    marks = ",".join("?" * len(ranked))
    cursor = plain(conn).execute(
        f"SELECT {HIT_COLUMNS} FROM chunks c {WITH_DOCUMENTS} WHERE c.rowid IN ({marks})",
        [key for key, _ in ranked],
    )
    by_key = {row[0]: row for row in cursor}
    return [
        hit_from_row(by_key[key], score, similarity[key]) for key, score in ranked if key in by_key
    ]


def hit_from_row(row: tuple[Any, ...], score: float, similarity: float) -> SearchHit:
    """A row of HIT_COLUMNS as `records.hit_from_record` maps a record, read by place:
    a search builds ten of these (see `plain`)."""
    (_, chunk_id, document_id, collection, index, count, title, section, content) = row[:9]
    (start, end, page, source_type, source_id, metadata, created_at, updated_at) = row[9:]
    document_id = str(document_id)
    return SearchHit(
        chunk=Chunk(
            chunk_id,
            document_id,
            int(index),
            content,
            title,
            section,
            chunk_count=int(count),
            start=records.offset(start),
            end=records.offset(end),
            page=records.offset(page),
        ),
        document_id=document_id,
        source_type=source_type,
        source_id=source_id,
        metadata=records.restored(json.loads(metadata)),
        score=score,
        similarity=similarity,
        created_at=records.date_text(created_at),
        updated_at=records.date_text(updated_at),
        collection=str(collection),
    )


def seed_vectors(conn: sqlite3.Connection, keys: list[Hashable]) -> list[np.ndarray]:
    """The stored vectors of the chunks `keys` names, one per distinct text, read by row
    id (no hit is built for them)."""
    if not keys:
        return []
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT content_hash, embedding FROM chunks WHERE rowid IN ({marks})", keys
    ).fetchall()
    stored = {row[0]: np.frombuffer(row[1], dtype=np.float32) for row in rows}
    return list(stored.values())
