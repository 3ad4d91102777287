"""What the Postgres schema keeps for filters and facets beside the passages (migration
016): the typed metadata values a range is looked up in, and the counts the facets of
an unfiltered search are read from. Both follow every write, whoever writes."""

from __future__ import annotations

from typing import Any

import asyncpg
import numpy as np
import pytest

from knowledge_api import facets
from knowledge_api.filters import matches, parse
from knowledge_api.models import Document, SearchFilters, document_id
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.postgres.store import PostgresStore
from tests.pg_store import store_fixtures
from tests.test_store_conformance import index, vector

FIELDS = ("team", "n", "ok", "due", "source_type", "source_id")
EVERY_PASSAGE = {"$not": {"no-such-key": {"$exists": True}}}
"""A filter every passage passes: its facets are counted, not read."""


settings, store, db = store_fixtures("postgres")


def notes() -> list[Document]:
    return [
        Document(
            "jira" if i % 2 else "wiki",
            f"N-{i}",
            f"Upload queue note {i}.",
            f"Note {i}",
            {
                "team": ("qa", "dev", "ops")[i % 3],
                "n": i % 4 + (0.5 if i % 4 == 3 else 0),
                "ok": i % 2 == 0,
                "due": f"2026-01-{i % 28 + 1:02d}",
                "tags": ["a", "b"],
            },
        )
        for i in range(12)
    ]


async def stored_passages(db: asyncpg.Connection) -> list[dict[str, Any]]:
    rows = await db.fetch("SELECT source_type, source_id, metadata FROM siam_vectors")
    return [
        {**r["metadata"], "source_type": r["source_type"], "source_id": r["source_id"]}
        for r in rows
    ]


async def assert_kept_in_step(store: PostgresStore, db: asyncpg.Connection) -> None:
    """The facets read from the counts equal those counted over the passages and the
    reference count; each range finds the passages the reference finds."""
    passages = await stored_passages(db)
    read = await store.facet_counts(SearchFilters(), FIELDS)
    counted = await store.facet_counts(SearchFilters(where=parse(EVERY_PASSAGE)), FIELDS)
    assert read == counted == facets.count(FIELDS, passages)
    assert await db.fetchval("SELECT count(*) FROM siam_vector_facets WHERE passages <= 0") == 0
    for where, keep in [
        (
            {"n": {"$gt": 1, "$lte": 3}},
            lambda p: isinstance(p.get("n"), int | float) and 1 < p["n"] <= 3,
        ),
        (
            {"due": {"$lt": "2026-01-05"}},
            lambda p: isinstance(p.get("due"), str) and p["due"] < "2026-01-05",
        ),
        (
            {"$not": {"n": {"$gte": 2}}},
            lambda p: not (isinstance(p.get("n"), int | float) and p["n"] >= 2),
        ),
    ]:
        hits = await store.search(
            SearchRequest(
                "note", vector("note"), 50, SearchFilters(where=parse(where)), 0.0, "vector"
            )
        )
        expected = sorted(p["source_id"] for p in passages if keep(p))
        assert sorted(hit.source_id for hit in hits) == expected, where


async def test_values_and_counts_follow_every_write(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    await index(store, notes())
    await assert_kept_in_step(store, db)

    changed = notes()[:3]
    for doc in changed:  # re-indexed with other values: the old ones are gone
        doc.metadata = {"team": "sales", "n": 40, "due": "2025-12-31T23:00:00-02:00"}
    await index(store, changed)
    assert await store.delete(document_id("default", "jira", "N-5"))
    await assert_kept_in_step(store, db)

    await db.execute(  # plain SQL moves them too
        """UPDATE siam_vectors SET metadata = metadata || '{"n": 2, "team": "qa"}'
           WHERE source_id IN ('N-6', 'N-7')"""
    )
    await db.execute("DELETE FROM siam_vectors WHERE source_id = 'N-8'")
    await assert_kept_in_step(store, db)

    await db.execute("TRUNCATE siam_vectors")
    await assert_kept_in_step(store, db)
    assert await db.fetchval("SELECT count(*) FROM siam_vector_values") == 0


async def test_typed_values_hold_numbers_and_dates_only(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    doc = Document(
        "jira",
        "T-1",
        "Typed values.",
        "T",
        {
            "n": 12.5,
            "big": 9007199254740993,
            "at": "2026-03-01T10:00:00+02:00",
            "day": "2026-03-01",
            "word": "2026-02-30",
            "flag": True,
            "list": [1, 2],
        },
    )
    await index(store, [doc])
    rows = await db.fetch("SELECT key, number, ms FROM siam_vector_values ORDER BY key")
    assert [(r["key"], r["number"], r["ms"]) for r in rows] == [
        ("at", None, 1772352000000),
        ("big", 9007199254740993, None),
        ("day", None, 1772323200000),
        ("n", 12.5, None),
    ]


async def test_a_filtered_vector_search_finds_the_nearest_passages_it_lets_through(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    texts = [" ".join(f"w{i * j % 11}" for j in range(1, 2 + i % 4)) for i in range(40)]
    docs = [Document("jira", f"V-{i}", t, f"V {i}", {"n": i % 5}) for i, t in enumerate(texts)]
    await index(store, docs)
    await db.execute("ANALYZE siam_vectors")  # as autovacuum does: the planner knows the rows
    rows = await db.fetch("SELECT source_id, metadata, embedding FROM siam_vectors")
    query = vector("w1 w2 w3 w5")
    few = [{"n": {"$gte": 1, "$lt": 2}}, {"n": 4}, {"$or": [{"n": 0}, {"source_id": "V-3"}]}]
    for where in [*few, {"n": {"$gte": 0}}]:  # measured exactly, then through the graph
        tree = parse(where)
        allowed = {
            r["source_id"]: cosine(r["embedding"], query)
            for r in rows
            if matches(tree, {**r["metadata"], "source_id": r["source_id"]})
        }
        nearest = await store.vector_candidates(query, 5, SearchFilters(where=tree))
        ids = [candidate.key.row["source_id"] for candidate in nearest]  # type: ignore[attr-defined]
        assert set(ids) <= set(allowed), where
        found = [allowed[source_id] for source_id in ids]
        assert found == pytest.approx(sorted(allowed.values(), reverse=True)[:5]), where


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
