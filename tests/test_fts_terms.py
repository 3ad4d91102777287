"""Bounded keyword search: a query ranks at most KNOWLEDGE_KEYWORD_MATCHED_CHUNKS chunks'
worth of terms, rarest first, judged by their chunk counts in the SQLite store's FTS5
index (3 here)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.models import DEFAULT_COLLECTION, Chunk, Document, SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.sqlite import search
from knowledge_api.stores.sqlite.fts_terms import Bounded, TermFrequencies
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import opened_sqlite


def document(name: str, text: str) -> Document:
    doc = Document("wiki", name, text, name)
    vector = np.ones(4, dtype=np.float32) / 2
    doc.chunks = [Chunk(f"{name}-0", doc.id, 0, text, embedding=vector)]
    return doc


@pytest.fixture
async def store(tmp_path: Path) -> SQLiteStore:
    sqlite = await opened_sqlite(tmp_path / "k.db", "test", 4, keyword_matched_chunks=3)
    docs = [document(f"d{i}", "deployments indexing " * (i + 1)) for i in range(6)]
    await sqlite.index_documents([*docs, document("rare", "a rollback of deployments")])
    return sqlite


async def keyword(store: SQLiteStore, query: str) -> list[str]:
    hits = await store.search(SearchRequest(query, None, 10, SearchFilters(), mode="keyword"))
    return [hit.source_id for hit in hits]


async def test_a_common_term_is_left_out_beside_a_rarer_one(store: SQLiteStore) -> None:
    assert await keyword(store, "rollback deployments") == ["rare"]
    # alone, and in 7 chunks: its 3 newest matches are ranked
    assert sorted(await keyword(store, "deployment")) == ["d4", "d5", "rare"]
    # both in more than 3: the rarest stays (6 chunks), and its 3 newest matches are ranked
    assert sorted(await keyword(store, "indexes deployments")) == ["d3", "d4", "d5"]
    await store.close()


async def test_a_filtered_search_ranks_the_newest_matches_of_the_whole_store(
    store: SQLiteStore,
) -> None:
    """A filter some chunk fails is applied to the newest matches of the store, not to
    every match: the work stays bounded, and chunks outside the filter take places."""
    ticket = Document("jira", "ticket", "deployments", "ticket")
    ticket.chunks = [Chunk("ticket-0", ticket.id, 0, "deployments", embedding=np.ones(4) / 2)]
    await store.index_documents([ticket])
    wiki = SearchFilters(source_types=("wiki",))
    hits = await store.search(SearchRequest("deployment", None, 10, wiki, mode="keyword"))
    assert sorted(hit.source_id for hit in hits) == ["d5", "rare"]  # ticket took the third
    await store.close()


async def test_counts_are_forgotten_when_the_store_changes(store: SQLiteStore) -> None:
    assert await keyword(store, "rollback deployments") == ["rare"]
    await store.index_documents([document(f"r{i}", "rollback rollback") for i in range(3)])
    found = await keyword(store, "rollback deployments")  # both common now: rollback is rarer
    assert sorted(found) == ["r0", "r1", "r2"]  # and in 4 chunks: its 3 newest
    await store.close()


async def test_the_chunk_counts_of_the_terms_kept_add_up_to_the_bound(
    tmp_path: Path,
) -> None:
    """Each term alone is under the bound; together they are not, so the commonest
    go (ties by their place in the query), and in a store no larger than the bound
    nothing does."""
    sqlite = await opened_sqlite(tmp_path / "k.db", "test", 4, keyword_matched_chunks=3)
    texts = {"a": "rollback plan", "b": "plan review", "c": "review notes"}
    await sqlite.index_documents([document(name, text) for name, text in texts.items()])
    assert sorted(await keyword(sqlite, "rollback plan review")) == ["a", "b", "c"]  # 3 chunks
    await sqlite.index_documents([document("d", "notes")])
    assert sorted(await keyword(sqlite, "rollback plan")) == ["a", "b"]  # 1 + 2 chunks
    assert sorted(await keyword(sqlite, "rollback plan review")) == ["a", "b"]  # + 2: review goes
    terms = sqlite._terms.bounded(sqlite.file.db(), ["rollback", "review", "plan"], 4)
    assert terms == Bounded(["rollback", "review"], newest=0)  # plan as common as review, but later
    await sqlite.close()


async def test_counts_outlive_writes_that_move_the_store_by_an_eighth_or_less(
    store: SQLiteStore,
) -> None:
    await store.index_documents([document(f"f{i}", "filler") for i in range(20)])  # 27 chunks
    assert await keyword(store, "rollback deployments") == ["rare"]  # rollback counted: 1
    await store.index_documents([document(f"r{i}", "rollback rollback") for i in range(3)])
    found = await keyword(store, "rollback deployments")  # 30 chunks: the count of 1 stays,
    assert sorted(found) == ["r0", "r1", "r2", "rare"]  # so every match is ranked
    await store.index_documents([document(f"g{i}", "filler") for i in range(10)])  # 40
    found = await keyword(store, "rollback deployments")  # counted again: 4, over 3
    assert sorted(found) == ["r0", "r1", "r2"]
    await store.close()


def test_terms_are_stemmed_as_the_index_stems_them(tmp_path: Path) -> None:
    terms = TermFrequencies()
    assert terms._stems(["indexing", "deployments", "running"]) == ["index", "deploy", "run"]
    assert terms._stems(["deployed"]) == ["deploi"]  # Porter, not our own light stemmer
    assert terms._stems(["e-mail"]) is None  # two tokens: no count is trusted
    assert terms._stems(["running", "e-mail"]) is None  # remembered as such
    assert terms._stems(["ran", "running", "élan", "ran"]) == ["ran", "run", "elan", "ran"]


def test_a_number_is_stemmed_as_the_index_stems_it_without_writing_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terms = TermFrequencies()
    numbers = ["0", "7", "42", "007", "2024", "1234567890123", "9" * 80]
    assert terms._stem(numbers) == terms._indexed_stems(numbers)
    indexed: list[list[str]] = []
    stem = terms._indexed_stems
    monkeypatch.setattr(terms, "_indexed_stems", lambda found: indexed.append(found) or stem(found))
    assert terms._stems(["2025", "deployments", "٣"]) == ["2025", "deploy", "٣"]
    assert terms._stems(["2025", "1.5"]) is None  # two tokens
    assert indexed == [["deployments", "٣"], ["1.5"]]  # not ASCII digits: the index says


def scoped(name: str, text: str, collection: str) -> Document:
    doc = document(name, text)
    doc.collection = collection
    doc.chunks = [
        Chunk(f"{collection}-{name}-0", doc.id, 0, text, embedding=doc.chunks[0].embedding)
    ]
    return doc


async def test_when_every_chunk_passes_the_filters_only_the_best_rows_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = await opened_sqlite(tmp_path / "k.db", "test", 4)
    await sqlite.index_documents([document(f"d{i}", f"rollback plan {i}") for i in range(4)])
    checked: list[int] = []
    best_then_checked = search.best_then_checked

    def spy(*args: object) -> object:
        rows = best_then_checked(*args)  # type: ignore[arg-type]
        checked.append(-1 if rows is None else len(rows))
        return rows

    monkeypatch.setattr(search, "best_then_checked", spy)
    assert sorted(await keyword(sqlite, "rollback")) == ["d0", "d1", "d2", "d3"]
    assert checked == [4]
    filtered = await sqlite.search(
        SearchRequest("rollback", None, 10, SearchFilters(source_types=("jira",)), mode="keyword")
    )
    assert filtered == [] and checked == [4]  # a filter some chunk fails: filtered first
    await sqlite.close()


async def test_a_chunk_of_another_collection_never_passes_for_one_of_this(
    tmp_path: Path,
) -> None:
    """Written by another process after this one's index last followed the file, a
    chunk of another collection is among the best matches: the checked rows say so,
    and the search filters first instead."""
    path = tmp_path / "k.db"
    mine, theirs = SQLiteStore(path), SQLiteStore(path)
    for store in (mine, theirs):
        await store.open()
        await store.check_embedder("test", 4)
    await mine.index_documents([document("ours", "rollback plan")])
    assert await keyword(mine, "rollback") == ["ours"]
    where, params = "c.collection = ?", [DEFAULT_COLLECTION]
    assert (
        len(search.best_then_checked(mine.file.db(), '"rollback"', 0, where, params, 10) or []) == 1
    )
    await theirs.index_documents([scoped("secret", "rollback rollback rollback", "tenant-b")])
    assert search.best_then_checked(mine.file.db(), '"rollback"', 0, where, params, 10) is None
    assert await keyword(mine, "rollback") == ["ours"]
    other = SearchFilters(collection="tenant-b")
    assert [
        h.source_id
        for h in await mine.search(SearchRequest("rollback", None, 10, other, mode="keyword"))
    ] == ["secret"]
    for store in (mine, theirs):
        await store.close()


def test_the_bound_is_a_setting_of_the_sqlite_store(tmp_path: Path) -> None:
    from knowledge_api.compose import build_embedder, build_store, embedder_identity
    from knowledge_api.settings import Settings

    environ = {"KNOWLEDGE_KEYWORD_MATCHED_CHUNKS": "42", "KNOWLEDGE_EMBEDDER": "fake"}
    settings = Settings.from_env(environ=environ, env_file=None).replace(db_path=tmp_path / "k.db")
    store = build_store(settings, embedder_identity(build_embedder(settings)))
    assert isinstance(store, SQLiteStore) and store._terms.matched_chunks == 42


async def test_the_vector_search_runs_while_the_keyword_query_is_on_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid query's keyword query runs on the reader thread with its own connection,
    so its vector search runs meanwhile: here the keyword query waits for the vector
    search to have run, which would wait until it gave up (5 s) if they ran one after
    the other."""
    thread, beside = await keyword_query_beside_vector_search(tmp_path / "k.db", monkeypatch)
    assert thread.startswith("sqlite-reader") and beside


async def keyword_query_beside_vector_search(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, bool]:
    """The thread a hybrid search ran its keyword query on, and whether its vector
    search had run by the time the keyword query started (waiting up to 5 s for it)."""
    sqlite = await opened_sqlite(path, "test", 4)
    await sqlite.index_documents([document(f"d{i}", f"rollback plan {i}") for i in range(3)])
    searched = threading.Event()
    ran: list[tuple[str, bool]] = []
    keyword_query, vector_search = search.keyword_candidates, sqlite.vector_candidates

    def held(*args: Any) -> Any:
        ran.append((threading.current_thread().name, searched.wait(5)))
        return keyword_query(*args)

    async def vector(*args: Any) -> Any:
        searched.set()
        return await vector_search(*args)

    monkeypatch.setattr(search, "keyword_candidates", held)
    sqlite.vector_candidates = vector  # type: ignore[method-assign]
    hits = await sqlite.search(
        SearchRequest("rollback", np.ones(4, dtype=np.float32) / 2, 3, SearchFilters())
    )
    assert len(hits) == 3
    await sqlite.close()
    return ran[0]
