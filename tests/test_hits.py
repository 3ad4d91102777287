"""The hit path of POST /v1/knowledge/query (routes/hot.py): a repeated body answered
from its rendered tier-1 entry, exactly as the route would answer it, for callers the
route would admit, and never after the store changed."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.errors import BackendConnectionError
from knowledge_api.logs import LINES
from knowledge_api.models import Document
from knowledge_api.routes import hot, query
from knowledge_api.routes.hot import QueryHits
from knowledge_api.service import Served
from knowledge_api.settings import Settings
from knowledge_api.web.observe import RequestObserver
from tests.conftest import corpus, ingested_client, make_settings
from tests.test_access import bearer, error_of, make_key
from tests.test_observe import app_logging

QUERY = "/v1/knowledge/query"
ASK = {"query": "login timeout", "synthesize": False}
RAW = orjson.dumps(ASK)
JSON = {"content-type": "application/json"}


def hits_of(client: TestClient) -> QueryHits:
    """The app's QueryHits middleware (built by Starlette when the app first ran)."""
    layer: Any = client.app.middleware_stack  # type: ignore[attr-defined]
    while not isinstance(layer, QueryHits):
        layer = layer.app
    return layer


def post(client: TestClient, body: bytes = RAW, **headers: str) -> Any:
    return client.post(QUERY, content=body, headers={**JSON, **headers})


@pytest.fixture
def loaded_client(settings: Settings) -> Iterator[TestClient]:
    yield from ingested_client(settings, corpus())


def test_a_repeated_body_is_answered_by_the_hit_path_as_the_route_renders_a_hit(
    loaded_client: TestClient,
) -> None:
    miss = post(loaded_client)
    assert miss.status_code == 200 and miss.json()["metrics"]["cache_hit"] is False
    rendered = hits_of(loaded_client).rendered[RAW]
    hit = post(loaded_client)
    assert hit.status_code == 200
    assert hit.headers["content-type"] == "application/json"
    assert int(hit.headers["content-length"]) == len(hit.content)
    assert len(hit.headers["x-request-id"]) == 32
    body = hit.json()
    assert body["results"] == miss.json()["results"]
    # the route's own rendering of the same tier-1 value, as a hit
    expected = query.render(Served(rendered.value, True, 0.0))
    assert body["metrics"].pop("total_ms") >= 0
    expected["metrics"].pop("total_ms")
    assert body == expected
    ranking = {
        "fusion": "convex",
        "vector_weight": 0.8,
        "prf": True,
        "recency": None,
        "reranker": "none",
    }
    assert body["metrics"] == {
        "cache_hit": True,
        "embedding_ms": 0.0,
        "search_ms": 0.0,
        "ranking": ranking,
    }
    assert miss.json()["metrics"]["ranking"] == ranking  # what the computed answer said
    service = loaded_client.app.state.service  # type: ignore[attr-defined]
    assert service.caches.responses.hits == 1  # counted in tier 1's statistics too


def test_the_hit_path_serves_nothing_the_store_no_longer_holds(
    loaded_client: TestClient,
) -> None:
    ask = {"query": "zebra migration handbook", "synthesize": False, "threshold": 0.0}
    raw = orjson.dumps(ask)
    before = post(loaded_client, raw).json()
    assert raw in hits_of(loaded_client).rendered
    document = Document("knowledge", "KB-zebra", "The zebra migration handbook: move herds.")
    loaded_client.portal.call(loaded_client.app.state.service.ingest, [document])  # type: ignore[attr-defined]
    after = post(loaded_client, raw).json()
    assert after["metrics"]["cache_hit"] is False
    assert after["results"][0]["source_id"] == "KB-zebra"
    assert after["results"] != before["results"]


def test_streamed_and_other_bodies_are_never_taken_for_hits(loaded_client: TestClient) -> None:
    streamed = orjson.dumps({**ASK, "stream": True})
    assert post(loaded_client, streamed).status_code == 200
    assert post(loaded_client, streamed).headers["content-type"].startswith("text/event-stream")
    assert streamed not in hits_of(loaded_client).rendered
    assert post(loaded_client, b'{"query": ""}').status_code == 400
    assert not hits_of(loaded_client).rendered
    # the same query written differently is a tier-1 hit, through the route
    post(loaded_client)
    spaced = orjson.dumps({"synthesize": False, "query": "Login   timeout"})
    assert post(loaded_client, spaced).json()["metrics"]["cache_hit"] is True
    # a body that is not declared JSON gets the route's 415, even when it was a hit
    refused = loaded_client.post(QUERY, content=RAW, headers={"content-type": "text/plain"})
    assert error_of(refused, 415)["type"] == "unsupported_media_type"


