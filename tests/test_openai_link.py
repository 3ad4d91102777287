"""The openai link: OpenAI and Azure OpenAI through the real openai SDK answered by
respx, and a model of one's own behind an OpenAI-compatible server on a loopback port
(streamed), as the answer's link, the llm reranker's and the chat rewriter's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.errors import ConfigurationError
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.synthesis.openai import PLACEHOLDER_KEY
from tests import openai_server
from tests.conftest import ask, corpus, make_settings, query_params
from tests.providers import (
    AZURE_CHAT,
    AZURE_DEPLOYMENT,
    AZURE_URL,
    OPENAI_CHAT,
    OPENAI_KEY,
    Stream,
    each_failure,
    openai_answer,
    openai_chunk,
    openai_error,
    streamed,
)
from tests.reranking import TOP, fused, ids, reranked
from tests.test_synthesis_chain import QUESTION, client_text, events_of

CHAIN = "openai,extractive"


@pytest.fixture
def local() -> Iterator[openai_server.Server]:
    with openai_server.serve() as server:
        yield server


def openai_settings(tmp_path: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "synthesizer": CHAIN,
        "openai_api_key": Secret(OPENAI_KEY),
        "openai_timeout": 5.0,  # the first call imports much of the SDK
    }
    return make_settings(tmp_path, **{**values, **changes})


def local_settings(tmp_path: Path, server: openai_server.Server, **changes: Any) -> Settings:
    """The link at `server`, with no key of its own."""
    values = {"openai_base_url": server.url, "openai_model": openai_server.MODEL}
    return openai_settings(tmp_path, openai_api_key=Secret(""), **{**values, **changes})


async def started(settings: Settings) -> KnowledgeService:
    service = build_service(settings)
    await service.start()
    await service.ingest(corpus())
    return service


async def asked(settings: Settings, **body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The query's body and /health's synthesizer report."""
    service = await started(settings)
    try:
        answer = await ask(service, query_params({"query": QUESTION, **body}))
        return answer, (await service.health())["synthesizer"]
    finally:
        await service.stop()


def sent(route: respx.Route) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(route.calls.last.request.content)
    return body


# -- OpenAI and Azure, through respx ----------------------------------------------------


