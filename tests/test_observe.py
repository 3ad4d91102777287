"""Request ids, request log lines, metrics and the liveness and readiness probes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.logs import (
    ACCESS,
    LINES,
    JSONFormatter,
    SplitHandler,
    TextFormatter,
    access_log,
    configure_logging,
    remove_split_handlers,
    request_fields,
    request_message,
)
from knowledge_api.models import DEFAULT_COLLECTION
from knowledge_api.redaction import Redactor
from knowledge_api.settings import Settings
from knowledge_api.web.metrics import Metrics, RequestDurations
from knowledge_api.web.observe import RequestObserver
from knowledge_api.web.redact import redacted_logs
from tests import providers
from tests.conftest import ask, corpus, make_settings, query_params
from tests.providers import GEMINI_GENERATE, GROQ_CHAT, gemini_error, groq_answer, llm_settings
from tests.test_errors import assert_error_shape

SECRET = "sk-live-do-not-log"
QUERY = {"query": "login timeout", "synthesize": False}


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "knowledge_api.access"]


@contextmanager
def app_logging(settings: Settings) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The app's own logging setup, writing to two buffers; pytest's handlers stay."""
    level = logging.getLogger().level
    stdout, stderr = io.StringIO(), io.StringIO()
    configure_logging(settings, stdout, stderr)
    try:
        yield stdout, stderr
    finally:
        remove_split_handlers()
        logging.getLogger().setLevel(level)


@pytest.fixture
def logs(settings: Settings) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    with app_logging(settings) as streams:
        yield streams


# -- request ids ---------------------------------------------------------------------


def test_a_valid_request_id_is_echoed(client: TestClient) -> None:
    response = client.get("/health", headers={"X-Request-ID": "edge-1.2:abc_D"})
    assert response.headers["x-request-id"] == "edge-1.2:abc_D"


@pytest.mark.parametrize("offered", ["", "has space", "x" * 129, "semi;colon", "<tag>", "a/b"])
def test_an_invalid_request_id_is_replaced(client: TestClient, offered: str) -> None:
    response = client.get("/health", headers={"X-Request-ID": offered})
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])


