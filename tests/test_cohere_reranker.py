"""The cohere reranker through the real cohere SDK, answered by respx at the HTTP edge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from knowledge_api.config.fields import Secret
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from tests.conftest import ask, make_settings, query_params
from tests.providers import COHERE_KEY, COHERE_RERANK, COHERE_URL, cohere_error, cohere_ranking
from tests.reranking import QUESTION, TOP, fused, ids, ranked_once, reranked, service_on, started

pytest.importorskip("cohere")


def cohere_settings(tmp_path: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "reranker": "cohere",
        "rerank_top": TOP,
        "cohere_api_key": Secret(COHERE_KEY),
        "cohere_base_url": COHERE_URL,
        "rerank_timeout": 30.0,  # out of a loaded machine's reach: the late test sets 1 s
    }
    return make_settings(tmp_path, **{**values, **changes})


service = service_on(cohere_settings)


async def test_cohere_orders_the_best_hits(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    route = mock.post(COHERE_RERANK).mock(return_value=cohere_ranking([2, 0, 3, 1]))
    hits = await fused(service)
    found = await reranked(service)
    assert ids(found.hits) == ids([hits[2], hits[0], hits[3], hits[1], *hits[4:6]])
    assert found.warnings == []
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {COHERE_KEY}"
    sent = json.loads(request.content)
    assert sent["model"] == "rerank-v3.5" and sent["query"] == QUESTION
    assert sent["documents"] == [hit.chunk.embedded_text for hit in hits[:TOP]]
    assert sent["top_n"] == TOP


async def test_the_model_is_configurable(tmp_path: Path, mock: respx.MockRouter) -> None:
    route = mock.post(COHERE_RERANK).mock(return_value=cohere_ranking([1, 0, 2, 3]))
    service = await started(cohere_settings(tmp_path, rerank_model="rerank-english-v3.0"))
    try:
        await reranked(service)
        health = await service.health()
    finally:
        await service.stop()
    assert json.loads(route.calls.last.request.content)["model"] == "rerank-english-v3.0"
    assert health["reranker"] == {
        "name": "cohere",
        "model": "rerank-english-v3.0",
        "key": "COHERE_API_KEY",
        "status": "ok",
    }


async def slow(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(5)
    return cohere_ranking([0, 1, 2, 3])


FAILURES: dict[str, tuple[Any, str]] = {
    "500": (cohere_error(500, "internal error"), "HTTP 500: internal error"),
    "429": (cohere_error(429, "rate limited"), "HTTP 429: rate limited"),
    "network": (httpx.ConnectError("connection refused"), "ConnectError"),
    "not json": (httpx.Response(200, content=b"{not json"), "malformed response"),
    "unknown index": (cohere_ranking([7, 0]), "does not exist"),
    "no results": (httpx.Response(200, json={"id": "x", "results": []}), "empty"),
}


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failure_keeps_the_fused_order_with_a_warning(
    service: KnowledgeService, mock: respx.MockRouter, failure: str
) -> None:
    await fused_order_kept(service, mock, *FAILURES[failure])


async def test_a_late_ranking_keeps_the_fused_order_with_a_warning(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    service = await started(cohere_settings(tmp_path, rerank_timeout=1.0))
    try:
        await fused_order_kept(service, mock, slow, "no ranking within 1 s")
    finally:
        await service.stop()


async def fused_order_kept(
    service: KnowledgeService, mock: respx.MockRouter, answer: Any, why: str
) -> None:
    """Cohere answers `answer`: the fused order stands, with a warning saying `why`."""
    route = mock.post(COHERE_RERANK)
    if isinstance(answer, httpx.Response):
        route.mock(return_value=answer)
    else:
        route.mock(side_effect=answer)
    hits = await fused(service)
    found = await reranked(service)
    assert ids(found.hits) == ids(hits)
    [warning] = found.warnings
    assert warning.startswith("reranking by cohere failed (") and why in warning
    health = await service.health()
    assert health["reranker"]["status"] == "failing" and health["status"] == "degraded"


async def test_a_failed_ranking_is_not_cached_and_a_later_one_is(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    route = mock.post(COHERE_RERANK)
    route.side_effect = [cohere_error(503, "overloaded"), cohere_ranking([3, 2, 1, 0])]
    params = query_params({"query": QUESTION, "synthesize": False, "threshold": 0.0})
    failed = await ask(service, params)
    assert "fused order" in failed["warnings"][0]
    recovered = await ask(service, params)
    assert recovered["metrics"]["cache_hit"] is False and "warnings" not in recovered
    cached = await ask(service, params)
    assert cached["metrics"]["cache_hit"] is True and route.call_count == 2
    assert (await service.health())["reranker"]["status"] == "ok"


async def test_without_a_key_no_request_is_made(tmp_path: Path, mock: respx.MockRouter) -> None:
    route = mock.post(COHERE_RERANK)
    hits, found, health = await ranked_once(cohere_settings(tmp_path, cohere_api_key=Secret("")))
    assert ids(found.hits) == ids(hits) and not route.called
    assert found.warnings == [
        "reranker cohere unavailable (missing key: set COHERE_API_KEY): fused order"
    ]
    assert health["reranker"]["status"] == "unavailable"
    assert COHERE_KEY not in json.dumps(health)
