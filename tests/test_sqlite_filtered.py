"""A filtered search on the SQLite store: the rows a filter allows are read from indexes
alone and start from the documents its metadata tests find, or are the chunks of those
documents by the store's in-memory map of each chunk's document, which follows writes
of any connection; the keyword side ranks the same matches whether the allowed rows go
into its query or are kept in Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.filters import parse
from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.stores.keyword import filter_documents, filter_sql
from knowledge_api.stores.sqlite import filtered
from knowledge_api.stores.sqlite.filtered import allowed_rows, allowed_sql
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import opened_sqlite

DIMENSION = 8
WORDS = ("queue", "upload", "retry", "token", "cache", "shard")
CASES: list[dict[str, Any]] = [
    {"bucket": 3},
    {"bucket": {"$in": [3, 4, "3"]}},
    {"bucket": {"$gte": 3, "$lt": 5}},
    {"day": {"$gte": "2026-01-03", "$lt": "2026-01-05"}},
    {"day": {"$gt": "2026-01-03"}, "bucket": {"$lte": 6}, "source_type": "wiki"},
    {"$or": [{"bucket": 3}, {"bucket": 4, "$not": {"day": {"$exists": True}}}]},
    {"$or": [{"bucket": 3}, {"source_type": "jira"}]},
    {"$or": [{"tag": {"$contains": "red"}}, {"bucket": {"$ne": 2}, "odd": True}]},
    {"bucket": {"$nin": [1, 2, 3]}},
    {"$not": {"bucket": {"$lt": 5}}, "tag": {"$exists": False}},
    {"odd": False, "source_id": {"$ne": "doc-4"}},
]
"""Filters of every shape: a test that leads alone, in an $and, a range, one per part of
an $or, and trees with nothing to lead (own fields, complements)."""


def document(i: int) -> Document:
    metadata: dict[str, Any] = {"bucket": i % 10, "odd": i % 2 == 1}
    if i % 3:
        metadata["day"] = f"2026-01-0{1 + i % 9}"
    if i % 4 == 0:
        metadata["tag"] = "red green" if i % 8 else "blue"
    text = " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 1 + i % 5)) or "empty"
    doc = Document("jira" if i % 3 == 0 else "wiki", f"doc-{i}", text, metadata=metadata)
    vector = np.random.default_rng(i).standard_normal(DIMENSION).astype(np.float32)
    doc.chunks = [
        Chunk(
            f"doc-{i}-{k}", doc.id, k, f"{text} part {k}", embedding=vector / np.linalg.norm(vector)
        )
        for k in range(1 + i % 3)
    ]
    return doc


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await opened_sqlite(tmp_path / "f.db", "unit", DIMENSION)
    await opened.index_documents([document(i) for i in range(200)])
    yield opened
    await opened.close()


def plain_rows(store: SQLiteStore, filters: SearchFilters) -> set[int]:
    """The allowed rows by the filter's WHERE over every chunk: the reference."""
    where, params = filter_sql(filters, indexed=True)
    sql = f"""SELECT c.rowid FROM chunks c JOIN documents d ON d.id = c.document_id
              WHERE {where}"""
    return {r[0] for r in store.file.db().execute(sql, params)}


def rows_of(mask: np.ndarray | None) -> set[int]:
    assert mask is not None
    return set(np.flatnonzero(mask).tolist())


def assert_allowed_as_plain(store: SQLiteStore, case: Any) -> None:
    """By the SQL query and by the chunks' documents in memory, in the default
    collection (all source types or one) and in an empty one."""
    documents = store.vectors.documents
    for scope in (SearchFilters(), SearchFilters(source_types=("wiki",))):
        filters = SearchFilters(scope.source_types, parse(case))
        reference = plain_rows(store, filters)
        assert reference, case
        assert rows_of(allowed_rows(store.file.db(), filters)) == reference, case
        assert rows_of(allowed_rows(store.file.db(), filters, documents)) == reference, case
    elsewhere = SearchFilters(where=parse(case), collection="x")
    assert rows_of(allowed_rows(store.file.db(), elsewhere, documents)) == set()
    assert rows_of(allowed_rows(store.file.db(), elsewhere)) == set()


@pytest.mark.parametrize("case", CASES)
async def test_allowed_rows_are_those_of_the_plain_query(store: SQLiteStore, case: Any) -> None:
    assert_allowed_as_plain(store, case)