@pytest.fixture
async def keyed(tmp_path: Path) -> tuple[Settings, str, str, str]:
    settings = make_settings(tmp_path, auth="keys")
    reader = await make_key(settings, "reader", ["read"])
    other = await make_key(settings, "elsewhere", ["read"], ("other",))
    writer = await make_key(settings, "writer", ["write"])
    return settings, reader, other, writer


def test_callers_the_route_would_refuse_are_refused_on_a_hit(
    keyed: tuple[Settings, str, str, str],
) -> None:
    settings, reader, other, writer = keyed
    with TestClient(create_app(settings)) as client:
        assert post(client, **bearer(reader)).json()["metrics"]["cache_hit"] is False
        assert RAW in hits_of(client).rendered
        assert post(client, **bearer(reader)).json()["metrics"]["cache_hit"] is True
        assert "API key is required" in error_of(post(client), 401)["message"]
        assert "unknown" in error_of(post(client, **bearer("kapi_" + "x" * 43)), 401)["message"]
        assert "'read' scope" in error_of(post(client, **bearer(writer)), 403)["message"]
        assert "collection 'default'" in error_of(post(client, **bearer(other)), 403)["message"]


def test_the_rate_limit_counts_hits_once(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, rate_limit=3))) as client:
        assert [post(client).status_code for _ in range(3)] == [200, 200, 200]
        limited = post(client)
        assert error_of(limited, 429)["type"] == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1


