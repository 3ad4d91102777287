"""The quantised vector index of large SQLite stores: recall against exact search, filters,
persistence beside the file, and catching up with other processes' writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.filters import parse as parse_filter
from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.sqlite import vectors as sqlite_vectors
from knowledge_api.stores.sqlite.quantized_index import QuantizedIndex
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import opened_sqlite

DIMENSION = 64


def clustered(n: int, seed: int = 3, dimension: int = DIMENSION) -> np.ndarray:
    """Unit vectors near one of n/100 topic directions, as embeddings of text cluster."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((max(1, n // 100), dimension)).astype(np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    vectors = topics[rng.integers(0, len(topics), n)] + rng.standard_normal(
        (n, dimension), dtype=np.float32
    ) * (0.8 / np.sqrt(dimension))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def near(vectors: np.ndarray, n: int, seed: int = 5) -> np.ndarray:
    """Queries close to (not equal to) stored vectors."""
    rng = np.random.default_rng(seed)
    moved = vectors[rng.integers(0, len(vectors), n)] + rng.standard_normal(
        (n, vectors.shape[1]), dtype=np.float32
    ) * (0.3 / np.sqrt(vectors.shape[1]))
    return moved / np.linalg.norm(moved, axis=1, keepdims=True)


def exact_top(vectors: np.ndarray, query: np.ndarray, k: int) -> set[int]:
    return set(np.argsort(-(vectors @ query))[:k].tolist())


def test_recall_at_10_against_exact_search_on_384_d_vectors() -> None:
    vectors = clustered(20_000, dimension=384)
    index = QuantizedIndex.trained(vectors[::10], len(vectors))
    index.add(list(range(len(vectors))), vectors, [("c", "wiki")] * len(vectors))
    found = []
    for query in near(vectors, 100):
        shortlist = [key for key, _ in index.candidates(query, 100, "c", None, None)]
        rescored = sorted(shortlist, key=lambda key: -float(vectors[key] @ query))[:10]
        found.append(len(set(rescored) & exact_top(vectors, query, 10)) / 10)
    assert np.mean(found) >= 0.98


def test_a_narrow_filter_is_searched_exactly_over_its_rows() -> None:
    vectors = clustered(5000)
    index = QuantizedIndex.trained(vectors[::5], len(vectors))
    labels = [("c", "jira" if key % 50 == 0 else "wiki") for key in range(len(vectors))]
    index.add(list(range(len(vectors))), vectors, labels)
    jira = np.arange(0, len(vectors), 50)
    for query in near(vectors, 20):
        shortlist = [key for key, _ in index.candidates(query, 20, "c", ["jira"], None)]
        found = set(sorted(shortlist, key=lambda key: -float(vectors[key] @ query))[:10])
        best = jira[np.argsort(-(vectors[jira] @ query))[:10]]
        assert found == set(best.tolist())
    assert index.candidates(vectors[0], 10, "other", None, None) == []
    assert {
        k for k, _ in index.candidates(vectors[7], 3, "c", None, np.isin(np.arange(10), [7, 8, 9]))
    } == {7, 8, 9}


def test_removed_and_replaced_rows() -> None:
    vectors = clustered(2000)
    index = QuantizedIndex.trained(vectors, len(vectors))
    index.add(list(range(1000)), vectors[:1000], [("c", "wiki")] * 1000)
    index.remove([5, 5000])
    index.add([6], vectors[1500:1501], [("c", "git")])
    assert len(index) == 999
    assert 5 not in {k for k, _ in index.candidates(vectors[5], 50, "c", None, None)}
    assert index.candidates(vectors[1500], 1, "c", ["git"], None)[0][0] == 6


# -- through the SQLite store ---------------------------------------------------------


def documents(vectors: np.ndarray, start: int = 0, collection: str = "default") -> list[Document]:
    docs = []
    for i, vector in enumerate(vectors, start):
        doc = Document(
            "jira" if i % 10 == 0 else "wiki",
            f"doc-{i}",
            f"text {i}",
            metadata={"bucket": i % 100},
            collection=collection,
        )
        doc.chunks = [Chunk(f"doc-{i}-0", doc.id, 0, f"text {i}", embedding=vector)]
        docs.append(doc)
    return docs


