"""Progressive streaming: each source's results go out as that source answers, so a
slow source delays only its own event and the fused order. The store is the real
SQLite store, wrapped so that any search reaching the wiki pages waits on purpose."""

from __future__ import annotations

import asyncio
from typing import Any

from knowledge_api.models import (
    SOURCE_TYPES,
    SearchHit,
)
from knowledge_api.service import KnowledgeService
from knowledge_api.stores.base import KnowledgeStore, SearchRequest
from tests.conftest import query_events, query_params

SLOW = "wiki"
PATIENCE = 30.0
"""Seconds before a test that would otherwise hang fails (not a speed bound)."""


class SlowSource:
    """A store whose searches that include one source wait until `release` is set;
    everything else is the wrapped store's own."""

    def __init__(self, store: KnowledgeStore, source: str) -> None:
        self.store = store
        self.source = source
        self.release = asyncio.Event()
        self.slow_answered = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def search(self, request: SearchRequest) -> list[SearchHit]:
        hits = await self.store.search(request)
        sources = request.filters.source_types
        if sources is None or self.source in sources:
            await self.release.wait()
            self.slow_answered.set()
        return hits


async def test_the_first_results_arrive_before_the_slow_source_answers(
    loaded: KnowledgeService,
) -> None:
    slow = SlowSource(loaded.store, SLOW)
    loaded.store = slow  # type: ignore[assignment]
    params = query_params({"query": "login timeout", "synthesize": False, "threshold": 0})
    events = query_events(loaded, params)
    first_name, first = await asyncio.wait_for(anext(events), PATIENCE)
    assert first_name == "source_results" and first["source"] != SLOW
    assert not slow.slow_answered.is_set()
    seen = [(first_name, first)]
    while len(seen) < len(SOURCE_TYPES) - 1:  # every fast source, still before the slow one
        seen.append(await asyncio.wait_for(anext(events), PATIENCE))
    assert {data["source"] for _, data in seen} == set(SOURCE_TYPES) - {SLOW}
    assert not slow.slow_answered.is_set()
    slow.release.set()
    rest = [event async for event in events]
    assert slow.slow_answered.is_set()
    names = [name for name, _ in rest]
    assert names[-2:] == ["results", "done"]
    fused = rest[names.index("results")][1]["results"]
    assert fused[0]["source_id"] == "SIAM-101"
    jira = next(data for name, data in seen if data["source"] == "jira")
    assert [r["source_id"] for r in jira["results"]] == ["SIAM-101"]


async def test_a_source_names_its_results(loaded: KnowledgeService) -> None:
    params = query_params({"query": "pagination", "sources": ["git", "jira"], "threshold": 0})
    events = [event async for event in query_events(loaded, params)]
    per_source = {data["source"]: data for name, data in events if name == "source_results"}
    assert set(per_source) == {"git", "jira"}  # only the sources the request named
    assert all(r["source_type"] == "git" for r in per_source["git"]["results"])


async def test_a_cached_answer_replays_the_fused_results_only(loaded: KnowledgeService) -> None:
    params = query_params({"query": "login timeout", "synthesize": False})
    first = [name async for name, _ in query_events(loaded, params)]
    again = [name async for name, _ in query_events(loaded, params)]
    assert "source_results" in first
    assert again == ["results", "done"]
