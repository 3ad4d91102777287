"""A filtered search on the SQLite store: the filter is evaluated first, through its
indexed query (metadata from `document_values`, migration 006), into the set of chunk
rows it allows, once per search and generation of the file; the vector side, the
keyword side and the facets then work within that set.

The keyword side used to filter in its own query, joined to `chunks` to test each
match: reading a matching chunk's row reads its vector and text, and a query ranks up
to KNOWLEDGE_KEYWORD_MATCHED_CHUNKS matches, so a selective filter cost more than no
filter at all (75 ms at 200,000 passages). Now it ranks exactly what the unfiltered
query ranks, from the FTS index alone, and keeps the allowed ones; a narrow filter's
rows are handed to the query, so that BM25 is computed for the allowed matches only.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Hashable
from typing import Any

from knowledge_api.models import SearchFilters
from knowledge_api.stores.fusion import Candidate
from knowledge_api.stores.keyword import filter_drives, filter_sql, reads_documents

ALLOWED_IN_QUERY = 4_000
"""Up to this many allowed rows are handed to the keyword query, which then computes
BM25 for the allowed matches only; beyond, the set the query builds of them costs
more than keeping the matches in Python (at 200,000 passages, 2,000 rows: 1.2 ms
against 3.8; 10,000: 8.7 against 4.3)."""


def allowed_rows(conn: sqlite3.Connection, filters: SearchFilters) -> frozenset[int] | None:
    """The chunk row ids the filter tree allows (in the filters' collection and source
    types); None without a filter tree."""
    if filters.where is None:
        return None
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a Row each cost a third of the query
    return frozenset(row for (row,) in cursor.execute(*allowed_sql(filters)).fetchall())


def allowed_sql(filters: SearchFilters) -> tuple[str, list[Any]]:
    """The query of the chunk row ids `filters` allow. The documents a metadata test of
    the tree finds lead, when it has one: only their chunks are tested
    (keyword.filter_drives)."""
    selects: list[str] = []
    params: list[Any] = []
    for found, found_params, rest in filter_drives(filters) or [("", [], filters)]:
        # the rest's metadata tests look up the leading document, before its chunks
        document = "v.document_id" if found else ""
        where, more = filter_sql(rest, indexed=True, document=document)
        documents = "JOIN documents d ON d.id = c.document_id" if reads_documents(rest) else ""
        chunks = "chunks c"
        if found:
            chunks = f"({found}) v CROSS JOIN chunks c ON c.document_id = v.document_id"
        selects.append(f"SELECT c.rowid FROM {chunks} {documents} WHERE {where}")
        params.extend((*found_params, *more))
    return " UNION ALL ".join(selects), params


class AllowedRows:
    """The last filter's allowed rows, for the generation of the file they were read in:
    the two sides of one search and its facets ask for the same ones."""

    def __init__(self) -> None:
        self._last: tuple[Hashable, frozenset[int] | None] = (None, None)

    def of(
        self, conn: sqlite3.Connection, filters: SearchFilters, generation: Hashable
    ) -> frozenset[int] | None:
        if filters.where is None:
            return None
        key = (filters, generation)
        if self._last[0] != key:
            self._last = (key, allowed_rows(conn, filters))
        return self._last[1]


def best_allowed(
    conn: sqlite3.Connection, match: str, first: int, allowed: frozenset[int], n: int
) -> list[Candidate]:
    """The n best keyword matches (from rowid `first`) among the `allowed` rows, ranked
    from the FTS index alone."""
    sql = "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid >= ?"
    if len(allowed) <= ALLOWED_IN_QUERY:
        # `+rowid`: a test of each match, not one FTS5 query per allowed row
        sql += " AND +rowid IN (SELECT value FROM json_each(?)) ORDER BY 2 LIMIT ?"
        rows = conn.execute(sql, (match, first, json.dumps(list(allowed)), n)).fetchall()
    else:
        matched = (row for row in conn.execute(sql, (match, first)) if row[0] in allowed)
        rows = heapq.nsmallest(n, matched, key=lambda row: row[1])
    return [Candidate(row[0], -float(row[1])) for row in rows]