async def filled(path: Path, vectors: np.ndarray) -> SQLiteStore:
    store = await opened_sqlite(path, "test", DIMENSION, ann_min_chunks=1)
    await store.index_documents(documents(vectors))
    await store.close()
    return store


async def opened(path: Path) -> SQLiteStore:
    store = SQLiteStore(path, ann_min_chunks=1000)
    await store.open()
    return store


async def vector_ids(store: SQLiteStore, query: np.ndarray, **filters: object) -> list[str]:
    hits = await store.search(SearchRequest("", query, 10, SearchFilters(**filters), mode="vector"))  # type: ignore[arg-type]
    return [hit.source_id for hit in hits]


def exact_ids(vectors: np.ndarray, query: np.ndarray, allowed: np.ndarray) -> list[str]:
    rows = np.flatnonzero(allowed)
    best = rows[np.argsort(-(vectors[rows] @ query), kind="stable")[:10]]
    return [f"doc-{i}" for i in best.tolist()]


@pytest.fixture
def vectors() -> np.ndarray:
    return clustered(3000)


async def test_a_large_store_builds_saves_and_reloads_its_index(
    tmp_path: Path, vectors: np.ndarray
) -> None:
    await filled(tmp_path / "k.db", vectors)
    store = await opened(tmp_path / "k.db")
    health = await store.health_check()
    assert health["vector_index"] == "quantised"
    assert health["vector_index_note"] == "quantised index built"
    assert health["vector_memory_mb"] < vectors.nbytes / 2**20  # int8 codes, not float32
    assert (tmp_path / "k.db.vectors.faiss").exists()
    query = near(vectors, 1)[0]
    first = await vector_ids(store, query)
    await store.close()

    again = await opened(tmp_path / "k.db")
    assert (await again.health_check())["vector_index_note"] == "quantised index loaded from disk"
    assert await vector_ids(again, query) == first
    assert first == exact_ids(vectors, query, np.ones(len(vectors), dtype=bool))
    hits = await again.search(SearchRequest("", query, 3, SearchFilters(), mode="vector"))
    assert hits[0].similarity == pytest.approx(float(vectors[int(hits[0].source_id[4:])] @ query))
    await again.close()


async def test_filters_stay_exact(tmp_path: Path, vectors: np.ndarray) -> None:
    await filled(tmp_path / "k.db", vectors)
    store = await opened(tmp_path / "k.db")
    jira = np.arange(len(vectors)) % 10 == 0
    for query in near(vectors, 10):
        assert await vector_ids(store, query, source_types=("jira",)) == exact_ids(
            vectors, query, jira
        )
    assert await vector_ids(store, vectors[0], collection="elsewhere") == []
    narrow = np.arange(len(vectors)) % 100 == 7  # 1 %: searched exactly over its rows
    for query in near(vectors, 10):
        where = parse_filter({"bucket": 7})
        assert await vector_ids(store, query, where=where) == exact_ids(vectors, query, narrow)
    await store.close()


async def test_a_narrow_filter_gives_the_limit_whenever_as_many_match(
    tmp_path: Path, vectors: np.ndarray
) -> None:
    """The quantised index searches a narrow filter's rows through its bitmap: however
    few rows pass, every mode returns `limit` of them, or all when fewer pass."""
    await filled(tmp_path / "k.db", vectors)
    store = await opened(tmp_path / "k.db")
    query = near(vectors, 1)[0]
    for count in (3, 10, 12, 30):
        ids = [f"doc-{7 + 100 * k}" for k in range(count)]  # of the 30 rows of bucket 7
        where = parse_filter({"bucket": 7, "source_id": {"$in": ids}})
        for mode in ("vector", "hybrid", "keyword"):
            hits = await store.search(
                SearchRequest("text", query, 10, SearchFilters(where=where), 0.0, mode)
            )  # type: ignore[arg-type]
            assert len(hits) == min(10, count), (count, mode)
            assert {hit.source_id for hit in hits} <= set(ids)
    await store.close()


async def test_writes_of_another_process_are_followed(tmp_path: Path, vectors: np.ndarray) -> None:
    await filled(tmp_path / "k.db", vectors)
    service = await opened(tmp_path / "k.db")
    other = await opened(tmp_path / "k.db")  # its own connections, as another process's
    extra = clustered(20, seed=9)
    await other.index_documents(documents(extra, start=len(vectors)))
    assert await other.delete(documents(vectors[:1])[0].id)
    assert (await vector_ids(service, extra[0]))[0] == f"doc-{len(vectors)}"
    assert "doc-0" not in await vector_ids(service, vectors[0])
    await service.close()
    await other.close()


