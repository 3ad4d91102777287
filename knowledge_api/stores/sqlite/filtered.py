"""A filtered search on the SQLite store: the filter is evaluated first into the chunk
rows it allows (a mask over row ids), once per search and generation of the file; the
vector side, the keyword side and the facets then work within that mask.

A tree of metadata tests only needs the documents it allows, from `document_values`
alone (its covering indexes, migration 007); each chunk row's document is held in
memory (`ChunkDocuments`, kept current from `vector_log` with the vectors), and the
documents' mask becomes the chunks' by one gather. At 200,000 passages a 1 % filter's
2,000 documents are read in 0.7 ms and their rows found in memory in 1 ms; looking each
up in `chunks_document` instead cost 2.4 ms more. A tree that tests the passages' own
fields is read by its SQL query.

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
import math
import sqlite3
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from knowledge_api.filters import Combined, Condition, Node
from knowledge_api.models import SearchFilters
from knowledge_api.stores.fusion import Candidate
from knowledge_api.stores.keyword import (
    filter_documents,
    filter_drives,
    filter_sql,
    reads_documents,
)
from knowledge_api.stores.sqlite.vector_index import Collections, allowed_at, label_codes

ALLOWED_IN_QUERY = 4_000
"""Up to this many allowed rows are handed to the keyword query, which then computes
BM25 for the allowed matches only; beyond, the set the query builds of them costs
more than keeping the matches in Python (at 200,000 passages, 2,000 rows: 1.2 ms
against 3.8; 10,000: 8.7 against 4.3)."""


class ChunkDocuments:
    """The document of each chunk row id, in memory: each document id's hash (Python's
    64-bit SipHash of the text) with a code, sorted by hash, the code of each row's
    document in an array over row ids (-1: no such row), and the label (collection and
    source type) of each document. Two document ids with one hash would share a code
    (about n^2 / 2^65: 1e-9 for 200,000 documents). A deleted document's code stays
    until the store is next opened.

    Sorted arrays and not a dict of the id texts: at 200,000 documents the dict took
    26 MB and 1.4 ms for a 1 % filter's 2,000 lookups, these arrays 5 MB and 0.5 ms."""

    def __init__(self) -> None:
        self._hashes = np.zeros(0, dtype=np.int64)
        self._codes = np.zeros(0, dtype=np.int64)
        self._of = np.full(0, -1, dtype=np.intp)
        self._label_of = np.full(0, -1, dtype=np.int32)
        """Label code of each document code."""
        self._label_codes: dict[tuple[str, str], int] = {}

    def set(
        self, rows: Sequence[int], documents: Sequence[str], labels: Sequence[tuple[str, str]]
    ) -> None:
        if len(rows):
            ids = np.asarray(rows, dtype=np.int64)
            self.set_hashed(ids, hashed(documents), self.labelled(labels))

    def labelled(self, labels: Sequence[tuple[str, str]]) -> np.ndarray:
        """The code of each label."""
        codes = self._label_codes
        return np.array([codes.setdefault(label, len(codes)) for label in labels], dtype=np.int32)

    def set_hashed(self, ids: np.ndarray, hashes: np.ndarray, labels: np.ndarray) -> None:
        """`set` by the documents' hashes and the labels' codes: a store's start reads
        every chunk's in pieces, then sets them at once (each setting sorts the hashes)."""
        if not ids.size:
            return
        codes = self._coded(hashes)
        if (codes < 0).any():
            fresh = np.sort(hashes[codes < 0])  # np.unique hashes them again: 7 times slower
            fresh = fresh[np.concatenate(([True], fresh[1:] != fresh[:-1]))]
            first = self._codes.size
            known = np.concatenate([self._hashes, fresh])
            order = np.argsort(known)
            self._hashes = known[order]
            self._codes = np.concatenate([self._codes, np.arange(first, first + fresh.size)])
            self._codes = self._codes[order]
            codes = self._coded(hashes)
        self._of = _grown(self._of, int(ids.max()) + 1)
        self._of[ids] = codes
        self._label_of = _grown(self._label_of, self._codes.size)
        self._label_of[codes] = labels

    def remove(self, rows: Sequence[int]) -> None:
        ids = np.asarray(rows, dtype=np.int64)
        self._of[ids[ids < self._of.size]] = -1

    def rows(
        self, documents: Sequence[str], collection: Collections, source_types: Sequence[str] | None
    ) -> np.ndarray:
        """The mask over row ids of the chunks of `documents` in `collection` and of
        `source_types` (all when None)."""
        codes = self._coded(hashed(documents))
        codes = codes[codes >= 0]
        labels = label_codes(self._label_codes, collection, source_types)
        chosen = np.zeros(self._codes.size + 1, dtype=bool)  # the last one: no document
        chosen[codes[np.isin(self._label_of[codes], labels)]] = True
        return chosen[self._of]

    def _coded(self, hashes: np.ndarray) -> np.ndarray:
        """The code of each document hash (-1: unknown)."""
        if not self._hashes.size:
            return np.full(hashes.size, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._hashes, hashes), self._hashes.size - 1)
        return np.where(self._hashes[at] == hashes, self._codes[at], -1)


