"""Facets on the siam_vectors schema (Postgres, and Supabase through PostgREST): the
arguments of `knowledge_facets` (migration 014) and its rows as counts by field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowledge_api.facets import MAX_VALUES, Facets, merged, number_key
from knowledge_api.models import SearchFilters
from knowledge_api.stores.postgres.rows import filter_params


def facet_arguments(filters: SearchFilters, fields: tuple[str, ...]) -> dict[str, Any]:
    """The fields to count, and the filters of the search whose matches are counted."""
    return {"facet_fields": list(fields), "facet_limit": MAX_VALUES, **filter_params(filters)}


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