async def test_openai_answers_streamed_with_its_key_model_and_tokens(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    chat = mock.post(OPENAI_CHAT).mock(
        return_value=openai_answer(["Ingestion accepts ", "WAV and FLAC [1]."], tokens=88)
    )
    body, health = await asked(openai_settings(tmp_path))
    assert body["synthesis"] == "Ingestion accepts WAV and FLAC [1]."
    synthesizer = body["synthesizer"]
    assert synthesizer["provider"] == "openai" and synthesizer["model"] == "gpt-4o-mini"
    assert synthesizer["tokens_used"] == 88 and synthesizer["citations"] == [1]
    assert health["chain"] == ["openai", "extractive"]
    assert health["providers"]["openai"]["status"] == "configured"
    request = chat.calls.last.request
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    payload = sent(chat)
    assert payload["model"] == "gpt-4o-mini" and payload["stream"] is True
    assert payload["stream_options"] == {"include_usage": True}
    assert payload["temperature"] == 0.3 and payload["max_completion_tokens"] == 500
    assert "max_tokens" not in payload
    assert f"USER QUESTION: {QUESTION}" in payload["messages"][0]["content"]


async def test_without_a_key_openai_is_skipped_and_says_which_to_set(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    chat = mock.post(OPENAI_CHAT)
    body, health = await asked(openai_settings(tmp_path, openai_api_key=Secret("")))
    assert body["synthesizer"]["provider"] == "extractive" and not chat.called
    assert body["synthesizer"]["skipped"] == [
        {"provider": "openai", "reason": "missing key: set KNOWLEDGE_OPENAI_API_KEY"}
    ]
    assert health["providers"]["openai"]["status"] == "missing_key"


async def test_openai_api_key_is_read_for_openai_itself(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    settings = Settings.from_env(environ={"OPENAI_API_KEY": OPENAI_KEY}, env_file=None)
    assert settings.openai_platform_key.get() == OPENAI_KEY
    assert not settings.openai_api_key and OPENAI_KEY not in repr(settings)
    assert OPENAI_KEY in settings.secrets()
    chat = mock.post(OPENAI_CHAT).mock(return_value=openai_answer(["WAV [1]."]))
    changes = {"openai_api_key": Secret(""), "openai_platform_key": Secret(OPENAI_KEY)}
    body, _ = await asked(openai_settings(tmp_path, **changes))
    assert body["synthesizer"]["provider"] == "openai"
    assert chat.calls.last.request.headers["authorization"] == f"Bearer {OPENAI_KEY}"


async def test_azure_is_asked_at_its_deployment_with_its_api_version_and_key(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    chat = mock.post(AZURE_CHAT, params={"api-version": "2024-10-21"}).mock(
        return_value=openai_answer(["Azure: WAV [1]."], tokens=21)
    )
    settings = openai_settings(
        tmp_path,
        openai_base_url=AZURE_URL,
        openai_api_version="2024-10-21",
        openai_model=AZURE_DEPLOYMENT,
    )
    body, health = await asked(settings)
    assert body["synthesis"] == "Azure: WAV [1]." and body["synthesizer"]["tokens_used"] == 21
    assert body["synthesizer"]["model"] == AZURE_DEPLOYMENT
    assert health["providers"]["openai"]["azure_api_version"] == "2024-10-21"
    request = chat.calls.last.request
    assert request.headers["api-key"] == OPENAI_KEY and "authorization" not in request.headers
    payload = sent(chat)
    assert payload["max_completion_tokens"] == 500 and payload["stream"] is True


async def test_azure_needs_its_own_key(tmp_path: Path, mock: respx.MockRouter) -> None:
    chat = mock.post(AZURE_CHAT)
    settings = openai_settings(
        tmp_path,
        openai_api_key=Secret(""),
        openai_platform_key=Secret(OPENAI_KEY),  # OpenAI's key is not Azure's
        openai_base_url=AZURE_URL,
        openai_api_version="2024-10-21",
    )
    body, _ = await asked(settings)
    assert body["synthesizer"]["skipped"][0]["reason"].startswith("missing key")
    assert not chat.called


def test_azure_without_its_endpoint_fails_at_start(tmp_path: Path) -> None:
    settings = openai_settings(tmp_path, openai_api_version="2024-10-21")
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_OPENAI_BASE_URL must be the Azure"):
        build_service(settings)


FAILURES = {
    "429": (openai_error(429, "Rate limit reached for gpt-4o-mini"), "HTTP 429: Rate limit"),
    "401": (openai_error(401, "Incorrect API key provided"), "HTTP 401: Incorrect API key"),
    "500": (openai_error(500, "The server had an error"), "HTTP 500"),
    "malformed": (
        httpx.Response(
            200, content=b"data: {not json\n\n", headers={"content-type": "text/event-stream"}
        ),
        "malformed response",
    ),
    "cut short": (
        httpx.Response(200, content=openai_chunk("WAV and ")),
        "the stream ended without a finish reason",
    ),
}


@each_failure(FAILURES)
async def test_every_openai_failure_falls_back_to_the_offline_answer_and_says_why(
    tmp_path: Path, mock: respx.MockRouter, response: httpx.Response, reason: str
) -> None:
    mock.post(OPENAI_CHAT).mock(return_value=response)
    body, health = await asked(openai_settings(tmp_path), threshold=0.0)
    assert body["synthesizer"]["provider"] == "extractive"
    [skipped] = body["synthesizer"]["skipped"]
    assert skipped["provider"] == "openai" and reason in skipped["reason"]
    assert body["warnings"] == [f"synthesis: openai {skipped['reason']}; answered by extractive"]
    assert health["providers"]["openai"]["status"] == "failing"


async def test_a_stream_that_breaks_is_reset_and_answered_offline(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    broken = Stream([openai_chunk("Ingestion accepts ")], then="break")
    mock.post(OPENAI_CHAT).mock(return_value=streamed(broken))
    service = await started(openai_settings(tmp_path))
    try:
        events = await events_of(service, stream=True)
    finally:
        await service.stop()
    names = [name for name, _ in events]
    assert names.index("reset") > names.index("synthesis")
    done = events[-1][1]
    assert done["synthesizer"]["provider"] == "extractive"
    assert "Ingestion accepts" not in client_text(events)


async def test_the_breaker_skips_openai_after_failures_in_a_row(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    chat = mock.post(OPENAI_CHAT).mock(return_value=openai_error(503, "overloaded"))
    service = await started(openai_settings(tmp_path, llm_breaker_failures=2))
    try:
        for threshold in (0.0, 0.01):  # two queries: the cache answers neither
            await ask(service, query_params({"query": QUESTION, "threshold": threshold}))
        body = await ask(service, query_params({"query": QUESTION, "threshold": 0.02}))
        health = (await service.health())["synthesizer"]["providers"]["openai"]
    finally:
        await service.stop()
    assert chat.call_count == 2
    assert "circuit open after 2 failures" in body["synthesizer"]["skipped"][0]["reason"]
    assert health["circuit"] == "open" and health["consecutive_failures"] == 2


async def test_the_synthesis_deadline_cuts_a_slow_openai_answer(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    slow = Stream([openai_chunk("WAV "), openai_chunk("and ")], pause=0.6, then="stall")
    mock.post(OPENAI_CHAT).mock(return_value=streamed(slow))
    settings = openai_settings(tmp_path, synthesis_deadline=1.0)
    body, _ = await asked(settings, threshold=0.0)
    assert body["synthesizer"]["provider"] == "extractive"
    assert "synthesis deadline of 1 s" in body["synthesizer"]["skipped"][0]["reason"]


# -- a server of one's own, on a loopback port --------------------------------------------


async def test_a_local_server_streams_its_answer_through_the_sdk(
    tmp_path: Path, local: openai_server.Server
) -> None:
    local.reply(["Ingestion ", "accepts ", "WAV and FLAC [1]."], pause=0.05, tokens=70)
    changes = {"openai_platform_key": Secret(OPENAI_KEY)}  # exported for OpenAI, not sent here
    service = await started(local_settings(tmp_path, local, **changes))
    try:
        events = await events_of(service, stream=True)
    finally:
        await service.stop()
    deltas = [data["delta"] for name, data in events if name == "synthesis"]
    assert len(deltas) == 3  # as the server sent them (the citation filter holds a space)
    assert "".join(deltas) == "Ingestion accepts WAV and FLAC [1]."
    name, done = events[-1]
    assert name == "done" and done["synthesis"] == "Ingestion accepts WAV and FLAC [1]."
    assert done["synthesizer"]["provider"] == "openai"
    assert done["synthesizer"]["model"] == openai_server.MODEL
    assert done["synthesizer"]["tokens_used"] == 70
    [request] = local.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
    payload = request["body"]
    assert payload["model"] == openai_server.MODEL and payload["max_tokens"] == 500
    assert "max_completion_tokens" not in payload


async def test_a_local_server_that_stalls_is_abandoned_for_the_offline_answer(
    tmp_path: Path, local: openai_server.Server
) -> None:
    local.reply(["Ingestion accepts "], then="stall")
    service = await started(local_settings(tmp_path, local, openai_timeout=0.5))
    try:
        events = await events_of(service, stream=True)
    finally:
        await service.stop()
    names = [name for name, _ in events]
    assert "reset" in names and events[-1][1]["synthesizer"]["provider"] == "extractive"
    [skipped] = events[-1][1]["synthesizer"]["skipped"]
    assert skipped == {"provider": "openai", "reason": "failed: no answer within 0.5 s"}


async def test_a_local_server_failing_falls_back(
    tmp_path: Path, local: openai_server.Server
) -> None:
    local.replies.append(openai_server.Reply(status=500))
    body, _ = await asked(local_settings(tmp_path, local), threshold=0.0)
    assert body["synthesizer"]["provider"] == "extractive"
    assert "HTTP 500: failure 500" in body["synthesizer"]["skipped"][0]["reason"]


async def test_the_openai_link_ranks_for_the_llm_reranker(
    tmp_path: Path, local: openai_server.Server
) -> None:
    local.reply(['{"ranking": ', "[3, 1]}"])
    settings = local_settings(tmp_path, local, reranker="llm", rerank_top=TOP, rerank_timeout=30.0)
    service = await started(settings)
    try:
        hits = await fused(service)
        found = await reranked(service)
    finally:
        await service.stop()
    assert found.warnings == []
    assert ids(found.hits) == ids([hits[2], hits[0], hits[1], hits[3], *hits[4:]])
    assert '{"ranking": [' in local.requests[0]["body"]["messages"][0]["content"]


def test_the_openai_link_rewrites_a_chat_follow_up(
    tmp_path: Path, local: openai_server.Server
) -> None:
    local.reply(["Does asset ingestion convert MP3 uploads?\n"])
    local.default = openai_server.Reply(["MP3 uploads are converted to FLAC [1]."])
    settings = local_settings(tmp_path, local, answer_threshold="0.0")
    messages = [
        {"role": "user", "content": "Which audio formats does asset ingestion accept?"},
        {
            "role": "assistant",
            "content": "WAV and FLAC [1].\n\nSources:\n[1] Supported audio formats",
        },
        {"role": "user", "content": "Is MP3 converted by it?"},
    ]
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        response = client.post("/v1/chat/completions", json={"messages": messages})
    assert response.status_code == 200, response.text
    rewrite = response.json()["rewrite"]
    assert rewrite["by"] == "openai" and rewrite["fallback"] is None
    assert rewrite["question"] == "Does asset ingestion convert MP3 uploads?"
    rewrite_prompt, answer_prompt = (r["body"]["messages"][0]["content"] for r in local.requests)
    assert "USER: Is MP3 converted by it?" in rewrite_prompt
    assert "USER QUESTION: Does asset ingestion convert MP3 uploads?" in answer_prompt