def hashed(documents: Sequence[str]) -> np.ndarray:
    """The hash of each document id."""
    return np.fromiter(map(hash, documents), dtype=np.int64, count=len(documents))


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array` (-1 beyond its end) with room for `size` entries."""
    if size <= array.size:
        return array
    grown = np.full(max(size, 2 * array.size), -1, dtype=array.dtype)
    grown[: array.size] = array
    return grown


def allowed_rows(
    conn: sqlite3.Connection, filters: SearchFilters, documents: ChunkDocuments | None = None
) -> np.ndarray | None:
    """The chunk row ids the filter tree allows in the filters' collection and source
    types, as a mask over them; from the documents of its metadata tests and the
    chunks' `documents` when it has only such tests; None without a filter tree."""
    if filters.where is None:
        return None
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a Row each cost a third of the query
    query = filter_documents(filters) if documents is not None else None
    if documents is not None and query is not None:
        found = [document for (document,) in cursor.execute(*query)]
        return documents.rows(found, filters.searched, filters.source_types)
    rows = np.array([row for (row,) in cursor.execute(*allowed_sql(filters))], dtype=np.int64)
    mask = np.zeros(int(rows.max()) + 1 if rows.size else 0, dtype=bool)
    mask[rows] = True
    return mask


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


PRINCIPAL_MASKS = 64
"""The rows of this many principals are kept (for one generation of the file): at
200,000 passages 200 KB each."""


class AllowedRows:
    """The last filter's allowed rows, for the generation of the file they were read in:
    the two sides of one search and its facets ask for the same ones.

    A reader's principals (an `acl` test of the tree's top `$and`) are read as the union
    of each principal's rows, each kept for the generation: readers of the same groups
    in turn share them. A set allowing half of 200,000 passages, read as one query of
    its documents, took 138 ms; a union of kept rows takes a few."""

    def __init__(self) -> None:
        self._last: tuple[Hashable, np.ndarray | None] = (None, None)
        self._principals: OrderedDict[Hashable, np.ndarray] = OrderedDict()

    def of(
        self,
        conn: sqlite3.Connection,
        filters: SearchFilters,
        generation: Hashable,
        documents: ChunkDocuments | None,
    ) -> np.ndarray | None:
        if filters.where is None:
            return None
        key = (filters, generation)
        if self._last[0] == key:
            return self._last[1]
        tests, rest = principal_tests(filters.where)
        if documents is None or not tests:
            rows = allowed_rows(conn, filters, documents)
        else:
            masks = [self._union(conn, test, filters, generation, documents) for test in tests]
            if rest is not None:
                other = allowed_rows(conn, replace(filters, where=rest), documents)
                assert other is not None
                masks.append(other)
            rows = _intersection(masks)
        self._last = (key, rows)
        return rows

    def _union(
        self,
        conn: sqlite3.Connection,
        test: Condition,
        filters: SearchFilters,
        generation: Hashable,
        documents: ChunkDocuments,
    ) -> np.ndarray:
        """The rows of any of the test's principals (in the filters' collection and
        source types)."""
        masks = []
        for principal in test.texts():
            key = (principal, filters.collection, filters.source_types, generation)
            mask = self._principals.get(key)
            if mask is None:
                alone = replace(filters, where=Condition(test.field, test.op, (principal,)))
                mask = allowed_rows(conn, alone, documents)
                assert mask is not None
                self._principals[key] = mask
                while len(self._principals) > PRINCIPAL_MASKS:
                    self._principals.popitem(last=False)
            else:
                self._principals.move_to_end(key)
            masks.append(mask)
        size = max((mask.size for mask in masks), default=0)
        union = np.zeros(size, dtype=bool)
        for mask in masks:
            union[: mask.size] |= mask
        return union


def principal_tests(where: Node) -> tuple[list[Condition], Node | None]:
    """The `acl` tests of a tree's top `$and` (or the tree, when it is one), and the rest
    of the tree (None: nothing else)."""
    parts = where.parts if isinstance(where, Combined) and where.op == "$and" else (where,)
    tests = [p for p in parts if isinstance(p, Condition) and p.acl]
    rest = tuple(p for p in parts if p not in tests)
    if not rest:
        return tests, None
    return tests, rest[0] if len(rest) == 1 else Combined("$and", rest)


def _intersection(masks: list[np.ndarray]) -> np.ndarray:
    size = min(mask.size for mask in masks)
    found = masks[0][:size].copy()
    for mask in masks[1:]:
        found &= mask[:size]
    return found


def best_allowed(
    conn: sqlite3.Connection, match: str, first: int, allowed: np.ndarray, n: int
) -> list[Candidate]:
    """The n best keyword matches (from rowid `first`) among the rows `allowed` (a mask
    over row ids) holds, ranked from the FTS index alone."""
    sql = "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid >= ?"
    count = int(np.count_nonzero(allowed))
    if count > ALLOWED_IN_QUERY:
        # a wide set (a reader's principals allow half the store): the best matches of
        # the whole index, twice as many as the share allowed should hold n, hold the
        # n best allowed ones when n of them pass, without ranking every match in Python
        wanted = math.ceil(2 * n * allowed.size / count)
        best = conn.execute(sql + " ORDER BY 2 LIMIT ?", (match, first, wanted)).fetchall()
        keys = np.array([row[0] for row in best], dtype=np.int64)
        passing = [row for row, keep in zip(best, allowed_at(allowed, keys), strict=True) if keep]
        if len(passing) >= n or len(best) < wanted:
            return [Candidate(row[0], -float(row[1])) for row in passing[:n]]
    if count <= ALLOWED_IN_QUERY:
        rows = np.flatnonzero(allowed)
        # `+rowid`: a test of each match, not one FTS5 query per allowed row
        sql += " AND +rowid IN (SELECT value FROM json_each(?)) ORDER BY 2 LIMIT ?"
        found = conn.execute(sql, (match, first, json.dumps(rows.tolist()), n)).fetchall()
    else:
        matched = conn.execute(sql, (match, first)).fetchall()
        keys = np.array([row[0] for row in matched], dtype=np.int64)
        kept = allowed_at(allowed, keys)
        found = heapq.nsmallest(
            n, (row for row, keep in zip(matched, kept, strict=True) if keep), key=lambda r: r[1]
        )
    return [Candidate(row[0], -float(row[1])) for row in found]
