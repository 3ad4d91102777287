"""Facets on the SQLite store's file: one GROUP BY per field over the chunks the
search's filter passes, metadata read from the indexed `document_values` rows
(migration 006), cut to the most frequent values in the query itself."""

from __future__ import annotations

import sqlite3

from knowledge_api.facets import MAX_VALUES, Facets, FieldCounts, merged, value_key
from knowledge_api.models import SearchFilters
from knowledge_api.stores.keyword import filter_sql, reads_documents

_RANKED = """SELECT kind, value, n, count(*) OVER () AS distinct_values FROM (
    SELECT {kind} AS kind, {value} AS value, count(*) AS n
    FROM chunks c {joins} WHERE {where} GROUP BY 1, 2)
ORDER BY n DESC, value LIMIT ?"""


def facet_counts(
    conn: sqlite3.Connection, filters: SearchFilters, fields: tuple[str, ...]
) -> Facets:
    return {name: _field(conn, filters, name) for name in fields}


def _field(conn: sqlite3.Connection, filters: SearchFilters, name: str) -> FieldCounts:
    where, params = filter_sql(filters, indexed=True)
    documents = "JOIN documents d ON d.id = c.document_id"
    joins = documents if reads_documents(filters) or name == "source_id" else ""
    if name in ("source_type", "source_id"):
        value = "c.source_type" if name == "source_type" else "d.source_id"
        sql = _RANKED.format(kind="'text'", value=value, joins=joins, where=where)
    else:
        joins += " JOIN document_values v ON v.document_id = c.document_id AND v.key = ?"
        sql = _RANKED.format(kind="v.kind", value="v.value", joins=joins, where=where)
        params = [name, *params]
    rows = conn.execute(sql, (*params, MAX_VALUES)).fetchall()
    distinct = rows[0][3] if rows else 0
    return merged(((_key(kind, value), n) for kind, value, n, _ in rows), distinct)


def _key(kind: str, value: object) -> str | None:
    if kind in ("true", "false"):
        return kind
    return value_key(value)