async def test_a_stale_or_foreign_index_is_never_trusted(
    tmp_path: Path, vectors: np.ndarray
) -> None:
    await filled(tmp_path / "k.db", vectors)
    await (await opened(tmp_path / "k.db")).close()  # builds and saves the index
    writer = await opened(tmp_path / "k.db")
    await writer.delete(documents(vectors[:1])[0].id)
    writer.vectors.saved_seq = writer.vectors.seq  # as if it was killed before saving
    await writer.close()

    caught_up = await opened(tmp_path / "k.db")
    assert "doc-0" not in await vector_ids(caught_up, vectors[0])
    assert (await caught_up.health_check())["vectors_in_memory"] == len(vectors) - 1
    await caught_up.close()

    await filled(tmp_path / "other.db", clustered(1500, seed=8))
    await (await opened(tmp_path / "other.db")).close()
    for part in ("faiss", "npy", "json"):  # another store's index at this path
        (tmp_path / f"other.db.vectors.{part}").replace(tmp_path / f"k.db.vectors.{part}")
    rebuilt = await opened(tmp_path / "k.db")
    assert (await rebuilt.health_check())["vector_index_note"] == "quantised index built"
    assert (await vector_ids(rebuilt, vectors[5]))[0] == "doc-5"
    await rebuilt.close()


async def test_small_stores_keep_the_exact_index(tmp_path: Path) -> None:
    await filled(tmp_path / "k.db", clustered(200))
    store = await opened(tmp_path / "k.db")
    assert (await store.health_check())["vector_index"] == "exact"
    assert not (tmp_path / "k.db.vectors.faiss").exists()
    await store.close()


async def test_the_feedback_search_ranks_by_the_index_own_scores(
    tmp_path: Path, vectors: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feedback ranking counts by rank alone: on the quantised index its shortlist
    is not read back from the file to be rescored, and it still finds the rows the
    exact rescoring finds; the hits of a hybrid search keep their exact cosines."""
    await filled(tmp_path / "k.db", vectors)
    store = await opened(tmp_path / "k.db")
    reads: list[int] = []
    stored_cosines = sqlite_vectors.stored_cosines

    def counted(*args: Any) -> Any:
        reads.append(1)
        return stored_cosines(*args)

    monkeypatch.setattr(sqlite_vectors, "stored_cosines", counted)
    for query in near(vectors, 5):
        by_index = await store.feedback_candidates(query, 10, SearchFilters())
        assert reads == []
        rescored = await store.vector_candidates(query, 10, SearchFilters())
        assert reads == [1]
        reads.clear()
        assert len({c.key for c in by_index} & {c.key for c in rescored}) >= 9
    query = near(vectors, 1)[0]
    hits = await store.search(SearchRequest("text", query, 3, SearchFilters()))
    for hit in hits:
        exact = float(vectors[int(hit.source_id[4:])] @ query)
        assert hit.similarity == pytest.approx(max(exact, 0.0), abs=1e-6)
    await store.close()


def test_a_wide_mask_keeps_the_recall_of_the_unfiltered_search() -> None:
    """Half the rows allowed (a reader's principals): the n best allowed rows come from
    the whole index's best, and they are only allowed ones, as close to the exact
    answer over the allowed rows as the unfiltered search is to its own."""
    vectors = clustered(20_000, dimension=384)
    index = QuantizedIndex.trained(vectors[::10], len(vectors))
    index.add(list(range(len(vectors))), vectors, [("c", "wiki")] * len(vectors))
    allowed = np.arange(len(vectors)) % 2 == 0
    found = []
    for query in near(vectors, 100):
        shortlist = [key for key, _ in index.candidates(query, 100, "c", None, allowed)]
        assert len(shortlist) == 100 and all(allowed[key] for key in shortlist)
        rescored = sorted(shortlist, key=lambda key: -float(vectors[key] @ query))[:10]
        scores = np.where(allowed, vectors @ query, -np.inf)
        found.append(len(set(rescored) & set(np.argsort(-scores)[:10].tolist())) / 10)
    assert np.mean(found) >= 0.98
