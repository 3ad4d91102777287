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
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_api.facets import Facets, FieldCounts, top, value_key
from knowledge_api.models import SearchFilters

Column = tuple[np.ndarray, list[str]]
"""Value codes aligned with the rows (-1: no value), and the value of each code."""


@dataclass(slots=True)
class Columns:
    """The columns read for one generation of the file."""

    generation: Hashable
    rows: np.ndarray
    """The chunks' row ids, ascending."""
    values: dict[str, Column]


class FacetColumns:
    """Value codes of the fields facets were asked for, by chunk row, for one
    generation of the file. Filled on the store's reader thread and read on the event
    loop too: a generation's columns are replaced whole, never changed under a reader."""

    def __init__(self) -> None:
        self.columns = Columns(None, np.zeros(0, dtype=np.int64), {})

    def holds(self, generation: Hashable, fields: tuple[str, ...]) -> bool:
        """Whether counting `fields` now reads nothing from the file."""
        columns = self.columns
        return columns.generation == generation and all(f in columns.values for f in fields)

    def counts(
        self,
        conn: sqlite3.Connection,
        generation: Hashable,
        filters: SearchFilters,
        fields: tuple[str, ...],
        allowed: np.ndarray | None,
    ) -> Facets:
        """The facets of the rows in the filters' collection and source types and, when
        `allowed` is given, among the row ids it holds (the filter tree's mask)."""
        columns = self.columns
        if columns.generation != generation:
            columns = self.columns = _scope(conn, generation)
        mask = _scope_mask(columns, filters)
        if allowed is not None:
            chosen = np.zeros(len(columns.rows), dtype=bool)
            places, known = _located(columns.rows, np.flatnonzero(allowed))
            chosen[places[known]] = True
            mask &= chosen
        return {name: _count(conn, columns, name, mask) for name in fields}


def _scope(conn: sqlite3.Connection, generation: Hashable) -> Columns:
    chunks = conn.execute("SELECT rowid, collection, source_type FROM chunks")
    found = sorted((r[0], r[1], r[2]) for r in chunks)
    rows = np.array([r[0] for r in found], dtype=np.int64)
    scope = {
        "\x00collection": _coded(r[1] for r in found),
        "source_type": _coded(r[2] for r in found),
    }
    return Columns(generation, rows, scope)


def _scope_mask(columns: Columns, filters: SearchFilters) -> np.ndarray:
    mask = _matching(columns.values["\x00collection"], filters.searched)
    if filters.source_types is not None:
        mask &= _matching(columns.values["source_type"], filters.source_types)
    return mask


def _located(rows: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each row id is in `rows`, and which of them are there at all."""
    places = np.searchsorted(rows, keys)
    known = np.zeros(len(keys), dtype=bool)
    inside = places < len(rows)
    known[inside] = rows[places[inside]] == keys[inside]
    return places, known


def _count(conn: sqlite3.Connection, columns: Columns, name: str, mask: np.ndarray) -> FieldCounts:
    if name not in columns.values:
        columns.values[name] = _read(conn, columns.rows, name)
    codes, values = columns.values[name]
    chosen = codes[mask]
    tally = np.bincount(chosen[chosen >= 0], minlength=len(values))
    present = np.flatnonzero(tally)
    return top({values[i]: int(tally[i]) for i in present})


def _read(conn: sqlite3.Connection, rows: np.ndarray, name: str) -> Column:
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
    codes = np.full(len(rows), -1, dtype=np.int32)
    if not kept:
        return codes, []
    values: dict[str, int] = {}
    keyed = np.array([values.setdefault(key, len(values)) for _, key in kept], dtype=np.int32)
    places, known = _located(rows, np.array([row for row, _ in kept], dtype=np.int64))
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


def _key(kind: str, value: object) -> str | None:
    if kind in ("true", "false"):
        return kind
    return value_key(value)
