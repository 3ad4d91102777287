"""The llm reranker: listwise ranking by the synthesis chain's first ready link, with
the real google-genai and groq SDKs answered by respx."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from knowledge_api.config.fields import Secret
from knowledge_api.rerankers.base import RerankError
from knowledge_api.rerankers.llm import parse_ranking
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from tests import providers
from tests.conftest import ask, query_params
from tests.providers import (
    GEMINI_GENERATE,
    GROQ_CHAT,
    Stream,
    gemini_answer,
    gemini_error,
    groq_answer,
    llm_settings,
    streamed,
)
from tests.reranking import QUESTION, TOP, fused, ids, ranked_once, reranked, service_on, started

pytest.importorskip("google.genai")
pytest.importorskip("groq")


def settings_of(tmp_path: Path, **changes: Any) -> Settings:
    """Limits no loaded machine reaches (a first call builds the SDK's client and its
    types): the tests of what a link answers are not about its speed. Those of a late
    link give it a limit of their own (LATE)."""
    values: dict[str, Any] = {
        "reranker": "llm",
        "rerank_top": TOP,
        "rerank_timeout": 30.0,
        "gemini_timeout": 30.0,
        "groq_timeout": 30.0,
    }
    return llm_settings(tmp_path, **{**values, **changes})


service = service_on(settings_of)


def prompt_of(route: respx.Route) -> str:
    text: str = json.loads(route.calls.last.request.content)["contents"][0]["parts"][0]["text"]
    return text


async def test_gemini_ranks_and_unlisted_passages_follow_in_fused_order(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(['{"ranking": ', "[3, 1]}"])
    )
    groq = mock.post(GROQ_CHAT)
    hits = await fused(service)
    found = await reranked(service)
    assert ids(found.hits) == ids([hits[2], hits[0], hits[1], hits[3], *hits[4:]])
    assert found.warnings == [] and not groq.called
    prompt = prompt_of(gemini)
    assert f"QUESTION: {QUESTION}" in prompt and '{"ranking": [' in prompt
    for n, hit in enumerate(hits[:TOP], start=1):
        assert f"[{n}] " in prompt and hit.chunk.content[:40] in prompt
    assert f"[{TOP + 1}] " not in prompt  # only the first KNOWLEDGE_RERANK_TOP are ranked


async def test_groq_ranks_when_gemini_has_no_key(tmp_path: Path, mock: respx.MockRouter) -> None:
    groq = mock.post(GROQ_CHAT).mock(return_value=groq_answer(['{"ranking": [4, 3, 2, 1]}']))
    hits, found, health = await ranked_once(settings_of(tmp_path, gemini_api_key=Secret("")))
    assert ids(found.hits) == ids([*reversed(hits[:TOP]), *hits[TOP:]])
    assert "QUESTION:" in json.loads(groq.calls.last.request.content)["messages"][0]["content"]
    assert health["reranker"] == {"name": "llm", "links": ["gemini", "groq"], "status": "ok"}


async def test_a_link_whose_circuit_is_open_is_skipped(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(503))
    groq = mock.post(GROQ_CHAT).mock(return_value=groq_answer(['{"ranking": [2, 1]}']))
    service = await started(settings_of(tmp_path, llm_breaker_failures=2))
    try:
        hits = await fused(service)
        for _ in range(2):  # two failures open gemini's circuit
            assert "gemini: HTTP 503" in (await reranked(service)).warnings[0]
        found = await reranked(service)
        health = await service.health()
    finally:
        await service.stop()
    assert gemini.call_count == 2 and groq.call_count == 1
    assert ids(found.hits) == ids([hits[1], hits[0], *hits[2:]]) and found.warnings == []
    # the circuit is the chain's: answers skip gemini too
    assert health["synthesizer"]["providers"]["gemini"]["circuit"] == "open"


async def test_a_ranking_failure_counts_toward_the_links_circuit(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(500, "backend error"))
    await reranked(service)
    providers_health = (await service.health())["synthesizer"]["providers"]
    assert providers_health["gemini"]["status"] == "failing"
    assert providers_health["gemini"]["consecutive_failures"] == 1


def stalled() -> httpx.Response:
    return streamed(Stream([], then="stall", stall=5.0))


def trickle() -> httpx.Response:
    """Pieces within the link's own limit, but the whole ranking too slow."""
    pieces = [providers.gemini_chunk(" ")] * 20 + [providers.gemini_chunk('{"ranking": [1]}')]
    return streamed(Stream(pieces, pause=0.1))