def test_a_hit_is_logged_and_measured_under_the_route_template(
    loaded_client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    post(loaded_client)
    post(loaded_client)
    miss, line = [r.getMessage() for r in caplog.records if r.name == "knowledge_api.access"]
    assert "cache_hit=false" in miss
    assert line.startswith("POST /v1/knowledge/query 200 ") and "cache_hit=true" in line
    metrics = loaded_client.get("/metrics").text
    labels = 'method="POST",route="/v1/knowledge/query",status="200"'
    count = f"http_request_duration_seconds_count{{{labels}}} 2.0"
    assert count in metrics


def test_remembered_bodies_are_bounded(
    loaded_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hot, "MAX_BODIES", 2)
    bodies = [orjson.dumps({**ASK, "limit": n}) for n in (1, 2, 3)]
    for body in bodies:
        post(loaded_client, body)
    assert list(hits_of(loaded_client).rendered) == bodies[1:]


def test_a_store_that_stops_answering_gets_the_usual_503_not_a_hit(
    loaded_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    post(loaded_client)
    service = loaded_client.app.state.service  # type: ignore[attr-defined]

    async def unavailable(collection: str) -> None:
        raise BackendConnectionError("store unavailable: disk I/O error", backend="sqlite")

    monkeypatch.setattr(service.tier1, "store_generation", unavailable)
    error = error_of(post(loaded_client), 503)
    assert error["type"] == "store_unavailable" and "disk I/O error" in error["message"]


def test_a_remembered_body_gone_stale_is_admitted_once(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, rate_limit=3))
    with TestClient(app) as client:
        assert post(client).status_code == 200
        document = Document("knowledge", "KB-new", "A new page: the store changed.")
        client.portal.call(app.state.service.ingest, [document])
        stale = post(client)  # remembered, but tier 1 no longer holds its answer
        assert stale.status_code == 200 and stale.json()["metrics"]["cache_hit"] is False
        assert post(client).status_code == 200
        assert error_of(post(client), 429)["type"] == "rate_limited"


# -- the hit path does the request observer's part itself ------------------------------


def served_by_the_hit_path(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bodies of the requests the hit path answered itself (the others went on)."""
    served: list[bytes] = []
    answered = QueryHits.answered

    async def spied(self: QueryHits, scope: Any, body: bytes, *rest: Any) -> bool:
        done = await answered(self, scope, body, *rest)
        if done:
            served.append(body)
        return done

    monkeypatch.setattr(QueryHits, "answered", spied)
    return served


@pytest.fixture
def json_lines(settings: Settings) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The lines the app's own logging setup writes, as JSON; read by calling it."""
    with app_logging(settings.replace(log_format="json")) as (stdout, stderr):

        def read() -> list[dict[str, Any]]:
            LINES.flush()
            text = stdout.getvalue() + stderr.getvalue()
            return [orjson.loads(line) for line in text.splitlines()]

        yield read


def access_lines(read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [line for line in read() if line["logger"] == "knowledge_api.access"]


def test_a_hit_leaves_the_headers_line_and_metrics_the_route_leaves_for_one(
    keyed: tuple[Settings, str, str, str],
    json_lines: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same tier-1 hit answered twice: by the hit path (a body seen before) and by
    the route (the same query written differently, never seen)."""
    settings, reader, _, _ = keyed
    served = served_by_the_hit_path(monkeypatch)
    with TestClient(create_app(settings)) as client:
        post(client, **bearer(reader))  # the miss that fills tier 1
        fast = post(client, **bearer(reader), **{"X-Request-ID": "trace-fast"})
        spaced = orjson.dumps({"synthesize": False, "query": "Login   timeout"})
        usual = post(client, spaced, **bearer(reader), **{"X-Request-ID": "trace-usual"})
        admin = bearer(make_admin(client))
        metrics = client.get("/metrics", headers=admin).text
    assert served == [RAW]
    assert fast.json()["metrics"]["cache_hit"] is usual.json()["metrics"]["cache_hit"] is True
    assert sorted(fast.headers) == sorted(usual.headers)
    assert fast.headers["content-type"] == usual.headers["content-type"]
    assert fast.headers["x-request-id"] == "trace-fast"
    assert usual.headers["x-request-id"] == "trace-usual"
    _, fast_line, usual_line, _ = access_lines(json_lines)
    assert fast_line["request_id"] == "trace-fast"
    assert usual_line["request_id"] == "trace-usual"
    for line in (fast_line, usual_line):
        assert line.pop("ms") >= 0
        line.pop("time")
        line.pop("request_id")
        line["message"] = re.sub(r" [\d.]+ms ", " _ms ", line["message"])
    expected = {
        "level": "info",
        "logger": "knowledge_api.access",
        "message": "POST /v1/knowledge/query 200 _ms cache_hit=true key=reader",
        "method": "POST",
        "route": QUERY,
        "status": 200,
        "cache_hit": True,
        "key": "reader",
    }
    assert fast_line == expected and usual_line == expected
    labels = 'method="POST",route="/v1/knowledge/query",status="200"'
    assert f"http_request_duration_seconds_count{{{labels}}} 3.0" in metrics


def make_admin(client: TestClient) -> str:
    settings = client.app.state.settings  # type: ignore[attr-defined]
    return str(client.portal.call(make_key, settings, "admin", ["admin"]))


def test_a_hit_refused_after_its_id_was_made_is_one_request_with_one_id(
    keyed: tuple[Settings, str, str, str], json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    settings, reader, _, writer = keyed
    with TestClient(create_app(settings)) as client:
        post(client, **bearer(reader))
        refused = post(client, **bearer(writer))
    error = error_of(refused, 403)
    lines = access_lines(json_lines)
    assert len(lines) == 2
    assert lines[1]["request_id"] == refused.headers["x-request-id"]
    assert error["details"]["request_id"] == refused.headers["x-request-id"]
    assert lines[1]["message"].startswith("POST /v1/knowledge/query 403 ")


def test_an_error_on_the_hit_path_is_a_500_with_its_id_and_line(
    settings: Settings,
    json_lines: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        post(client)

        def broken(key: Any, value: Any) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(app.state.service.tier1, "hit", broken)
        response = post(client, **{"X-Request-ID": "trace-500"})
    a_500_with_its_id_and_line(response, "trace-500", json_lines, "boom")


def a_500_with_its_id_and_line(
    response: Any, request_id: str, read: Callable[[], list[dict[str, Any]]], raised: str
) -> None:
    """The error shape's 500 with the request's id, its access line and the error's."""
    assert error_of(response, 500)["details"]["request_id"] == request_id
    assert response.headers["x-request-id"] == request_id
    lines = [line for line in read() if line["request_id"] == request_id]
    assert [line["logger"] for line in lines] == ["knowledge_api.access", "knowledge_api.errors"]
    assert lines[0]["message"].startswith("POST /v1/knowledge/query 500 ")
    assert raised in lines[1]["exception"]


def test_a_browsers_hit_goes_through_the_cors_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = served_by_the_hit_path(monkeypatch)
    origin = {"Origin": "https://app.example"}
    with TestClient(create_app(make_settings(tmp_path, cors_origins="*"))) as client:
        post(client, **origin)
        hit = post(client, **origin)
        assert post(client).json()["metrics"]["cache_hit"] is True
    assert hit.json()["metrics"]["cache_hit"] is True
    assert hit.headers["access-control-allow-origin"] == "*"
    assert served == [RAW]  # only the request without an Origin


def test_without_the_observer_beneath_hits_carry_no_id(settings: Settings) -> None:
    """The benchmark's plain app (scripts/bench_overhead.py): the observer taken out."""
    app = create_app(settings)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestObserver]
    with TestClient(app) as client:
        post(client)
        hit = post(client)
        assert hits_of(client).observer is None
    assert hit.json()["metrics"]["cache_hit"] is True
    assert "x-request-id" not in hit.headers
