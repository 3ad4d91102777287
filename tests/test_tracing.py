"""OpenTelemetry traces: a span per stage, the caller's trace continued, the providers'
calls carrying it on, spans exported over OTLP/HTTP to a collector the tests run, and a
collector that is down costing requests nothing."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.testclient import TestClient

from knowledge_api import tracing
from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.errors import ConfigurationError
from knowledge_api.ingest import pipeline
from knowledge_api.settings import Settings
from knowledge_api.web.traces import TraceRequests
from tests import providers
from tests.conftest import corpus, make_settings
from tests.otlp_receiver import OtlpReceiver
from tests.test_access import bearer, make_key
from tests.test_mcp import connected, load, serving, text_of

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
ASK = {"query": "login timeout", "synthesize": False}
STAGES = {
    "knowledge.cache",
    "knowledge.embed",
    "knowledge.search",
    "knowledge.search.vector",
    "knowledge.search.keyword",
    "knowledge.search.fusion",
    "knowledge.search.feedback",
}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()
    tracing.disable()


def traced_app(settings: Settings, exporter: InMemorySpanExporter) -> Any:
    tracing.configure(settings, exporter)
    return create_app(settings)


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [parent] = [s for s in spans if s.context.span_id == span.parent.span_id]
    return parent


@contextmanager
def traced_client(settings: Settings, exporter: InMemorySpanExporter) -> Iterator[TestClient]:
    """A client of the app traced into `exporter`, the corpus loaded and its spans
    cleared: what the test's requests trace alone."""
    app = traced_app(settings, exporter)
    client = TestClient(app)
    client.__enter__()
    try:
        client.portal.call(app.state.service.ingest, corpus())
        exporter.clear()
        yield client
    finally:
        client.__exit__(None, None, None)


# -- off ------------------------------------------------------------------------------


