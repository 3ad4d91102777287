"""Facets on the SQLite store's file, counted in memory.

A GROUP BY over the chunks a search's filter passes reads every matching chunk's row,
and a chunk's row holds its vector and text: over 200,000 passages that is a few
hundred megabytes, and a facet's hundred milliseconds. So the values of a field are
read once per generation of the file into an array of value codes by chunk row
(`FacetColumns`), and a count is a `bincount` of the codes of the matching rows. The
matching rows are the collection's and source types' (a mask over the chunks' own
columns, read the same way) and, with a filter, the rows the filter's indexed query
finds (the query the vector search runs too). Any write empties the columns: the next
facet reads again what it needs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from knowledge_api.facets import Facets, FieldCounts, top, value_key
from knowledge_api.models import SearchFilters
from knowledge_api.stores.keyword import filter_sql, reads_documents

Column = tuple[np.ndarray, list[str]]
"""Value codes aligned with the rows (-1: no value), and the value of each code."""


class FacetColumns:
    """Value codes of the fields facets were asked for, by chunk row, for one
    generation of the file."""

    def __init__(self) -> None:
        self.generation: Hashable = None
        self.rows = np.zeros(0, dtype=np.int64)
        """The chunks' row ids, ascending."""
        self.columns: dict[str, Column] = {}

    def counts(
        self,
        conn: sqlite3.Connection,
        generation: Hashable,
        filters: SearchFilters,
        fields: tuple[str, ...],
        allowed: Iterable[int] | None,
    ) -> Facets:
        """The facets of the rows in the filters' collection and source types and, when
        `allowed` is given, among those row ids (the filter tree's)."""
        if generation != self.generation or not self.columns:
            self._read_scope(conn)
            self.generation = generation
        mask = self._scope_mask(filters)
        if allowed is not None:
            keys = np.fromiter(allowed, dtype=np.int64)
            chosen = np.zeros(len(self.rows), dtype=bool)
            places, known = self._located(keys)
            chosen[places[known]] = True
            mask &= chosen
        return {name: self._count(conn, name, mask) for name in fields}

    def _read_scope(self, conn: sqlite3.Connection) -> None:
        chunks = conn.execute("SELECT rowid, collection, source_type FROM chunks")
        found = sorted((r[0], r[1], r[2]) for r in chunks)
        self.rows = np.array([r[0] for r in found], dtype=np.int64)
        self.columns = {
            "\x00collection": _coded(r[1] for r in found),
            "source_type": _coded(r[2] for r in found),
        }

    def _scope_mask(self, filters: SearchFilters) -> np.ndarray:
        mask = _matching(self.columns["\x00collection"], (filters.collection,))
        if filters.source_types is not None:
            mask &= _matching(self.columns["source_type"], filters.source_types)
        return mask

    def _located(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each row id is in `rows`, and which of them are there at all."""
        places = np.searchsorted(self.rows, keys)
        known = np.zeros(len(keys), dtype=bool)
        inside = places < len(self.rows)
        known[inside] = self.rows[places[inside]] == keys[inside]
        return places, known

    def _count(self, conn: sqlite3.Connection, name: str, mask: np.ndarray) -> FieldCounts:
        if name not in self.columns:
            self.columns[name] = self._read(conn, name)
        codes, values = self.columns[name]
        chosen = codes[mask]
        tally = np.bincount(chosen[chosen >= 0], minlength=len(values))
        present = np.flatnonzero(tally)
        return top({values[i]: int(tally[i]) for i in present})

    def _read(self, conn: sqlite3.Connection, name: str) -> Column:
        if name == "source_id":
            found: list[tuple[Any, ...]] = conn.execute(
                "SELECT c.rowid, d.source_id FROM chunks c JOIN documents d ON d.id = c.document_id"
            ).fetchall()
            pairs = [(r[0], r[1]) for r in found]
        else:
            found = conn.execute(
                """SELECT c.rowid, v.kind, v.value FROM document_values v
                   JOIN chunks c ON c.document_id = v.document_id WHERE v.key = ?""",
                (name,),
            ).fetchall()
            pairs = [(r[0], _key(r[1], r[2])) for r in found]
        kept = [(row, key) for row, key in pairs if key is not None]
        codes = np.full(len(self.rows), -1, dtype=np.int32)
        if not kept:
            return codes, []
        values: dict[str, int] = {}
        keyed = np.array([values.setdefault(key, len(values)) for _, key in kept], dtype=np.int32)
        keys = np.array([row for row, _ in kept], dtype=np.int64)
        places, known = self._located(keys)
        codes[places[known]] = keyed[known]
        return codes, list(values)


def _coded(values: Iterable[str]) -> Column:
    known: dict[str, int] = {}
    codes = np.array([known.setdefault(v, len(known)) for v in values], dtype=np.int32)
    return codes, list(known)


def _matching(column: Column, wanted: Iterable[str]) -> np.ndarray:
    codes, values = column
    named = set(wanted)
    return np.isin(codes, [i for i, value in enumerate(values) if value in named])


def allowed_rows(conn: sqlite3.Connection, filters: SearchFilters) -> list[int] | None:
    """The chunk row ids the filter tree allows, through its indexed query (None: no
    filter)."""
    if filters.where is None:
        return None
    where, params = filter_sql(filters, indexed=True)
    documents = "JOIN documents d ON d.id = c.document_id" if reads_documents(filters) else ""
    rows = conn.execute(f"SELECT c.rowid FROM chunks c {documents} WHERE {where}", params)
    return [r[0] for r in rows]


def _key(kind: str, value: object) -> str | None:
    if kind in ("true", "false"):
        return kind
    return value_key(value)
