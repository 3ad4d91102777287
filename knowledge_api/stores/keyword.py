"""Keyword relevance shared by the stores.

One definition of what a keyword query means (its terms, its FTS5 expression, its
filters), used by the SQLite store's FTS5 table, by `KeywordIndex` (an in-memory FTS5
index for backends whose engine does not rank by keywords, such as Chroma) and by the
BM25 sparse vectors Qdrant ranks with.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from knowledge_api import text
from knowledge_api.filters import OWN_FIELDS, conditions
from knowledge_api.models import Chunk, Metadata, SearchFilters
from knowledge_api.stores.filter_sql import Columns, drives, where_sql
from knowledge_api.stores.fusion import Candidate
from knowledge_api.stores.sqlite.fts import fts_schema

BM25_K1 = 1.2
BM25_B = 0.75
BM25_AVERAGE_TERMS = 120.0
"""Typical words in a chunk (about 900 characters): the length BM25 normalises against."""


def query_terms(query: str) -> list[str]:
    """The words a keyword search looks for: content words, or every word if none."""
    return text.content_terms(query) or list(dict.fromkeys(text.words(query)))


def fts_query(query: str) -> str:
    """An FTS5 expression matching any content term of the query (all words if none)."""
    return fts_expression(query_terms(query))


def fts_expression(terms: Iterable[str]) -> str:
    """An FTS5 expression matching any of `terms`."""
    return " OR ".join(f'"{term}"' for term in terms)


def filter_sql(
    filters: SearchFilters,
    chunks: str = "c",
    documents: str = "d",
    indexed: bool = False,
    document: str = "",
) -> tuple[str, list[Any]]:
    """A WHERE clause for `filters` over a chunks table (collection, source_type,
    document_id) and a documents table (source_id, metadata as JSON, created_at,
    updated_at), given their aliases; metadata through `document_values` when
    `indexed` (the store's file has it), looked up by the chunks' document id or by
    `document`, another column that holds it."""
    searched = filters.searched
    clauses: list[str] = [f"{chunks}.collection IN ({','.join('?' * len(searched))})"]
    params: list[Any] = list(searched)
    if filters.source_types is not None:
        marks = ",".join("?" * len(filters.source_types))
        clauses.append(f"{chunks}.source_type IN ({marks})")
        params.extend(filters.source_types)
    if filters.where is not None:
        looked_up = document or (f"{chunks}.document_id" if indexed else "")
        where, more = where_sql(filters.where, _columns(chunks, documents, looked_up))
        clauses.append(f"({where})")
        params.extend(more)
    return " AND ".join(clauses), params


def filter_drives(filters: SearchFilters) -> list[tuple[str, list[Any], SearchFilters]] | None:
    """The documents the filter tree requires, as SELECTs of their ids from the store's
    `document_values` (filter_sql.drives), each with its parameters and the filters
    left to test on their chunks; None when the tree has no such test."""
    if filters.where is None:
        return None
    found = drives(filters.where, _columns("c", "d", "c.document_id"))
    if found is None:
        return None
    return [(sql, params, replace(filters, where=rest)) for sql, params, rest in found]


def filter_documents(filters: SearchFilters) -> tuple[str, list[Any]] | None:
    """The query of the ids of the documents the filter tree allows, read from
    `document_values` alone, when each test of the tree is on metadata and one leads
    (filter_drives); None otherwise. The filters' collection and source types are left
    to the caller."""
    if filters.where is None or any(c.field in OWN_FIELDS for c in conditions(filters.where)):
        return None
    selects: list[str] = []
    params: list[Any] = []
    for found, found_params, rest in filter_drives(filters) or []:
        where, more = (
            ("1", [])
            if rest.where is None
            else where_sql(rest.where, _columns("c", "d", "v.document_id"))
        )
        selects.append(f"SELECT v.document_id FROM ({found}) v WHERE {where}")
        params.extend((*found_params, *more))
    return (" UNION ALL ".join(selects), params) if selects else None


def _columns(chunks: str, documents: str, document: str) -> Columns:
    own = {"source_type": f"{chunks}.source_type"}
    own.update({name: f"{documents}.{name}" for name in OWN_FIELDS if name not in own})
    return Columns(own, f"{documents}.metadata", document, f"{documents}.acl")


def reads_documents(filters: SearchFilters) -> bool:
    """Whether the indexed filter needs the documents table (source_id, created_at or
    updated_at: metadata is read from `document_values`)."""
    return filters.where is not None and any(
        c.field in OWN_FIELDS and c.field != "source_type" for c in conditions(filters.where)
    )


# -- an in-memory BM25 index -------------------------------------------------------

_CHUNKS = """
CREATE TABLE chunks (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL,
    collection TEXT NOT NULL,
    source_type TEXT NOT NULL,
    source_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata TEXT NOT NULL,
    title TEXT NOT NULL,
    section TEXT NOT NULL,
    content TEXT NOT NULL,
    acl TEXT NOT NULL
);
CREATE INDEX chunks_document ON chunks (document_id);
"""
"""The chunks as the in-memory index keeps them (what filters test included); their
full-text index is the sqlite store's own (stores/sqlite/fts.py)."""


@dataclass(frozen=True, slots=True)
class KeywordEntry:
    """A chunk as the keyword index sees it."""

    id: str
    document_id: str
    collection: str
    source_type: str
    metadata: Metadata
    title: str
    section: str
    content: str
    source_id: str = ""
    created_at: str = ""
    updated_at: str = ""
    acl: tuple[str, ...] = ("public",)

    @classmethod
    def of(
        cls,
        chunk: Chunk,
        collection: str,
        source_type: str,
        metadata: Metadata,
        stored: Any = None,
    ) -> KeywordEntry:
        """The entry of a chunk; `stored` (its document, or its record) gives the
        source id, timestamps and access list filters test."""

        def field(name: str) -> str:
            value = stored.get(name, "") if isinstance(stored, dict) else getattr(stored, name, "")
            return str(value or "")

        return cls(
            chunk.id,
            chunk.document_id,
            collection,
            source_type,
            metadata,
            chunk.title,
            chunk.section,
            chunk.content,
            field("source_id"),
            field("created_at"),
            field("updated_at"),
            acl_of(stored),
        )

    def row(self) -> tuple[Any, ...]:
        return (
            self.id,
            self.document_id,
            self.collection,
            self.source_type,
            self.source_id,
            self.created_at,
            self.updated_at,
            json.dumps(self.metadata, ensure_ascii=False),  # a path finds "é", not "\u00e9"
            self.title,
            self.section,
            self.content,
            json.dumps(self.acl, ensure_ascii=False),
        )


def acl_of(stored: Any) -> tuple[str, ...]:
    """The access list of a document or a stored record (public when it has none)."""
    found = stored.get("acl") if isinstance(stored, dict) else getattr(stored, "acl", None)
    return ("public",) if found is None else tuple(found)


class KeywordIndex:
    """BM25 over chunk texts in an in-memory SQLite FTS5 table, keyed by chunk id.

    The backend stays the source of truth: the index is rebuilt from it on open and
    kept current by the backend's own writes.
    """

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._db.executescript(_CHUNKS + fts_schema())

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def replace(self, document_ids: Iterable[str], entries: Iterable[KeywordEntry]) -> None:
        """Drop every chunk of `document_ids`, then add `entries`, in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "DELETE FROM chunks WHERE document_id = ?", [(d,) for d in document_ids]
            )
            self._db.executemany(
                """INSERT INTO chunks (id, document_id, collection, source_type, source_id,
                       created_at, updated_at, metadata, title, section, content, acl)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [entry.row() for entry in entries],
            )

    def clear(self) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM chunks")

    def search(self, query: str, n: int, filters: SearchFilters) -> list[Candidate]:
        """Best n chunks by BM25 (higher is better), best first, each keyed by its
        collection and id."""
        match = fts_query(query)
        if not match:
            return []
        where, params = filter_sql(filters, chunks="c", documents="c")
        rows = self._db.execute(
            f"""SELECT c.collection, c.id, bm25(chunks_fts) AS rank FROM chunks_fts
                JOIN chunks c ON c.rowid = chunks_fts.rowid
                WHERE chunks_fts MATCH ? AND {where} ORDER BY rank LIMIT ?""",
            (match, *params, n),
        ).fetchall()
        return [
            Candidate((collection, chunk_id), -float(rank)) for collection, chunk_id, rank in rows
        ]


# -- BM25 sparse vectors -----------------------------------------------------------


def term_id(term: str) -> int:
    """A stable 32-bit id of a stemmed term: sparse vectors need no shared vocabulary."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")


def sparse_document(passage: str) -> dict[int, float]:
    """BM25 term weights of a passage (saturated term frequency, length-normalised);
    the engine multiplies in each term's inverse document frequency at query time."""
    counts = Counter(text.stem(word) for word in text.words(passage))
    length = sum(counts.values())
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / BM25_AVERAGE_TERMS)
    weights: dict[int, float] = {}
    for term, tf in counts.items():
        key = term_id(term)
        weights[key] = weights.get(key, 0.0) + tf * (BM25_K1 + 1) / (tf + norm)
    return weights


def sparse_query(query: str) -> dict[int, float]:
    """One unit weight per query term, so a passage scores the sum of its BM25 weights."""
    return {term_id(text.stem(term)): 1.0 for term in query_terms(query)}
