"""The keyword list of a hybrid search sent off while the query is embedded: SQLite runs
it on its reader thread, so a cold query waits for the longer of the two legs, not for
their sum. The search takes that list instead of asking again, ranks exactly as
without it, and a list no search took is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.compose import build_service
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import SETTINGS_RANKING, SearchFilters
from knowledge_api.ranking import DEEPEST
from knowledge_api.service import KnowledgeService
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.hybrid import AHEAD
from knowledge_api.stores.sqlite.store import SQLiteStore
from tests.conftest import corpus, fake_embedder, make_settings

QUERY = "How do I reset my password?"


def recorded(service: KnowledgeService) -> list[str]:
    """The store's keyword queries and the model's query batches, in the order asked."""
    steps: list[str] = []
    store, embedder = service.store, fake_embedder(service)
    keyword_candidates, embed_queries = store.keyword_candidates, embedder.embed_queries

    async def keywords(query: str, n: int, filters: SearchFilters) -> Any:
        steps.append(f"keywords {n}")
        return await keyword_candidates(query, n, filters)

    def embedded(texts: Sequence[str]) -> np.ndarray:
        steps.append("embedded")
        return embed_queries(texts)

    store.keyword_candidates = keywords  # type: ignore[method-assign]
    embedder.embed_queries = embedded  # type: ignore[method-assign]
    return steps


def ids(hits: Sequence[Any]) -> list[tuple[str, float]]:
    return [(hit.chunk.id, round(hit.score, 6)) for hit in hits]


async def test_the_keyword_query_is_sent_before_the_embedding_and_asked_once(
    loaded: KnowledgeService,
) -> None:
    assert isinstance(loaded.store, SQLiteStore)
    steps = recorded(loaded)
    found = await loaded.retrieve(QUERY, 5, SearchFilters())
    assert steps[0].startswith("keywords") and steps[1:] == ["embedded"]
    # the same ranking as the search asked with the vector in hand
    vector = found.vector
    assert vector is not None and found.hits
    again = await loaded.store.search(SearchRequest(QUERY, vector, 6, SearchFilters()))
    assert ids(found.hits) == ids(again[:5])
    assert AHEAD.get() is None


async def test_a_deeper_page_asks_its_own_list(tmp_path: Path) -> None:
    """Only the search asking for the same list takes it: the one past the first places
    (a page deeper than KNOWLEDGE_CANDIDATES) asks for its own."""
    async with started(tmp_path, candidates=3) as service:
        steps = recorded(service)
        await service.retrieve(QUERY, 2, SearchFilters(), offset=3)
        assert steps == ["keywords 3", "embedded", f"keywords {DEEPEST}"]


async def test_a_list_no_search_took_is_cancelled(loaded: KnowledgeService) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    ahead = None
    with (
        pytest.raises(EmbeddingError),
        store.keywords_ahead(QUERY, 10, SearchFilters(), SETTINGS_RANKING),
    ):
        ahead = AHEAD.get()
        raise EmbeddingError("the model failed")
    assert ahead is not None
    assert AHEAD.get() is None
    await asyncio.wait([ahead.candidates], timeout=10)
    assert ahead.candidates.cancelled()


async def test_a_list_taken_by_a_failed_vector_search_is_cancelled(
    loaded: KnowledgeService,
) -> None:
    """The list taken by the search is awaited as it is (no task around it): when the
    vector search fails first, the error is the search's, and the list is cancelled."""
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    vector = np.ones(fake_embedder(loaded).dimension, dtype=np.float32)
    failing = RuntimeError("the vector index failed")

    async def vector_candidates(*_: Any) -> Any:
        raise failing

    store.vector_candidates = vector_candidates  # type: ignore[method-assign]
    ahead = None
    with (
        pytest.raises(RuntimeError) as raised,
        store.keywords_ahead(QUERY, 10, SearchFilters(), SETTINGS_RANKING),
    ):
        ahead = AHEAD.get()
        await store.search(SearchRequest(QUERY, vector, 10, SearchFilters()))
    assert raised.value is failing
    assert ahead is not None and AHEAD.get() is None
    await asyncio.wait([ahead.candidates], timeout=10)
    assert ahead.candidates.cancelled()


async def test_with_routing_the_list_waits_for_the_vector(tmp_path: Path) -> None:
    """Routing may narrow the sources once the vector is known: the keyword list is
    asked after it, for the sources routing chose."""
    async with started(tmp_path, routing="on") as service:
        steps = recorded(service)
        await service.retrieve(QUERY, 5, SearchFilters(), route=True)
        assert steps[0] == "embedded"
        steps.clear()
        await service.retrieve(QUERY + " again", 5, SearchFilters())  # not routed
        assert steps[0].startswith("keywords")


@asynccontextmanager
async def started(tmp_path: Path, **settings: Any) -> AsyncIterator[KnowledgeService]:
    """A service over the test corpus with these settings changed."""
    service = build_service(make_settings(tmp_path, **settings))
    await service.start()
    try:
        await service.ingest(corpus())
        yield service
    finally:
        await service.stop()