def test_off_without_an_endpoint_no_span_no_middleware(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    assert tracing.traces_endpoint(settings) == ""
    assert tracing.configure(settings) is None and tracing.active() is None
    assert tracing.span("knowledge.embed") is tracing.NO_SPAN
    app = create_app(settings)
    assert TraceRequests not in [m.cls for m in app.user_middleware]


def test_the_endpoint_alone_turns_it_on_and_the_variables_are_the_standard_ones(
    tmp_path: Path,
) -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored,deployment.environment.name=prod%20eu",
        "OTEL_SERVICE_NAME": "kb-eu",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    settings = Settings.from_env(environ=environ, env_file=None)
    assert tracing.traces_endpoint(settings) == "http://collector:4318/v1/traces"
    signal = settings.replace(otel_traces_endpoint="http://other:4318/spans")
    assert tracing.traces_endpoint(signal) == "http://other:4318/spans"
    assert tracing.traces_endpoint(settings.replace(otel_sdk_disabled=True)) == ""
    resource = tracing.resource(settings).attributes
    assert resource["service.name"] == "kb-eu"  # OTEL_SERVICE_NAME wins
    assert resource["deployment.environment.name"] == "prod eu"
    assert resource["telemetry.sdk.language"] == "python"
    sampler = tracing.sampler(settings)
    assert "ParentBased" in type(sampler).__name__ and "0.25" in sampler.get_description()
    unnamed = tracing.resource(settings.replace(otel_service_name="")).attributes
    assert unnamed["service.name"] == "ignored"
    default = tracing.resource(make_settings(tmp_path)).attributes
    assert default["service.name"] == "knowledge-api"


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_TRACES_SAMPLER", "jaeger_remote", "OTEL_TRACES_SAMPLER"),
        ("OTEL_TRACES_SAMPLER_ARG", "2", "OTEL_TRACES_SAMPLER_ARG"),
        ("OTEL_TRACES_SAMPLER_ARG", "half", "OTEL_TRACES_SAMPLER_ARG"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "OTEL_BSP_MAX_QUEUE_SIZE"),
    ],
)
def test_a_bad_tracing_setting_fails_at_start_naming_it(
    variable: str, value: str, named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Settings.from_env(environ={variable: value}, env_file=None)


# -- spans of a query -------------------------------------------------------------------


def test_a_query_continues_the_callers_trace_with_a_span_per_stage(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with traced_client(make_settings(tmp_path), exporter) as client:
        response = client.post(
            "/v1/knowledge/query",
            json=ASK,
            headers={"traceparent": TRACEPARENT, "X-Request-ID": "req-7"},
        )
    assert response.status_code == 200
    spans = list(exporter.get_finished_spans())
    named = by_name(spans)
    assert set(named) >= STAGES | {"POST /v1/knowledge/query"}
    server = named["POST /v1/knowledge/query"]
    assert server.kind is SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    assert all(format(s.context.trace_id, "032x") == TRACE_ID for s in spans)
    attributes = server.attributes or {}
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/knowledge/query"
    assert attributes["http.response.status_code"] == 200
    assert attributes["knowledge.request_id"] == "req-7"
    assert attributes["knowledge.key_name"]
    # the stages hang where they run
    assert parent_of(named["knowledge.cache"], spans) is server
    assert named["knowledge.cache"].attributes == {
        "knowledge.cache.tier": 1,
        "knowledge.cache.hit": False,
    }
    for stage in ("knowledge.embed", "knowledge.search"):
        assert parent_of(named[stage], spans).name == "knowledge.cache"
    for stage in ("vector", "keyword", "fusion", "feedback"):
        assert parent_of(named[f"knowledge.search.{stage}"], spans).name == "knowledge.search"
    embed = named["knowledge.embed"].attributes or {}
    assert embed["knowledge.embed.batch_size"] == 1
    assert embed["gen_ai.operation.name"] == "embeddings"
    assert embed["gen_ai.request.model"] == "fake:hash-64"
    vector = named["knowledge.search.vector"].attributes or {}
    assert vector["db.system.name"] == "sqlite"
    assert vector["db.operation.name"] == "vector_search"
    assert vector["db.collection.name"] == "default"
    keyword = named["knowledge.search.keyword"].attributes or {}
    assert keyword["db.operation.name"] == "keyword_search" and keyword["knowledge.search.hits"] > 0
    assert named["knowledge.search.fusion"].attributes["knowledge.fusion.method"] == "convex"  # type: ignore[index]
    # the query's text appears nowhere unless asked for
    assert not any("login timeout" in str(s.attributes) for s in spans)


def test_the_query_text_is_an_attribute_only_when_asked_for(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with traced_client(make_settings(tmp_path, trace_query_text=True), exporter) as client:
        assert client.post("/v1/knowledge/query", json=ASK).status_code == 200
    named = by_name(list(exporter.get_finished_spans()))
    assert named["knowledge.search"].attributes["knowledge.query.text"] == "login timeout"  # type: ignore[index]


def test_a_hit_is_one_request_span_saying_so_and_a_request_without_traceparent_starts_a_trace(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with traced_client(make_settings(tmp_path), exporter) as client:
        client.post("/v1/knowledge/query", json=ASK)
        client.post("/v1/knowledge/query", json=ASK)  # remembered by the hit path now
        exporter.clear()
        assert client.post("/v1/knowledge/query", json=ASK).json()["metrics"]["cache_hit"]
    [server] = exporter.get_finished_spans()
    assert server.parent is None
    assert server.attributes["knowledge.cache.hit"] is True  # type: ignore[index]
    assert server.attributes["http.route"] == "/v1/knowledge/query"  # type: ignore[index]


def test_the_key_name_is_an_attribute_and_the_token_never(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    settings = make_settings(tmp_path, auth="keys")
    token = asyncio.run(make_key(settings, "reader", ["read"]))
    with traced_client(settings, exporter) as client:
        assert client.post("/v1/knowledge/query", json=ASK, headers=bearer(token)).is_success
        refused = client.post("/v1/knowledge/query", json=ASK)
    assert refused.status_code == 401
    spans = list(exporter.get_finished_spans())
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    assert [s.attributes["http.response.status_code"] for s in servers] == [200, 401]  # type: ignore[index]
    assert servers[0].attributes["knowledge.key_name"] == "reader"  # type: ignore[index]
    assert not any(token in str(s.attributes) for s in spans)


# -- synthesis, rerank and the providers' HTTP calls -----------------------------------


def test_each_synthesis_link_is_a_span_and_its_http_call_carries_the_trace(
    tmp_path: Path, exporter: InMemorySpanExporter, mock: respx.MockRouter
) -> None:
    gemini = mock.post(url__regex=providers.GEMINI_GENERATE).mock(
        return_value=providers.gemini_error(500)
    )
    groq = mock.post(providers.GROQ_CHAT).mock(
        return_value=providers.groq_answer(["Raise the gateway timeout [1]."], tokens=77)
    )
    with traced_client(providers.llm_settings(tmp_path), exporter) as client:
        body = {"query": "login timeout", "synthesize": True}
        answered = client.post(
            "/v1/knowledge/query", json=body, headers={"traceparent": TRACEPARENT}
        )
    assert answered.json()["synthesizer"]["provider"] == "groq"
    spans = list(exporter.get_finished_spans())
    links = [s for s in spans if s.name == "knowledge.synthesis.link"]
    assert [s.attributes["gen_ai.provider.name"] for s in links] == ["gemini", "groq"]  # type: ignore[index]
    failed, answering = links
    assert failed.status.status_code is StatusCode.ERROR
    assert "500" in failed.attributes["knowledge.synthesis.fallback_reason"]  # type: ignore[index, operator]
    assert answering.attributes["gen_ai.request.model"] == "llama-3.3-70b-versatile"  # type: ignore[index]
    assert answering.attributes["knowledge.synthesis.tokens_used"] == 77  # type: ignore[index]
    assert "gemini failed" in answering.attributes["knowledge.synthesis.fallback_reason"]  # type: ignore[index, operator]
    # each provider call: a CLIENT span under its link, and the traceparent it sent names it
    for link, route in ((failed, gemini), (answering, groq)):
        [call] = [
            s
            for s in spans
            if s.kind is SpanKind.CLIENT and s.parent and s.parent.span_id == link.context.span_id
        ]
        assert call.attributes["http.request.method"] == "POST"  # type: ignore[index]
        assert call.attributes["server.address"] in ("gemini.test", "groq.test")  # type: ignore[index]
        assert "key" not in str(call.attributes["url.full"])  # type: ignore[index]
        sent = route.calls.last.request.headers["traceparent"]
        assert sent == f"00-{TRACE_ID}-{format(call.context.span_id, '016x')}-01"
    codes = [s.attributes["http.response.status_code"] for s in spans if s.kind is SpanKind.CLIENT]  # type: ignore[index]
    assert codes == [500, 200]


def test_a_skipped_link_says_why(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    # no LLM key: gemini and groq skipped
    with traced_client(make_settings(tmp_path), exporter) as client:
        client.post("/v1/knowledge/query", json={"query": "login timeout"})
    links = [s for s in exporter.get_finished_spans() if s.name == "knowledge.synthesis.link"]
    reasons = {
        s.attributes["gen_ai.provider.name"]: s.attributes.get("knowledge.synthesis.skipped")
        for s in links
    }  # type: ignore[index, union-attr]
    assert reasons["gemini"] == "missing key: set GOOGLE_GENERATIVE_AI_API_KEY"
    assert reasons["extractive"] is None


def test_rerank_is_a_span_and_cohere_gets_the_trace(
    tmp_path: Path, exporter: InMemorySpanExporter, mock: respx.MockRouter
) -> None:
    rerank = mock.post(providers.COHERE_RERANK).mock(return_value=providers.cohere_ranking([1, 0]))
    settings = make_settings(
        tmp_path,
        reranker="cohere",
        cohere_api_key=Secret(providers.COHERE_KEY),
        cohere_base_url=providers.COHERE_URL,
        rerank_top=2,
    )
    with traced_client(settings, exporter) as client:
        assert client.post("/v1/knowledge/query", json={**ASK, "threshold": 0}).is_success
    spans = list(exporter.get_finished_spans())
    named = by_name(spans)
    reranked = named["knowledge.rerank"]
    assert reranked.attributes["knowledge.rerank.provider"] == "cohere"  # type: ignore[index]
    call = next(s for s in spans if s.kind is SpanKind.CLIENT)
    assert parent_of(call, spans) is reranked
    assert format(call.context.span_id, "016x") in rerank.calls.last.request.headers["traceparent"]


# -- chat, MCP, ingestion --------------------------------------------------------------


def test_the_chat_routes_are_traced_like_a_query(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with traced_client(make_settings(tmp_path, answer_threshold="0.3"), exporter) as client:
        body = {"model": "knowledge", "messages": [{"role": "user", "content": "login timeout?"}]}
        assert client.post("/v1/chat/completions", json=body).is_success
    spans = list(exporter.get_finished_spans())
    named = by_name(spans)
    server = named["POST /v1/chat/completions"]
    assert {"knowledge.embed", "knowledge.search.vector", "knowledge.synthesis.link"} <= set(named)
    assert all(s.context.trace_id == server.context.trace_id for s in spans)


async def test_an_mcp_tool_call_is_a_span_under_its_http_request(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    settings = make_settings(tmp_path, answer_threshold="0.3")
    await load(settings)
    tracing.configure(settings, exporter)
    async with serving(settings) as app, connected(app) as client:
        exporter.clear()
        found = await client.call_tool("search", {"query": "login timeout", "limit": 2})
        assert not found.is_error, text_of(found)
    spans = list(exporter.get_finished_spans())
    [tool] = [s for s in spans if s.name == "tools/call search"]
    assert tool.attributes["gen_ai.tool.name"] == "search"  # type: ignore[index]
    assert tool.attributes["mcp.method.name"] == "tools/call"  # type: ignore[index]
    assert parent_of(tool, spans).name == "POST /mcp"
    search = next(s for s in spans if s.name == "knowledge.search")
    assert search.context.trace_id == tool.context.trace_id


async def test_an_ingest_outside_a_request_is_a_trace_per_batch(
    tmp_path: Path, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "BATCH_DOCUMENTS", 4)
    settings = make_settings(tmp_path)
    tracing.configure(settings, exporter)
    service = build_service(settings)
    await service.start()
    try:
        await service.ingest(corpus())  # six documents: two batches
    finally:
        await service.stop()
    spans = list(exporter.get_finished_spans())
    batches = [s for s in spans if s.name == "knowledge.ingest.batch"]
    assert [b.attributes["knowledge.documents"] for b in batches] == [4, 2]  # type: ignore[index]
    assert all(b.parent is None for b in batches)
    assert batches[0].context.trace_id != batches[1].context.trace_id
    for batch in batches:
        inside = {s.name for s in spans if s.parent and s.parent.span_id == batch.context.span_id}
        assert inside == {"knowledge.embed", "knowledge.index"}
        assert batch.attributes["knowledge.chunks.embedded"] > 0  # type: ignore[index, operator]
    embed = next(s for s in spans if s.name == "knowledge.embed")
    assert embed.attributes["knowledge.embed.kind"] == "documents"  # type: ignore[index]


# -- OTLP/HTTP to a collector -----------------------------------------------------------


def test_spans_reach_an_otlp_http_collector_as_protobuf_in_one_tree(tmp_path: Path) -> None:
    with OtlpReceiver() as collector:
        settings = make_settings(
            tmp_path, otel_endpoint=collector.url, otel_resource_attributes="team=search"
        )
        app = create_app(settings)
        try:
            with TestClient(app) as client:
                client.portal.call(app.state.service.ingest, corpus())
                headers = {"traceparent": TRACEPARENT}
                assert client.post("/v1/knowledge/query", json=ASK, headers=headers).is_success
            received = collector.wait_for({"POST /v1/knowledge/query", *STAGES})
        finally:
            tracing.disable()
    assert set(collector.paths) == {"/v1/traces"}
    assert set(collector.content_types) == {"application/x-protobuf"}
    trace = [s for s in received if s.trace_id == TRACE_ID]
    [root] = [s for s in trace if s.name == "POST /v1/knowledge/query"]
    assert root.parent_id == PARENT_ID and root.resource["service.name"] == "knowledge-api"
    assert root.resource["team"] == "search"
    ids = {s.span_id for s in trace}
    assert all(s.parent_id in ids for s in trace if s is not root)  # one tree
    assert all(root.start_ns <= s.start_ns and s.end_ns <= root.end_ns for s in trace)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("collector", ["down", "hung"])
def test_a_collector_down_or_hung_fails_no_request_and_dropped_spans_are_counted(
    tmp_path: Path, collector: str
) -> None:
    with OtlpReceiver(stall=True) as hung:
        url = f"http://127.0.0.1:{closed_port()}" if collector == "down" else hung.url
        settings = make_settings(
            tmp_path, otel_endpoint=url, otel_bsp_max_queue_size=8, otel_timeout=1.0
        )
        before = dict(tracing.DROPPED.counts)
        app = create_app(settings)
        try:
            with TestClient(app) as client:
                client.portal.call(app.state.service.ingest, corpus())
                for n in range(30):
                    body = {"query": f"login timeout {n}", "synthesize": False}
                    assert client.post("/v1/knowledge/query", json=body).status_code == 200
                metrics = client.get("/metrics").text
        finally:
            tracing.disable()
    assert tracing.DROPPED.counts["queue_full"] > before["queue_full"]
    assert 'knowledge_trace_spans_dropped_total{reason="queue_full"}' in metrics


def test_metrics_say_nothing_of_traces_when_off(client: TestClient) -> None:
    assert "knowledge_trace_spans_dropped" not in client.get("/metrics").text


def test_a_collector_refusing_counts_the_batch_as_failed() -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    class Refusing:
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.FAILURE

    before = tracing.DROPPED.counts["export_failed"]
    assert tracing.CountingExporter(Refusing()).export([1, 2, 3]) is SpanExportResult.FAILURE
    assert tracing.DROPPED.counts["export_failed"] == before + 3


def test_outgoing_calls_keep_the_clients_own_transport(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    client = httpx.AsyncClient()
    assert tracing.traced_client(client) is client
    own = client._transport
    tracing.configure(make_settings(tmp_path), exporter)
    traced = tracing.traced_client(httpx.AsyncClient())
    assert type(traced._transport).__name__ == "Traced" and own is not traced._transport


def test_knowledge_api_ingest_sends_a_trace_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from knowledge_api.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipeline, "BATCH_DOCUMENTS", 2)
    (tmp_path / "notes").mkdir()
    for n in range(3):
        note = tmp_path / "notes" / f"{n}.md"
        note.write_text(f"# Note {n}\n\nThe gateway timeout is {n} minutes.")
    with OtlpReceiver() as collector:
        monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
        monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
        assert main(["ingest", "notes"]) == 0  # one source of three documents
        assert tracing.active() is None  # the command's tracing ended with it
        spans = collector.wait_for({"knowledge.ingest.batch", "knowledge.index"})
    batches = [s for s in spans if s.name == "knowledge.ingest.batch"]
    assert sorted(b.attributes["knowledge.documents"] for b in batches) == [1, 2]
    assert all(b.parent_id == "" for b in batches) and len({b.trace_id for b in batches}) == 2
    assert "3 documents indexed" in capsys.readouterr().out


def test_a_streamed_query_traces_each_sources_own_search(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with traced_client(make_settings(tmp_path), exporter) as client:
        body = {**ASK, "stream": True, "sources": ["jira", "git"]}
        with client.stream("POST", "/v1/knowledge/query", json=body) as response:
            assert "event: done" in "".join(response.iter_text())
    spans = list(exporter.get_finished_spans())
    keyword = [s for s in spans if s.name == "knowledge.search.keyword"]
    searched = sorted(tuple(s.attributes["knowledge.search.sources"]) for s in keyword)  # type: ignore[arg-type, index]
    assert searched == [("git",), ("git", "jira"), ("jira",)]  # each source alone, and fused
    server = next(s for s in spans if s.kind is SpanKind.SERVER)
    assert all(s.context.trace_id == server.context.trace_id for s in spans)