async def test_trees_of_metadata_tests_are_read_as_documents() -> None:
    """The in-memory path is taken by trees of metadata tests with one that leads, the
    SQL query by the others."""
    by_documents = [case for case in CASES if filter_documents(SearchFilters(where=parse(case)))]
    assert by_documents == [CASES[i] for i in (0, 1, 2, 3, 5, 7)]


async def test_the_chunks_documents_follow_writes_of_another_connection(
    store: SQLiteStore, tmp_path: Path
) -> None:
    other = SQLiteStore(tmp_path / "f.db")
    await other.open()
    try:
        moved = document(3)  # bucket 3 becomes 4
        moved.metadata["bucket"] = 4
        await other.index_documents([moved, document(1003), document(1013)])
        await other.delete(document(13).id)
        await other.delete(document(23).id)
    finally:
        await other.close()
    store._sync()
    for case in CASES[:8]:
        assert_allowed_as_plain(store, case)
    filters = SearchFilters(where=parse({"bucket": 3}))
    found = rows_of(allowed_rows(store.file.db(), filters, store.vectors.documents))
    ids = {
        r[0]
        for r in store.file.db().execute(
            f"SELECT document_id FROM chunks WHERE rowid IN ({','.join(map(str, found))})"
        )
    }
    assert document(1003).id in ids and document(13).id not in ids and document(3).id not in ids


@pytest.mark.parametrize(
    "case",
    [
        {"bucket": 3},
        {"bucket": {"$gte": 3, "$lt": 5}},
        {"day": {"$gte": "2026-01-03", "$lt": "2026-01-05"}},
        {"$or": [{"bucket": 3}, {"bucket": 4, "$not": {"day": {"$exists": True}}}]},
    ],
)
async def test_allowed_rows_are_read_from_indexes_alone(store: SQLiteStore, case: Any) -> None:
    """No table row is read (a chunk's row holds its text and vector) and nothing is
    scanned whole: each step searches a covering index (migration 007)."""
    sql, params = allowed_sql(SearchFilters(where=parse(case)))
    plan = [r[3] for r in store.file.db().execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    reads = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert reads and all("USING COVERING INDEX" in step for step in reads), plan
    query = filter_documents(SearchFilters(where=parse(case)))
    assert query is not None
    plan = [r[3] for r in store.file.db().execute(f"EXPLAIN QUERY PLAN {query[0]}", query[1])]
    reads = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert reads and all("USING COVERING INDEX" in step for step in reads), plan
    assert not any("chunks" in step or "documents " in step for step in plan), plan


@pytest.mark.parametrize("case", CASES)
async def test_the_keyword_side_ranks_the_same_with_the_rows_in_its_query_or_not(
    store: SQLiteStore, case: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    filters = SearchFilters(where=parse(case))
    allowed = plain_rows(store, filters)
    everything = await store.keyword_candidates("queue upload retry", 1000, SearchFilters())
    reference = [c.key for c in everything if c.key in allowed][:7]
    assert len(reference) == 7
    in_query = await store.keyword_candidates("queue upload retry", 7, filters)
    monkeypatch.setattr(filtered, "ALLOWED_IN_QUERY", 0)
    store._allowed = filtered.AllowedRows()
    kept_in_python = await store.keyword_candidates("queue upload retry", 7, filters)
    assert [c.key for c in in_query] == [c.key for c in kept_in_python] == reference
    assert [c.score for c in in_query] == pytest.approx([c.score for c in kept_in_python])


def test_the_chunks_documents_give_the_rows_of_the_documents_asked_in_scope() -> None:
    documents = filtered.ChunkDocuments()
    documents.set([1, 2, 5], ["a", "a", "b"], [("c", "wiki")] * 2 + [("c", "jira")])
    documents.set([9], ["z"], [("other", "wiki")])
    assert rows_of(documents.rows(["a", "b", "unknown"], "c", None)) == {1, 2, 5}
    assert rows_of(documents.rows(["a", "b"], "c", ["jira"])) == {5}
    assert rows_of(documents.rows(["z"], "c", None)) == set()
    documents.set([2], ["b"], [("c", "jira")])  # row 2 now holds a chunk of b
    documents.remove([5, 40])
    assert rows_of(documents.rows(["a"], "c", None)) == {1}
    assert rows_of(documents.rows(["b"], "c", None)) == {2}
    assert rows_of(documents.rows(["z"], "other", None)) == {9}
    assert rows_of(filtered.ChunkDocuments().rows(["a"], "c", None)) == set()