ANSWERS: dict[str, tuple[Any, str]] = {
    "not json": (gemini_answer(["Passage 3 is best."]), "not JSON"),
    "another key": (gemini_answer(['{"order": [1, 2]}']), 'not {"ranking": [...]}'),
    "extra key": (gemini_answer(['{"ranking": [1], "why": "x"}']), 'not {"ranking": [...]}'),
    "a list": (gemini_answer(["[2, 1]"]), 'not {"ranking": [...]}'),
    "strings": (gemini_answer(['{"ranking": ["2", "1"]}']), "not a list of passage numbers"),
    "booleans": (gemini_answer(['{"ranking": [true]}']), "not a list of passage numbers"),
    "floats": (gemini_answer(['{"ranking": [2.0, 1]}']), "not a list of passage numbers"),
    "unknown passage": (gemini_answer(['{"ranking": [2, 9]}']), "does not exist"),
    "passage 0": (gemini_answer(['{"ranking": [0, 1]}']), "does not exist"),
    "repeated": (gemini_answer(['{"ranking": [2, 2, 1]}']), "twice"),
    "empty": (gemini_answer(['{"ranking": []}']), "empty"),
    "HTTP 500": (gemini_error(500, "backend error"), "gemini: HTTP 500 INTERNAL: backend error"),
    "network": (httpx.ConnectError("refused"), "gemini: ConnectError: refused"),
}
LATE: dict[str, tuple[Any, str, dict[str, float]]] = {
    "no first piece": (stalled(), "gemini: no answer within 0.5 s", {"gemini_timeout": 0.5}),
    "too slow overall": (trickle(), "gemini: no ranking within 1 s", {"rerank_timeout": 1.0}),
}
"""Each with the one limit it passes: the other stays out of reach, so that it is this
limit that is met, whatever the load (a 0.1 s pause of the trickle may take longer)."""


@pytest.mark.parametrize("case", ANSWERS)
async def test_anything_but_a_ranking_keeps_the_fused_order_with_a_warning(
    service: KnowledgeService, mock: respx.MockRouter, case: str
) -> None:
    await fused_order_kept(service, mock, *ANSWERS[case])


@pytest.mark.parametrize("case", LATE)
async def test_a_late_ranking_keeps_the_fused_order_with_a_warning(
    tmp_path: Path, mock: respx.MockRouter, case: str
) -> None:
    answer, why, limit = LATE[case]
    service = await started(settings_of(tmp_path, **limit))
    try:
        await fused_order_kept(service, mock, answer, why)
    finally:
        await service.stop()


async def fused_order_kept(
    service: KnowledgeService, mock: respx.MockRouter, answer: Any, why: str
) -> None:
    """Gemini answers `answer`: the fused order stands, with a warning saying `why`."""
    route = mock.post(url__regex=GEMINI_GENERATE)
    if isinstance(answer, httpx.Response):
        route.mock(return_value=answer)
    else:
        route.mock(side_effect=answer)
    groq = mock.post(GROQ_CHAT)
    hits = await fused(service)
    found = await reranked(service)
    assert ids(found.hits) == ids(hits)
    [warning] = found.warnings
    assert warning.startswith("reranking by llm failed (") and why in warning
    assert not groq.called  # one attempt: reranking does not walk the chain


async def test_a_warning_keeps_the_response_out_of_the_cache(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    route = mock.post(url__regex=GEMINI_GENERATE)
    route.side_effect = [gemini_answer(["no idea"]), gemini_answer(['{"ranking": [2, 1]}'])]
    params = query_params({"query": QUESTION, "synthesize": False, "threshold": 0.0})
    first = await ask(service, params)
    assert "reranking by llm failed" in first["warnings"][0]
    second = await ask(service, params)
    assert second["metrics"]["cache_hit"] is False and "warnings" not in second
    assert (await ask(service, params))["metrics"]["cache_hit"] is True
    assert route.call_count == 2


async def test_without_an_llm_link_the_fused_order_stands(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    hits, found, health = await ranked_once(settings_of(tmp_path, synthesizer="extractive"))
    assert ids(found.hits) == ids(hits)
    assert found.warnings == [
        "reranker llm unavailable (the synthesis chain has no LLM link "
        "(KNOWLEDGE_SYNTHESIZER)): fused order"
    ]
    assert health["reranker"]["status"] == "unavailable" and health["status"] == "degraded"


async def test_when_no_link_has_a_key_the_fused_order_stands(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    keyless = {"gemini_api_key": Secret(""), "groq_api_key": Secret("")}
    service = await started(settings_of(tmp_path, **keyless))
    try:
        found = await reranked(service)
    finally:
        await service.stop()
    [warning] = found.warnings
    assert "no LLM link is ready" in warning


@pytest.mark.parametrize(
    "text, order",
    [
        ('{"ranking": [3, 1, 2]}', [2, 0, 1]),
        ('  {"ranking": [2]}\n', [1]),
        ('```json\n{"ranking": [1, 3]}\n```', [0, 2]),
        ('```\n{"ranking": [2, 1]}\n```', [1, 0]),
    ],
)
def test_a_ranking_is_read_from_strict_json(text: str, order: list[int]) -> None:
    assert parse_ranking(text, 3) == order


def test_prose_around_the_json_is_refused() -> None:
    with pytest.raises(RerankError, match="not JSON"):
        parse_ranking('Here you go: {"ranking": [1, 2]}', 3)
