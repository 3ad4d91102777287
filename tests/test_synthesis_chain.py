"""The synthesis chain with the real google-genai and groq SDKs, answered by respx:
successful streams, every way a provider fails, and the fallback between links."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import ConfigurationError
from knowledge_api.models import SearchFilters
from knowledge_api.registry import import_extra
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores.sqlite.store import SQLiteStore
from knowledge_api.synthesis.chain import SynthesisChain
from knowledge_api.synthesis.gemini import GeminiSynthesizer
from knowledge_api.synthesis.prompt import build_prompt
from tests.conftest import ask, corpus, make_settings, query_events, query_params
from tests.providers import (
    GEMINI_GENERATE,
    GEMINI_KEY,
    GROQ_CHAT,
    GROQ_KEY,
    Stream,
    each_failure,
    gemini_answer,
    gemini_chunk,
    gemini_error,
    groq_answer,
    groq_chunk,
    groq_error,
    llm_settings,
    streamed,
)

QUESTION = "Which audio formats does asset ingestion accept?"


async def started(settings: Settings) -> KnowledgeService:
    service = build_service(settings)
    await service.start()
    await service.ingest(corpus())
    return service


PATIENT = {"gemini_timeout": 30.0, "groq_timeout": 30.0}
"""Limits no loaded machine reaches: a test of what a provider answers is not about its
speed. A test of a provider that says nothing gives that one 1 s (`silent`)."""


@pytest.fixture
async def service(tmp_path: Path, mock: respx.MockRouter) -> AsyncIterator[KnowledgeService]:
    svc = await started(llm_settings(tmp_path, **PATIENT))
    yield svc
    await svc.stop()


@contextlib.asynccontextmanager
async def silent(tmp_path: Path, provider: str) -> AsyncIterator[KnowledgeService]:
    """The service, `provider` given 1 s to say something, the other patient."""
    svc = await started(llm_settings(tmp_path, **{**PATIENT, f"{provider}_timeout": 1.0}))
    try:
        yield svc
    finally:
        await svc.stop()


async def events_of(service: KnowledgeService, **body: Any) -> list[tuple[str, Any]]:
    request = query_params({"query": QUESTION, "threshold": 0.0, **body})
    return [event async for event in query_events(service, request)]


def client_text(events: list[tuple[str, Any]]) -> str:
    """What a client shows: deltas appended, dropped again on `reset`."""
    shown = ""
    for name, data in events:
        if name == "synthesis":
            shown += data["delta"]
        elif name == "reset":
            shown = ""
    return shown


async def test_gemini_answers_first_with_the_spec_parameters(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(["Ingestion accepts ", "WAV and FLAC", " files [1]."], tokens=31)
    )
    groq = mock.post(GROQ_CHAT)
    body = await ask(service, query_params({"query": QUESTION}))
    assert body["synthesis"] == "Ingestion accepts WAV and FLAC files [1]."
    assert body["synthesizer"]["provider"] == "gemini"
    assert body["synthesizer"]["model"] == "gemini-2.0-flash"
    assert body["synthesizer"]["tokens_used"] == 31
    assert body["synthesizer"]["citations"] == [1] and body["synthesizer"]["skipped"] == []
    assert not groq.called
    request = gemini.calls.last.request
    assert request.headers["x-goog-api-key"] == GEMINI_KEY
    sent = json.loads(request.content)
    assert sent["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 500}
    prompt = sent["contents"][0]["parts"][0]["text"]
    assert "based ONLY on the provided context" in prompt and "say so clearly" in prompt
    assert f"USER QUESTION: {QUESTION}" in prompt
    assert "[1] Supported audio formats (knowledge kb-7)" in prompt


async def test_groq_answers_when_gemini_has_no_key(tmp_path: Path, mock: respx.MockRouter) -> None:
    groq = mock.post(GROQ_CHAT).mock(return_value=groq_answer(["WAV and ", "FLAC [1]."]))
    service = await started(llm_settings(tmp_path, gemini_api_key=Secret("")))
    try:
        body = await ask(service, query_params({"query": QUESTION}))
    finally:
        await service.stop()
    assert body["synthesis"] == "WAV and FLAC [1]."
    assert body["synthesizer"]["model"] == "llama-3.3-70b-versatile"
    assert body["synthesizer"]["tokens_used"] == 77
    assert body["synthesizer"]["skipped"] == [
        {"provider": "gemini", "reason": "missing key: set GOOGLE_GENERATIVE_AI_API_KEY"}
    ]
    assert "warnings" not in body  # a missing key is configuration, not a failure
    request = groq.calls.last.request
    assert request.headers["authorization"] == f"Bearer {GROQ_KEY}"
    sent = json.loads(request.content)
    assert sent["model"] == "llama-3.3-70b-versatile" and sent["stream"] is True
    assert sent["temperature"] == 0.3 and sent["max_completion_tokens"] == 500


def stalled() -> httpx.Response:
    return streamed(Stream([], then="stall"))


GEMINI_FAILURES: dict[str, tuple[Any, str]] = {
    "429": (gemini_error(429, "quota exceeded", "RESOURCE_EXHAUSTED"), "HTTP 429"),
    "500": (gemini_error(500, "backend error"), "HTTP 500"),
    "503": (gemini_error(503, "overloaded", "UNAVAILABLE"), "HTTP 503"),
    "sdk timeout": (httpx.ReadTimeout("read timed out"), "ReadTimeout"),
    "malformed body": (
        httpx.Response(200, content=b"data: {not json\r\n\r\n"),
        "malformed response",
    ),
    "no text": (
        httpx.Response(200, content=b'data: {"candidates": [{"finishReason": "SAFETY"}]}\r\n\r\n'),
        "the answer was empty",
    ),
    "cut short": (  # the body ends by connection close, no finishReason
        httpx.Response(200, content=gemini_chunk("WAV and FLAC are ")),
        "ended without a finish reason",
    ),
}
GROQ_FAILURES: dict[str, tuple[Any, str]] = {
    "429": (groq_error(429, "rate limit reached"), "HTTP 429: rate limit reached"),
    "500": (groq_error(500, "internal"), "HTTP 500"),
    "timeout": (httpx.ConnectTimeout("connect timed out"), "APITimeoutError"),
    "malformed body": (httpx.Response(200, content=b"data: {nope\n\n"), "malformed response"),
    "cut short": (  # no finish_reason and no [DONE]
        httpx.Response(200, content=groq_chunk("WAV and FLAC are ")),
        "ended without a finish reason",
    ),
}


@each_failure(GEMINI_FAILURES)
async def test_any_gemini_failure_falls_back_to_groq(
    service: KnowledgeService, mock: respx.MockRouter, response: Any, reason: str
) -> None:
    await falls_back_to_groq(service, mock, response, reason)


async def falls_back_to_groq(
    service: KnowledgeService, mock: respx.MockRouter, response: Any, reason: str
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(side_effect=[response])
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
    body = await ask(service, query_params({"query": QUESTION}))
    assert body["synthesis"] == "Groq: WAV [1]."
    assert body["synthesizer"]["provider"] == "groq"
    [skip] = body["synthesizer"]["skipped"]
    assert skip["provider"] == "gemini" and reason in skip["reason"]
    assert body["warnings"] == [f"synthesis: gemini {skip['reason']}; answered by groq"]
    health = (await service.health())["synthesizer"]
    assert health["status"] == "degraded"
    assert health["providers"]["gemini"]["status"] == "failing"
    assert reason in health["providers"]["gemini"]["error"]
    assert health["providers"]["groq"]["status"] == "configured"


@each_failure(GROQ_FAILURES)
async def test_both_failing_falls_back_to_the_extractive_answer(
    service: KnowledgeService, mock: respx.MockRouter, response: Any, reason: str
) -> None:
    await falls_back_to_extractive(service, mock, response, reason)


async def falls_back_to_extractive(
    service: KnowledgeService, mock: respx.MockRouter, response: Any, reason: str
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(500))
    mock.post(GROQ_CHAT).mock(side_effect=[response])
    body = await ask(service, query_params({"query": QUESTION}))
    assert body["synthesizer"]["provider"] == "extractive"
    assert body["synthesis"] == "Asset ingestion accepts WAV and FLAC audio files. [1]"
    gemini, groq = body["synthesizer"]["skipped"]
    assert gemini["provider"] == "gemini" and "HTTP 500" in gemini["reason"]
    assert groq["provider"] == "groq" and reason in groq["reason"]
    assert len(body["warnings"]) == 2


@pytest.mark.parametrize(
    "provider, falls_back",
    [("gemini", falls_back_to_groq), ("groq", falls_back_to_extractive)],
    ids=["gemini", "groq"],
)
async def test_a_provider_saying_nothing_is_left_after_its_limit(
    tmp_path: Path, mock: respx.MockRouter, provider: str, falls_back: Any
) -> None:
    async with silent(tmp_path, provider) as service:
        await falls_back(service, mock, stalled(), "no answer within 1 s")


async def test_a_failed_answer_is_not_cached_and_a_recovered_provider_is_healthy(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(
        side_effect=[gemini_error(503), gemini_answer(["Back: WAV [1]."])]
    )
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
    request = query_params({"query": QUESTION})
    assert (await ask(service, request))["synthesizer"]["provider"] == "groq"
    again = await ask(service, request)
    assert again["metrics"]["cache_hit"] is False and again["synthesis"] == "Back: WAV [1]."
    assert gemini.call_count == 2
    assert (await ask(service, request))["metrics"]["cache_hit"] is True
    health = (await service.health())["synthesizer"]
    assert health["status"] == "ok" and health["providers"]["gemini"]["status"] == "configured"


@pytest.mark.parametrize(
    "gemini_body",
    [
        Stream([gemini_chunk("WAV and FLAC are "), gemini_chunk("accepted")], then="break"),
        Stream(
            [
                gemini_chunk("WAV and FLAC are "),
                b'data: {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}\r\n\r\n',
            ]
        ),
    ],
    ids=["connection lost", "error event"],
)
async def test_a_failure_mid_stream_resets_and_never_repeats_text(
    service: KnowledgeService, mock: respx.MockRouter, gemini_body: Stream
) -> None:
    await resets_once(service, mock, gemini_body)


async def test_a_stall_mid_stream_resets_and_never_repeats_text(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    async with silent(tmp_path, "gemini") as service:
        await resets_once(service, mock, Stream([gemini_chunk("WAV and FLAC are ")], then="stall"))


async def resets_once(
    service: KnowledgeService, mock: respx.MockRouter, gemini_body: Stream
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(gemini_body))
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: ", "WAV and FLAC [1]."]))
    events = await events_of(service)
    names = [name for name, _ in events if name != "source_results"]  # each source's first
    assert names[0] == "results" and names[-1] == "done"
    assert names.count("reset") == 1
    assert names.index("reset") > names.index("synthesis")  # gemini had streamed text
    reset = dict(events)["reset"]
    assert reset["provider"] == "gemini" and reset["reason"].startswith("failed")
    done = events[-1][1]
    assert done["synthesis"] == "Groq: WAV and FLAC [1]."
    assert client_text(events) == done["synthesis"]
    assert done["synthesizer"]["provider"] == "groq"


async def test_streamed_pieces_arrive_as_the_provider_sends_them(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    pieces = ["Asset ", "ingestion ", "accepts ", "WAV ", "and ", "FLAC ", "[", "1", "]."]
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_answer(pieces))
    events = await events_of(service)
    deltas = [data["delta"] for name, data in events if name == "synthesis"]
    assert len(deltas) >= 6  # token by token, not one block at the end
    assert "".join(deltas) == "Asset ingestion accepts WAV and FLAC [1]."
    assert all("[" not in d or "]" in d for d in deltas)  # a citation is sent whole
    assert events[-1][1]["synthesizer"]["citations"] == [1]


async def test_invented_citations_are_removed_and_reported(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(["WAV and FLAC [1][7]. ", "Test cases need a title [2, 9]."])
    )
    body = await ask(service, query_params({"query": QUESTION, "threshold": 0.0}))
    assert body["synthesis"] == "WAV and FLAC [1]. Test cases need a title [2]."
    assert body["synthesizer"]["citations"] == [1, 2]
    assert body["synthesizer"]["citations_removed"] == [7, 9]
    assert len(body["results"]) >= 2


async def test_the_default_base_urls_are_the_providers(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    settings = make_settings(tmp_path, gemini_api_key=Secret(GEMINI_KEY))
    route = mock.post(
        url__regex=r"^https://generativelanguage\.googleapis\.com/v1/models/gemini-2\.0-flash:"
    ).mock(return_value=gemini_answer(["WAV [1]."]))
    service = await started(settings)
    try:
        body = await ask(service, query_params({"query": QUESTION}))
    finally:
        await service.stop()
    assert route.called and body["synthesizer"]["provider"] == "gemini"


async def test_no_passage_means_no_provider_call(
    service: KnowledgeService, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE)
    body = await ask(service, query_params({"query": QUESTION, "threshold": 0.99}))
    assert body["results"] == [] and not gemini.called
    assert body["synthesis"] == "The knowledge base has no passage relevant to this question."
    reasons = {s["provider"]: s["reason"] for s in body["synthesizer"]["skipped"]}
    assert reasons == {"gemini": "no passage to answer from", "groq": "no passage to answer from"}


async def test_keys_never_appear_in_health_logs_or_responses(
    service: KnowledgeService, mock: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_error(400, "API key not valid. Please pass a valid API key.")
    )
    mock.post(GROQ_CHAT).mock(return_value=groq_error(401, "Invalid API Key"))
    body = await ask(service, query_params({"query": QUESTION}))
    assert body["synthesizer"]["provider"] == "extractive"
    seen = json.dumps([body, await service.health()]) + caplog.text + repr(service.settings)
    assert "API key not valid" in seen  # the errors are reported ...
    assert GEMINI_KEY not in seen and GROQ_KEY not in seen  # ... the keys are not


def test_prompt_holds_at_most_the_context_budget() -> None:
    from tests.test_extractive import hit

    hits = [hit(f"Passage {n}. " + "word " * 170) for n in range(1, 11)]
    prompt = build_prompt("question?", hits, "AOMA", 6400)
    context = prompt.text.split("CONTEXT:\n")[1].split("\n\nUSER QUESTION:")[0]
    assert len(context) <= 6400
    assert 0 < len(prompt.hits) < len(hits)
    assert f"[{len(prompt.hits)}]" in context and f"[{len(prompt.hits) + 1}]" not in context
    small = build_prompt("question?", hits[:2], "AOMA", 6400)
    assert len(small.hits) == 2 and "Passage 2." in small.text


async def test_citations_past_the_context_are_removed(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    service = await started(llm_settings(tmp_path, llm_context_chars=120))
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_answer(["WAV [1] [2]."]))
    try:
        body = await ask(service, query_params({"query": QUESTION, "threshold": 0.0}))
    finally:
        await service.stop()
    assert len(body["results"]) >= 2  # [2] is a result, but not in the 120-character context
    assert body["synthesis"] == "WAV [1]."
    assert body["synthesizer"]["citations_removed"] == [2]


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ("gemini,groq", "must end with extractive"),
        ("extractive,gemini", "must end with extractive"),
        ("gemini,gemini,extractive", "names a link twice"),
        ("mistral,extractive", "not a known synthesizer"),
    ],
)
def test_the_chain_is_checked_at_start(tmp_path: Path, chain: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build_service(make_settings(tmp_path, synthesizer=chain))


async def test_the_chain_order_comes_from_settings(tmp_path: Path, mock: respx.MockRouter) -> None:
    gemini = mock.post(url__regex=GEMINI_GENERATE)
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq first [1]."]))
    service = await started(llm_settings(tmp_path, synthesizer="groq,gemini,extractive"))
    try:
        body = await ask(service, query_params({"query": QUESTION}))
        health = await service.health()
    finally:
        await service.stop()
    assert body["synthesizer"]["provider"] == "groq" and not gemini.called
    assert health["synthesizer"]["chain"] == ["groq", "gemini", "extractive"]


def test_keys_are_read_from_their_seed_names_and_hidden() -> None:
    env = {"GOOGLE_GENERATIVE_AI_API_KEY": GEMINI_KEY, "GROQ_API_KEY": GROQ_KEY}
    settings = Settings.from_env(environ=env, env_file=None)
    assert settings.gemini_api_key.get() == GEMINI_KEY
    assert settings.groq_api_key.get() == GROQ_KEY and not settings.cohere_api_key
    assert GEMINI_KEY not in repr(settings) and GROQ_KEY not in repr(settings)


class GeminiWithoutSDK(GeminiSynthesizer):
    def connect(self) -> Any:
        return import_extra("google.genai_not_installed", self.extra)


async def test_a_missing_sdk_names_the_extra_to_install(tmp_path: Path) -> None:
    link = GeminiWithoutSDK.from_settings(llm_settings(tmp_path))
    await link.open()
    reason = link.unavailable()
    assert reason is not None and "pip install 'knowledge-api[gemini]'" in reason
    assert link.health()["status"] == "unavailable"
    service = KnowledgeService(
        llm_settings(tmp_path), SQLiteStore(tmp_path / "k.db"), FakeEmbedder(), link
    )
    assert service.synthesizer.links == [link]
    with pytest.raises(ConfigurationError, match="must end with extractive"):
        SynthesisChain.from_settings(llm_settings(tmp_path, synthesizer="gemini"))


async def test_a_failing_provider_is_skipped_while_its_circuit_is_open(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    now = [1000.0]
    service = await started(llm_settings(tmp_path, llm_breaker_failures=2))
    service.synthesizer.clock = lambda: now[0]
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(503))
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
    request = query_params({"query": QUESTION})
    try:
        for _ in range(2):
            assert (await ask(service, request))["synthesizer"]["provider"] == "groq"
        assert gemini.call_count == 2
        body = await ask(service, request)  # open: groq answers without a call to gemini
        assert gemini.call_count == 2 and body["synthesizer"]["provider"] == "groq"
        [skip] = body["synthesizer"]["skipped"]
        assert "circuit open after 2 failures in a row, next try in 30 s" in skip["reason"]
        assert body["warnings"] and body["metrics"]["cache_hit"] is False
        report = (await service.health())["synthesizer"]["providers"]["gemini"]
        assert report["status"] == "failing" and report["circuit"] == "open"
        assert report["retry_in_s"] == 30.0

        now[0] += 31  # cool-down over: one try, which fails and opens the circuit again
        await ask(service, request)
        assert gemini.call_count == 3
        await ask(service, request)
        assert gemini.call_count == 3

        now[0] += 31  # the next try succeeds and closes the circuit
        gemini.mock(return_value=gemini_answer(["Back: WAV [1]."]))
        assert (await ask(service, request))["synthesizer"]["provider"] == "gemini"
        health = (await service.health())["synthesizer"]
        assert health["status"] == "ok" and "circuit" not in health["providers"]["gemini"]
    finally:
        await service.stop()


async def test_a_probe_in_flight_keeps_the_circuit_open_to_others(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    now = [1000.0]
    settings = llm_settings(tmp_path, llm_breaker_failures=1, gemini_timeout=1.0)
    service = await started(settings)
    chain = service.synthesizer
    chain.clock = lambda: now[0]
    gemini = mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(503))
    mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
    try:
        await ask(service, query_params({"query": QUESTION}))
        now[0] += 31
        hits = (await service.retrieve(QUESTION, 3, SearchFilters())).hits
        probe = chain.stream(QUESTION, hits)
        gemini.mock(return_value=httpx.Response(200, stream=Stream([], then="stall")))
        first = asyncio.create_task(anext(probe))  # the probe: waits on gemini
        async with asyncio.timeout(30):  # a guard against hanging only
            while gemini.call_count < 2:  # the probe is under way: it called gemini
                await asyncio.sleep(0.01)
        other = [event async for event in chain.stream(QUESTION, hits)]
        assert gemini.call_count == 2  # the second request did not call gemini
        outcome = other[-1][1]
        assert outcome.provider == "groq" and "circuit open" in outcome.skipped[0]["reason"]
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await probe.aclose()
    finally:
        await service.stop()


@pytest.mark.parametrize("value", ["-1"])
def test_breaker_settings_are_checked(value: str) -> None:
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_LLM_BREAKER_FAILURES"):
        Settings.from_env(environ={"KNOWLEDGE_LLM_BREAKER_FAILURES": value}, env_file=None)
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_LLM_BREAKER_COOLDOWN"):
        Settings.from_env(environ={"KNOWLEDGE_LLM_BREAKER_COOLDOWN": "0"}, env_file=None)


async def test_a_slow_trickle_is_cut_by_the_synthesis_deadline(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    """A provider sending a piece every 0.3 s never trips the per-piece timeout, but
    the whole answer may take only KNOWLEDGE_SYNTHESIS_DEADLINE; then the chain moves
    on, visibly, and Groq is not even called once the deadline has passed."""
    trickle = Stream([gemini_chunk("WAV ") for _ in range(40)], pause=0.3)
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(trickle))
    groq = mock.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
    service = build_service(llm_settings(tmp_path, synthesis_deadline=1.0))
    await service.start()
    try:
        await service.ingest(corpus())
        body = await ask(service, query_params({"query": QUESTION}))
    finally:
        await service.stop()
    assert body["synthesizer"]["provider"] == "extractive"
    gemini, skipped_groq = body["synthesizer"]["skipped"]
    assert "synthesis deadline of 1 s" in gemini["reason"]
    assert "deadline of 1 s has passed" in skipped_groq["reason"] and not groq.called
    assert len(body["warnings"]) == 2
    assert trickle.sent < 40  # cut after about 1 s of the 12 s it would take, not drained
