"""Pseudo-relevance feedback of the shared hybrid search, on hand-made 2-d vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pytest import approx

from knowledge_api.errors import ConfigurationError
from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.fusion import DEFAULT_TUNING, Candidate, SearchTuning, feedback_vector
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import make_store, opened_sqlite


def test_feedback_vector_is_rocchio_at_unit_length() -> None:
    moved = feedback_vector(np.array([1.0, 0.0]), [np.array([0.0, 1.0])], weight=1.0)
    assert moved == approx([2**-0.5, 2**-0.5])
    two = feedback_vector(np.array([1.0, 0.0]), [np.array([0.0, 1.0]), np.array([0.0, -1.0])], 2)
    assert two == approx([1.0, 0.0])  # the seeds cancel out


def unit(x: float, y: float) -> np.ndarray:
    vector = np.array([x, y], dtype=np.float32)
    return vector / np.linalg.norm(vector)


def document(name: str, text: str, vector: np.ndarray) -> Document:
    doc = Document("wiki", name, text, name.upper())
    doc.chunks = [Chunk(f"{name}-0", doc.id, 0, text, doc.title, embedding=vector)]
    return doc


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    sqlite = await opened_sqlite(tmp_path / "k.db", "hand-made", 2)
    await sqlite.index_documents(
        [
            document("a", "alpha", unit(0.9, 0.436)),  # cosine 0.9 with the query
            document("b", "beta", unit(0.6, 0.8)),  # 0.6, but close to a
            document("c", "gamma", unit(0.7, -0.714)),  # 0.7, far from a
        ]
    )
    yield sqlite
    await sqlite.close()


async def test_the_best_hit_pulls_its_neighbours_up(store: SQLiteStore) -> None:
    query = np.array([1.0, 0.0], dtype=np.float32)
    store.tuning = replace(DEFAULT_TUNING, feedback_docs=0)
    plain = await store.search(SearchRequest("alpha", query, 3, SearchFilters()))
    assert [h.source_id for h in plain] == ["a", "c", "b"]
    store.tuning = replace(DEFAULT_TUNING, feedback_docs=1)
    refined = await store.search(SearchRequest("alpha", query, 3, SearchFilters()))
    # a moves the query toward b: b ranks 2nd by feedback, c 2nd by the first fusion,
    # and 3 / (60 + 2) + 1 / (60 + 3) > 3 / (60 + 3) + 1 / (60 + 2)
    assert [h.source_id for h in refined] == ["a", "b", "c"]
    assert {h.source_id: round(h.similarity, 2) for h in refined} == {"a": 0.9, "b": 0.6, "c": 0.7}
    vector_only = await store.search(
        SearchRequest("alpha", query, 3, SearchFilters(), mode="vector")
    )
    assert [h.source_id for h in vector_only] == ["a", "c", "b"]  # feedback is hybrid only


async def test_a_keyword_list_far_from_the_query_neither_leads_nor_seeds(
    tmp_path: Path,
) -> None:
    sqlite = await opened_sqlite(tmp_path / "far.db", "hand-made", 2)
    await sqlite.index_documents(
        [
            document("a", "apple", unit(0.9, 0.436)),
            document("b", "banana", unit(0.6, 0.8)),
            document("c", "cherry", unit(0.7, -0.714)),
            # the only keyword matches, both nearly orthogonal to the query
            document("x", "alpha alpha", unit(0.05, 0.9987)),
            document("y", "alpha", unit(0.05, -0.9987)),
        ]
    )
    query = np.array([1.0, 0.0], dtype=np.float32)
    try:
        hybrid = await sqlite.search(SearchRequest("alpha", query, 5, SearchFilters()))
        assert {h.source_id for h in hybrid[:3]} == {"a", "b", "c"}
        sqlite.tuning = replace(DEFAULT_TUNING, feedback_docs=0)
        fused = await sqlite.search(SearchRequest("alpha", query, 5, SearchFilters()))
        assert [h.source_id for h in fused][:3] == ["a", "c", "b"]  # the vector order
        sqlite.tuning = replace(DEFAULT_TUNING, fusion="rrf", feedback_docs=0)
        by_rank = await sqlite.search(SearchRequest("alpha", query, 5, SearchFilters()))
        assert by_rank[0].source_id == "x"  # reciprocal ranks put the keyword's best first
    finally:
        await sqlite.close()


def test_ranking_settings_reach_every_backend(tmp_path: Path) -> None:
    env = {
        "KNOWLEDGE_DB_PATH": str(tmp_path / "k.db"),
        "KNOWLEDGE_CHROMA_PATH": str(tmp_path / "chroma"),
        "KNOWLEDGE_QDRANT_PATH": str(tmp_path / "qdrant"),
        "SUPABASE_URL": "https://project.supabase.test",
        "SUPABASE_SERVICE_ROLE_KEY": "key",
        # the ranking settings, in the order of SearchTuning's fields
        "KNOWLEDGE_FUSION_K": "20",
        "KNOWLEDGE_CANDIDATES": "80",
        "KNOWLEDGE_FEEDBACK_DOCS": "0",
        "KNOWLEDGE_FEEDBACK_WEIGHT": "1.5",
        "KNOWLEDGE_FEEDBACK_RANK_WEIGHT": "2",
        "KNOWLEDGE_FUSION": "rrf",
        "KNOWLEDGE_VECTOR_WEIGHT": "0.6",
    }
    settings = Settings.from_env(environ=env, env_file=None)
    expected = SearchTuning(20, 80, 0, 1.5, 2.0, "rrf", 0.6)
    for name in ("sqlite", "postgres", "supabase", "chroma", "qdrant"):
        assert make_store(name, settings).tuning == expected, name


def test_negative_feedback_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_FEEDBACK_DOCS must not be negative"):
        Settings.from_env(environ={"KNOWLEDGE_FEEDBACK_DOCS": "-1"}, env_file=None)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("KNOWLEDGE_FUSION", "borda", "KNOWLEDGE_FUSION must be convex or rrf"),
        ("KNOWLEDGE_VECTOR_WEIGHT", "1.5", "KNOWLEDGE_VECTOR_WEIGHT must be between 0 and 1"),
        ("KNOWLEDGE_VECTOR_WEIGHT", "-0.1", "KNOWLEDGE_VECTOR_WEIGHT must be between 0 and 1"),
    ],
)
def test_fusion_settings_are_checked(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env(environ={name: value}, env_file=None)


async def test_a_feedback_hit_deleted_before_its_similarity_is_read_is_left_out(
    store: SQLiteStore,
) -> None:
    """A row the feedback search found and another process deleted right after has no
    similarity to give: the search leaves it out instead of failing."""
    found = store.feedback_candidates

    async def with_a_deleted_row(*args: Any) -> list[Candidate]:
        return [Candidate(10_000, 1.0), *await found(*args)]

    store.feedback_candidates = with_a_deleted_row  # type: ignore[method-assign]
    store.tuning = replace(DEFAULT_TUNING, feedback_docs=1)
    hits = await store.search(
        SearchRequest("alpha", np.array([1.0, 0.0], dtype=np.float32), 5, SearchFilters())
    )
    assert sorted(h.source_id for h in hits) == ["a", "b", "c"]