async def test_the_request_id_replaces_one_the_app_set(settings: Settings) -> None:
    async def app(scope: dict[str, object], receive: object, send: Any) -> None:
        headers = [(b"X-Request-ID", b"theirs"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request"}

    observer = RequestObserver(app, Metrics(build_service(settings)), settings)
    headers = [(b"x-request-id", b"mine-1")]
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": headers, "state": {}}
    await observer(scope, receive, send)
    assert sent[0]["headers"] == [(b"content-length", b"0"), (b"x-request-id", b"mine-1")]


def test_every_request_gets_a_new_id(client: TestClient) -> None:
    ids = {client.get("/livez").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_errors_carry_the_request_id_in_header_and_body(client: TestClient) -> None:
    unknown = client.get("/v2/nothing", headers={"X-Request-ID": "trace-404"})
    error = assert_error_shape(unknown, 404)
    assert unknown.headers["x-request-id"] == error["details"]["request_id"] == "trace-404"
    invalid = client.post("/v1/knowledge/query", json={"query": ""})
    error = assert_error_shape(invalid, 400)
    assert error["details"]["request_id"] == invalid.headers["x-request-id"]
    assert error["details"]["field"] == "query"


def test_an_unexpected_error_carries_the_request_id(settings: Settings) -> None:
    app = create_app(settings)

    async def broken() -> dict[str, object]:
        raise RuntimeError("boom")

    app.state.service.health = broken
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/health", headers={"X-Request-ID": "trace-500"})
    error = assert_error_shape(response, 500)
    assert response.headers["x-request-id"] == error["details"]["request_id"] == "trace-500"


# -- request log lines ---------------------------------------------------------------


def test_one_line_per_request_with_the_route_template(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client.get("/v1/knowledge/documents/abc-123")
    client.post("/v1/knowledge/query", json=QUERY)
    client.post("/v1/knowledge/query", json=QUERY)
    lines = access_lines(caplog)
    assert len(lines) == 3
    assert re.fullmatch(
        r"GET /v1/knowledge/documents/\{id\} 404 [\d.]+ms cache_hit=- key=-", lines[0]
    )
    assert "cache_hit=false" in lines[1] and "cache_hit=true" in lines[2]
    assert "abc-123" not in "\n".join(lines)


def test_text_lines_carry_the_request_id_and_never_a_secret(
    client: TestClient, logs: tuple[io.StringIO, io.StringIO]
) -> None:
    stdout, _ = logs
    headers = {"X-Request-ID": "trace-text", "Authorization": f"Bearer {SECRET}"}
    client.get("/v1/knowledge/documents/x", headers={**headers, "X-API-Key": SECRET})
    [line] = [line for line in stdout.getvalue().splitlines() if "knowledge_api.access" in line]
    assert " INFO knowledge_api.access [trace-text] GET /v1/knowledge/documents/{id} 404 " in line
    assert SECRET not in stdout.getvalue()


def test_json_lines(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, log_format="json")
    with app_logging(settings) as (stdout, stderr), TestClient(create_app(settings)) as client:
        client.get("/health", headers={"X-Request-ID": "trace-json", "Authorization": SECRET})
    lines = [json.loads(line) for line in stdout.getvalue().splitlines()]
    [access] = [line for line in lines if line["logger"] == "knowledge_api.access"]
    assert access["request_id"] == "trace-json" and access["level"] == "info"
    assert access["method"] == "GET" and access["route"] == "/health"
    assert access["status"] == 200 and access["ms"] >= 0
    assert access["cache_hit"] == "-" and access["key"] == "-"
    assert all(line["request_id"] == "-" for line in lines if line is not access)
    assert SECRET not in stdout.getvalue() + stderr.getvalue()


def test_info_goes_to_stdout_and_warnings_to_stderr(
    logs: tuple[io.StringIO, io.StringIO],
) -> None:
    stdout, stderr = logs
    log = logging.getLogger("knowledge_api.test")
    log.info("an info line")
    log.warning("a warning line")
    log.error("an error line")
    assert "an info line" in stdout.getvalue() and "an info line" not in stderr.getvalue()
    for line in ("a warning line", "an error line"):
        assert line in stderr.getvalue() and line not in stdout.getvalue()
    assert " [-] an info line" in stdout.getvalue()


# -- metrics -------------------------------------------------------------------------


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text."""
    for line in text.splitlines():
        metric, _, value = line.rpartition(" ")
        if metric.split("{")[0] == name and all(f'{k}="{v}"' in metric for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


def test_metrics_after_a_few_requests(client: TestClient) -> None:
    client.post("/v1/knowledge/query", json=QUERY)
    before = client.get("/metrics")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    hits = sample(before.text, "knowledge_cache_hits_total", tier="responses")
    client.post("/v1/knowledge/query", json=QUERY)  # tier 1 answers
    client.get("/v1/knowledge/documents/secret-id-1")
    client.get("/no/such/path")
    text = client.get("/metrics").text
    assert sample(text, "knowledge_cache_hits_total", tier="responses") == hits + 1
    assert sample(text, "knowledge_cache_misses_total", tier="embeddings") >= 1
    route = {"route": "/v1/knowledge/query", "method": "POST", "status": "200"}
    assert sample(text, "http_request_duration_seconds_count", **route) == 2
    assert sample(text, "http_request_duration_seconds_bucket", le="+Inf", **route) == 2
    assert sample(text, "http_request_duration_seconds_count", route="unmatched") == 1
    documents = {"route": "/v1/knowledge/documents/{id}", "status": "404"}
    assert sample(text, "http_request_duration_seconds_count", **documents) == 1
    assert sample(text, "knowledge_embedding_seconds_count", kind="query") == 1
    assert sample(text, "knowledge_embedding_seconds_count", kind="documents") >= 1
    assert sample(text, "knowledge_search_seconds_count") == 1
    assert sample(text, "knowledge_documents", collection=DEFAULT_COLLECTION) == len(corpus())
    assert sample(text, "knowledge_provider_circuit_open", provider="extractive") == 0
    assert "secret-id-1" not in text and "/no/such/path" not in text
    assert "login timeout" not in text


def test_request_durations_expose_what_a_prometheus_histogram_would() -> None:
    """Same observations, same exposition: names, labels, buckets, counts and sums."""
    observations = [
        ("/v1/knowledge/query", "POST", 200, 0.0004),
        ("/v1/knowledge/query", "POST", 200, 0.005),  # on a bound: counted in it
        ("/v1/knowledge/query", "POST", 200, 0.3),
        ("unmatched", "GET", 404, 12.0),  # beyond the last bound: +Inf only
        ("/v1/knowledge/query", "POST", 401, 0.02),
    ]
    reference_registry, registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(
        RequestDurations.NAME, RequestDurations.HELP, RequestDurations.LABELS,
        registry=reference_registry,
    )  # fmt: skip
    durations = RequestDurations()
    registry.register(durations)
    for route, method, status, seconds in observations:
        reference.labels(route, method, str(status)).observe(seconds)
        durations.observe(route, method, status, seconds)

    def samples(of: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        return [
            (s.name, s.labels, s.value)
            for metric in of.collect()
            for s in metric.samples
            if not s.name.endswith("_created")
        ]

    assert samples(registry) == samples(reference_registry)
    assert len(samples(registry)) == 3 * (len(RequestDurations.BOUNDS) + 2)
    created = [s for m in registry.collect() for s in m.samples if s.name.endswith("_created")]
    assert len(created) == 3 and all(s.value > 0 for s in created)
    exposed, expected = generate_latest(registry), generate_latest(reference_registry)
    assert exposed.split(b"_created")[0] == expected.split(b"_created")[0]
    assert (
        registry.get_sample_value(
            "http_request_duration_seconds_bucket",
            {"route": "/v1/knowledge/query", "method": "POST", "status": "200", "le": "0.005"},
        )
        == 2
    )


async def test_provider_failures_and_the_open_circuit_are_counted(tmp_path: Path) -> None:
    service = build_service(llm_settings(tmp_path, llm_breaker_failures=1))
    metrics = Metrics(service)
    service.observe(metrics.observer)
    await service.start()
    try:
        await service.ingest(corpus())
        for router in providers.mocked():
            router.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_error(503))
            router.post(GROQ_CHAT).mock(return_value=groq_answer(["Groq: WAV [1]."]))
            await ask(service, query_params({"query": "Which audio formats?"}))
        text = (await metrics.exposition()).decode()
    finally:
        await service.stop()
    assert sample(text, "knowledge_provider_failures_total", provider="gemini") == 1
    assert sample(text, "knowledge_provider_circuit_open", provider="gemini") == 1
    assert sample(text, "knowledge_provider_circuit_open", provider="groq") == 0
    assert sample(text, "knowledge_synthesis_seconds_count", provider="gemini") == 1
    assert sample(text, "knowledge_synthesis_seconds_count", provider="groq") == 1


def test_each_app_has_its_own_registry(client: TestClient, settings: Settings) -> None:
    client.get("/health")
    with TestClient(create_app(settings)) as other:
        text = other.get("/metrics").text
    assert 'route="/health"' not in text


def test_the_metrics_token_opens_metrics_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, metrics_token=Secret("scrape-me"))
    with TestClient(create_app(settings)) as client:
        scraper = {"Authorization": "Bearer scrape-me"}
        assert client.get("/metrics", headers=scraper).status_code == 200
        for headers in ({}, {"Authorization": "Bearer scrape-you"}, {"Authorization": "scrape-me"}):
            error = assert_error_shape(client.get("/metrics", headers=headers), 401)
            assert error["type"] == "unauthorized"


def test_the_token_check_is_left_for_the_access_control(client: TestClient) -> None:
    """No token configured: /metrics is an admin route like the others."""
    assert client.get("/metrics").status_code == 200


# -- probes --------------------------------------------------------------------------


def test_livez_and_readyz(client: TestClient) -> None:
    livez = client.get("/livez")
    assert livez.status_code == 200 and livez.json() == {"status": "alive"}
    readyz = client.get("/readyz")
    assert readyz.status_code == 200 and readyz.json() == {"status": "ready"}


def test_readyz_names_an_unavailable_store(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    settings = make_settings(tmp_path, db_path=tmp_path / "file" / "knowledge.db")
    with TestClient(create_app(settings)) as client:
        assert client.get("/livez").status_code == 200
        error = assert_error_shape(client.get("/readyz"), 503)
    assert error["type"] == "not_ready" and "store" in error["details"]
    assert "embedder" not in error["details"] and "store" in error["message"]


def test_readyz_names_an_embedder_not_loaded(client: TestClient) -> None:
    client.app.state.service.embedder_ready = False  # type: ignore[attr-defined]
    error = assert_error_shape(client.get("/readyz"), 503)
    assert error["details"]["embedder"] == "not loaded" and "store" not in error["details"]


def test_the_probes_are_public_routes() -> None:
    from knowledge_api.routes import ADMIN, PUBLIC, ROUTES

    scopes = {route.path: route.contract.scope for route in ROUTES}
    assert scopes["/livez"] == scopes["/readyz"] == PUBLIC and scopes["/metrics"] == ADMIN


async def test_a_client_gone_before_its_body_arrived_is_one_line(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    app = create_app(settings)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/knowledge/query",
        "raw_path": b"/v1/knowledge/query",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"50")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 3006),
        "state": {},
    }

    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        pass

    await app(scope, receive, send)
    assert [(r.name, r.levelno) for r in caplog.records] == [("knowledge_api.access", logging.INFO)]
    assert (
        caplog.records[0]
        .getMessage()
        .endswith("client disconnected before the end of the response")
    )


# -- request lines written without a record -------------------------------------------


@contextmanager
def only_the_apps_handlers() -> Iterator[None]:
    """Root as `knowledge-api serve` has it: no log capture beside the app's handlers."""
    root = logging.getLogger()
    others = [h for h in root.handlers if not isinstance(h, SplitHandler)]
    for handler in others:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in others:
            root.addHandler(handler)


def served_lines(settings: Settings, alone: bool) -> list[str]:
    """Access lines of a miss, a hit and a 404, times and durations blanked."""
    direct = only_the_apps_handlers() if alone else contextlib.nullcontext()
    # written directly, the lines never reach `logging`
    unused = mock.patch.object(access_log, "info", side_effect=AssertionError) if alone else direct
    with app_logging(settings) as (stdout, _), TestClient(create_app(settings)) as client:
        with direct, unused:
            for _ in range(2):
                client.post("/v1/knowledge/query", json=QUERY, headers={"X-Request-ID": "r-1"})
            client.get("/v1/knowledge/documents/x", headers={"X-Request-ID": "r-2"})
        assert LINES.handler is not None
    access = [line for line in stdout.getvalue().splitlines() if "knowledge_api.access" in line]
    blanked = [re.sub(r"\d+(\.\d+)?ms|\"ms\":[\d.]+", "MS", line) for line in access]
    return [re.sub(r"^\S+ \S+ |\"time\":\"[^\"]+\"", "TIME ", line) for line in blanked]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_request_lines_written_directly_read_as_logging_writes_them(
    tmp_path: Path, log_format: str
) -> None:
    settings = make_settings(tmp_path, log_format=log_format)
    direct, through_logging = served_lines(settings, True), served_lines(settings, False)
    assert direct == through_logging and len(direct) == 3
    assert "cache_hit" in direct[1] and "r-2" in direct[2]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("formatter", [JSONFormatter(), TextFormatter()])
def test_request_lines_from_their_parts_read_as_the_formatter_makes_them(
    formatter: JSONFormatter | TextFormatter, masked: bool
) -> None:
    """With a secret to mask (found in no line) and without: each way of making them."""
    created = 1_795_000_000.0457
    waiting = [
        (created, "r-1", "POST", "/v1/knowledge/query", 200, 0.3, True, "reader", False),
        (created, "r-2", "POST", "/v1/knowledge/query", 200, 12.0, False, "-", False),
        (created, "r-3", "GET", "/v1/knowledge/documents/{id}", 404, 1234.5, None, "-", False),
        (created, "r-4", "GET", 'odd"route\\', 500, 0.1, None, "k", False),
        (created, "r-5", "POST", "/v1/knowledge/query", 200, 3.7, None, "reader", True),
        (created, "r-6", "POST", "/v1/knowledge/query", 200, 2.3456, True, "reader", False),
    ]
    lines = formatter.request_lines(waiting, [Redactor([SECRET])] if masked else [])
    for line, entry in zip(lines, waiting, strict=True):
        request_id, fields = entry[1], request_fields(entry)
        record = logging.LogRecord(ACCESS, logging.INFO, "", 0, request_message(fields), (), None)
        record.created, record.msecs = created, 45.0
        record.request_id, record.http = request_id, fields  # type: ignore[attr-defined]
        assert line == formatter.format(record)
    if isinstance(formatter, JSONFormatter):
        assert json.loads(lines[3])["route"] == 'odd"route\\'
        assert json.loads(lines[4])["client"] == "disconnected"
        assert json.loads(lines[5])["ms"] == 2.3  # rounded as it is written


def test_request_lines_are_masked_and_left_to_logging_under_foreign_filters(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    with app_logging(settings) as (stdout, _), only_the_apps_handlers():
        handler = LINES.handler
        assert handler is not None
        with redacted_logs(Redactor([SECRET])):
            LINES.request("r-3", "GET", "/x", 200, 1.0, None, SECRET)
        LINES.flush()  # a batch goes the way its first line went
        foreign = logging.Filter("somewhere.else")  # lets no access line through
        handler.addFilter(foreign)
        try:
            LINES.request("r-4", "GET", "/x", 200, 1.0, None, "k")
        finally:
            handler.removeFilter(foreign)
    assert "[r-3] GET /x 200 1.0ms cache_hit=- key=" + "*" * len(SECRET) in stdout.getvalue()
    assert SECRET not in stdout.getvalue() and "r-4" not in stdout.getvalue()


def test_direct_request_lines_are_written_at_once_without_an_event_loop(
    tmp_path: Path,
) -> None:
    """Nothing would write them later (a command, or the process ending)."""
    with app_logging(make_settings(tmp_path)) as (stdout, _), only_the_apps_handlers():
        LINES.request("r-1", "GET", "/a", 200, 1.0, None, "-")
        assert "[r-1] GET /a 200 1.0ms cache_hit=- key=-" in stdout.getvalue()
        assert not LINES.waiting


async def test_direct_request_lines_wait_a_moment_and_come_before_other_lines(
    tmp_path: Path,
) -> None:
    with app_logging(make_settings(tmp_path)) as (stdout, _), only_the_apps_handlers():
        LINES.request("r-1", "GET", "/a", 200, 1.0, None, "-")
        assert stdout.getvalue() == ""  # written with the lines that follow it closely
        await asyncio.sleep(LINES.FLUSH_S * 4)
        assert "GET /a" in stdout.getvalue()
        LINES.request("r-2", "GET", "/b", 200, 1.0, None, "-")
        logging.getLogger("knowledge_api").info("then this")
        first, second, third = stdout.getvalue().splitlines()
        assert "[r-1] GET /a" in first and "[r-2] GET /b" in second and "then this" in third
