"""Facets on the siam_vectors schema (Postgres, and Supabase through PostgREST): the
rows of `knowledge_facets` (migration 014) as counts by field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowledge_api.facets import Facets, merged, number_key


def facets_of(rows: Sequence[Mapping[str, Any]], fields: tuple[str, ...]) -> Facets:
    """Each field's rows merged by value key (a field no passage holds counts nothing)."""
    found: Facets = {}
    for name in fields:
        mine = [row for row in rows if row["field"] == name]
        distinct = max((int(row["distinct_values"]) for row in mine), default=0)
        found[name] = merged(((_key(row), int(row["passages"])) for row in mine), distinct)
    return found


def _key(row: Mapping[str, Any]) -> str:
    value = str(row["value"])
    return number_key(value) if row["kind"] == "number" else value
