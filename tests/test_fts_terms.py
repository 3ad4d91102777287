"""Bounded keyword search: terms too common to rank by are left out when a rarer one is
in the query, judged by their chunk counts in the SQLite store's FTS5 index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.stores import fts_terms
from knowledge_api.stores.fts_terms import TermFrequencies
from knowledge_api.stores.sqlite import SQLiteStore


def document(name: str, text: str) -> Document:
    doc = Document("wiki", name, text, name)
    vector = np.ones(4, dtype=np.float32) / 2
    doc.chunks = [Chunk(f"{name}-0", doc.id, 0, text, embedding=vector)]
    return doc


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteStore:
    monkeypatch.setattr(fts_terms, "COMMON_TERM_CHUNKS", 3)
    sqlite = SQLiteStore(tmp_path / "k.db")
    await sqlite.open()
    await sqlite.check_embedder("test", 4)
    docs = [document(f"d{i}", "deployments indexing " * (i + 1)) for i in range(6)]
    await sqlite.index_documents([*docs, document("rare", "a rollback of deployments")])
    return sqlite


async def keyword(store: SQLiteStore, query: str) -> list[str]:
    hits = await store.search(query, None, 10, SearchFilters(), mode="keyword")
    return [hit.source_id for hit in hits]


async def test_a_common_term_is_left_out_beside_a_rarer_one(store: SQLiteStore) -> None:
    assert await keyword(store, "rollback deployments") == ["rare"]
    assert len(await keyword(store, "deployment")) == 7  # alone, it is still searched
    assert len(await keyword(store, "indexes deployments")) == 6  # all common: the rarest stays
    await store.close()


async def test_counts_are_forgotten_when_the_store_changes(store: SQLiteStore) -> None:
    assert await keyword(store, "rollback deployments") == ["rare"]
    await store.index_documents([document(f"r{i}", "rollback rollback") for i in range(3)])
    found = await keyword(store, "rollback deployments")  # both common now: rollback is rarer
    assert sorted(found) == ["r0", "r1", "r2", "rare"]
    await store.close()


def test_terms_are_stemmed_as_the_index_stems_them(tmp_path: Path) -> None:
    terms = TermFrequencies()
    assert terms._stems(["indexing", "deployments", "running"]) == ["index", "deploy", "run"]
    assert terms._stems(["deployed"]) == ["deploi"]  # Porter, not our own light stemmer
    assert terms._stems(["e-mail"]) is None  # two tokens: no count is trusted
