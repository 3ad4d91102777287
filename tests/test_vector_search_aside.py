"""The SQLite store's vector searches run on a thread of their own: the product over
every vector lets go of the GIL, and on the event loop it held every other request for
as long as it ran. The searches asked in one step of the loop go there as one job (a
search asked alone runs at once on the loop); a lock keeps them from reading the index
while the loop changes it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from knowledge_api.models import SearchFilters
from knowledge_api.service import KnowledgeService
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.sqlite.store import SQLiteStore

QUERY = "How do I reset my password?"


def ids(hits: Any) -> list[tuple[str, float]]:
    return [(hit.chunk.id, hit.score) for hit in hits]


async def test_searches_asked_together_run_off_the_event_loop_and_one_alone_on_it(
    loaded: KnowledgeService,
) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore) and store.vectors.index is not None
    vector = (await loaded.retrieve(QUERY, 5, SearchFilters())).vector
    assert vector is not None
    index = store.vectors.index
    search, threads = index.search, []

    def recorded(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return search(*args)

    index.search = recorded  # type: ignore[method-assign]
    alone = await store.search(SearchRequest(QUERY, vector, 5, SearchFilters()))
    assert threads == [threading.current_thread()] * 2  # the query's, the feedback round's
    assert alone
    threads.clear()
    one = await store.vector_candidates(vector, 5, SearchFilters())
    together = await asyncio.gather(
        *(store.vector_candidates(vector, 5, SearchFilters()) for _ in range(3))
    )
    assert len(threads) == 4 and threads[0] is threading.current_thread()
    assert threading.current_thread() not in threads[1:]
    assert together == [one] * 3


async def test_a_search_waits_while_the_index_changes(loaded: KnowledgeService) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    vector = (await loaded.retrieve(QUERY, 5, SearchFilters())).vector
    assert vector is not None
    request = SearchRequest(QUERY, vector, 5, SearchFilters())
    alone = await store.search(request)
    with store.vectors.lock:  # as `follow` holds it while it moves rows
        searching = asyncio.ensure_future(store.search(request))
        await asyncio.sleep(0.2)
        assert not searching.done()
    assert ids(await searching) == ids(alone)


async def test_searches_asked_together_go_to_the_thread_as_one_job(
    loaded: KnowledgeService,
) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    vector = (await loaded.retrieve(QUERY, 5, SearchFilters())).vector
    assert vector is not None
    alone = [await store.vector_candidates(vector * w, 5, SearchFilters()) for w in (1, -1)]
    run, jobs = store.vectors.aside._run, []

    def counted(searches: Any) -> Any:
        jobs.append(len(searches))
        return run(searches)

    store.vectors.aside._run = counted  # type: ignore[method-assign]
    together = await asyncio.gather(
        *(store.vector_candidates(vector * w, 5, SearchFilters()) for w in (1, -1))
    )
    assert jobs == [2]
    assert together == alone  # each caller its own list


async def test_a_failing_search_fails_its_caller_alone(loaded: KnowledgeService) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    vector = (await loaded.retrieve(QUERY, 5, SearchFilters())).vector
    assert vector is not None
    wrong = np.ones(3, dtype=np.float32)  # not the index's dimension: the product fails
    found, failed = await asyncio.gather(
        store.vector_candidates(vector, 5, SearchFilters()),
        store.vector_candidates(wrong, 5, SearchFilters()),
        return_exceptions=True,
    )
    assert isinstance(found, list) and found
    assert isinstance(failed, ValueError)
