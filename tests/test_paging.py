"""Pages of results (`offset` on query and retrieve): cut from one order for the same
store generation, so that pages side by side neither repeat nor skip a passage, also
past the first KNOWLEDGE_CANDIDATES places, where a deeper search takes over."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.compose import build_service
from knowledge_api.models import Document, SearchFilters
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from tests.conftest import ask, ingested_client, make_settings, query_events, query_params

CANDIDATES = 8
"""Small, so that pages reach past the first candidates with a small corpus."""
PASSAGES = 30
QUESTION = "asset pagination timeout"


def notes() -> list[Document]:
    """Passages that all share words with the question, some more than others, so that
    every one of them is a result and their order is not trivial."""
    words = ["asset", "pagination", "timeout", "login", "release", "audio", "search"]
    return [
        Document(
            "knowledge",
            f"note-{i}",
            f"Note {i} about {words[i % 7]} and {words[(i * 3) % 7]} in week {i}.",
            f"Note {i}",
        )
        for i in range(PASSAGES)
    ]


def paged_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, candidates=CANDIDATES)


@pytest.fixture
async def notes_service(tmp_path: Path) -> AsyncIterator[KnowledgeService]:
    service = build_service(paged_settings(tmp_path))
    await service.start()
    await service.ingest(notes())
    yield service
    await service.stop()


async def page(service: KnowledgeService, offset: int, limit: int) -> dict[str, Any]:
    params = query_params(
        {"query": QUESTION, "limit": limit, "offset": offset, "threshold": 0, "synthesize": False}
    )
    return await ask(service, params)


def ids(body: dict[str, Any]) -> list[str]:
    return [result["id"] for result in body["results"]]


async def test_two_half_pages_are_the_whole_page(notes_service: KnowledgeService) -> None:
    whole = await page(notes_service, 0, 6)
    first, second = await page(notes_service, 0, 3), await page(notes_service, 3, 3)
    assert len(ids(whole)) == 6
    assert ids(first) + ids(second) == ids(whole)
    assert first["next_offset"] == 3 and second["next_offset"] == 6


async def test_pages_past_the_first_candidates_neither_repeat_nor_skip(
    notes_service: KnowledgeService,
) -> None:
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        body = await page(notes_service, offset, 5)
        seen += ids(body)
        offset = body["next_offset"]
    # every passage matches some word of the question: all of them, each once
    assert len(seen) == len(set(seen)) == PASSAGES
    # the same order a request of the first 20 gets, which crosses the first candidates too
    twenty = ids(await page(notes_service, 0, 20))
    assert seen[:20] == twenty
    # and the head is what an unpaged search of the first candidates returns
    head = await notes_service.retrieve(QUESTION, CANDIDATES, SearchFilters(), 0.0)
    assert seen[:CANDIDATES] == [hit.chunk.id for hit in head.hits]


async def test_a_page_beyond_the_results_is_empty(notes_service: KnowledgeService) -> None:
    body = await page(notes_service, 40, 5)
    assert body["results"] == [] and body["next_offset"] is None


async def test_pages_are_cached_apart(notes_service: KnowledgeService) -> None:
    first, second = await page(notes_service, 0, 5), await page(notes_service, 5, 5)
    assert not set(ids(first)) & set(ids(second))
    again = await page(notes_service, 5, 5)
    assert again["metrics"]["cache_hit"] is True
    assert ids(again) == ids(second)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from ingested_client(paged_settings(tmp_path), notes())


def retrieve(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/knowledge/retrieve", json={"query": QUESTION, "collection": "default", **body}
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_retrieve_pages_by_offset_and_says_where_the_next_starts(client: TestClient) -> None:
    whole = retrieve(client, top_k=12)
    first = retrieve(client, top_k=7)
    second = retrieve(client, top_k=5, offset=first["next_offset"])
    assert first["next_offset"] == 7 and second["next_offset"] == 12
    contents = [c["vector_id"] for c in first["retrieved_chunks"] + second["retrieved_chunks"]]
    assert contents == [c["vector_id"] for c in whole["retrieved_chunks"]]
    last = retrieve(client, top_k=100)
    assert len(last["retrieved_chunks"]) == PASSAGES and last["next_offset"] is None


@pytest.mark.parametrize(
    ("offset", "rule"),
    [(-1, "between 0 and 200"), (201, "between 0 and 200"), ("2", "integer")],
)
def test_an_offset_out_of_range_is_a_400(client: TestClient, offset: Any, rule: str) -> None:
    for route, body in (
        ("/v1/knowledge/query", {"query": QUESTION}),
        ("/v1/knowledge/retrieve", {"query": QUESTION, "collection": "default"}),
    ):
        response = client.post(route, json={**body, "offset": offset})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["details"]["field"] == "offset" and rule in error["message"]


async def test_a_streamed_page_ends_saying_where_the_next_starts(
    notes_service: KnowledgeService,
) -> None:
    body = {"query": QUESTION, "limit": 4, "offset": 4, "threshold": 0, "synthesize": False}
    events = [event async for event in query_events(notes_service, query_params(body))]
    results = next(data for name, data in events if name == "results")["results"]
    assert [r["id"] for r in results] == ids(await page(notes_service, 4, 4))
    assert events[-1][0] == "done" and events[-1][1]["next_offset"] == 8
