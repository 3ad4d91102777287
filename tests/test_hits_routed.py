"""A cold POST /v1/knowledge/query answered by its route directly (routes/hot.py,
`QueryHits.routed`): no routing, stream cap or Starlette handler layers between the
request observer and the route, with the same answers, errors, ids, lines and metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from starlette.routing import Router
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.settings import Settings
from knowledge_api.usecases import query as use
from tests.test_access import bearer, error_of
from tests.test_hits import (
    JSON,
    QUERY,
    a_500_with_its_id_and_line,
    access_lines,
    json_lines,
    keyed,
    post,
)

__all__ = ["json_lines", "keyed"]  # fixtures these tests use


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests that went through the router (the others did not)."""
    paths: list[str] = []
    route = Router.__call__

    async def spied(self: Router, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            paths.append(scope["path"])
        await route(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", spied)
    return paths


def test_a_cold_query_is_answered_by_its_route_with_its_id_line_and_metrics(
    settings: Settings, routed: list[str], json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    with TestClient(create_app(settings)) as client:
        cold = post(client, **{"X-Request-ID": "trace-cold"})
        metrics = client.get("/metrics").text
    assert routed == ["/metrics"]
    assert cold.status_code == 200 and cold.json()["metrics"]["cache_hit"] is False
    assert cold.headers["x-request-id"] == "trace-cold"
    assert cold.headers["content-type"] == "application/json"
    [line] = [line for line in access_lines(json_lines) if line["route"] == QUERY]
    assert line["request_id"] == "trace-cold"
    assert line["message"].startswith("POST /v1/knowledge/query 200 ")
    assert line["cache_hit"] is False
    labels = 'method="POST",route="/v1/knowledge/query",status="200"'
    assert f"http_request_duration_seconds_count{{{labels}}} 1.0" in metrics


def test_bodies_that_may_ask_for_a_stream_go_through_the_stream_cap(
    settings: Settings, routed: list[str]
) -> None:
    written = b'{"query": "login timeout", "synthesize": false, "stream": true}'
    escaped = b'{"query": "login timeout", "synthesize": false, "\\u0073tream": true}'
    with TestClient(create_app(settings)) as client:
        for body in (written, escaped):
            response = post(client, body)
            assert response.headers["content-type"].startswith("text/event-stream")
            assert "event: done" in response.text
        post(client, orjson.dumps({"query": "login timeout"}), Origin="https://app.example")
    assert routed == [QUERY] * 3


def test_errors_on_the_routes_own_way_keep_their_shape_id_and_line(
    settings: Settings, routed: list[str], json_lines: Callable[[], list[dict[str, Any]]]
) -> None:
    with TestClient(create_app(settings)) as client:
        bad = post(client, b'{"query": ""}', **{"X-Request-ID": "trace-400"})
        gone = post(client, b'{"query": "x", "collection": "nowhere"}')
        text = client.post(QUERY, content=b'{"query": "x"}', headers={"content-type": "text/plain"})
    assert routed == [QUERY]  # a body not declared JSON goes the usual way, to its 415
    error = error_of(bad, 400)
    assert "query" in error["message"]
    assert error["details"]["request_id"] == bad.headers["x-request-id"] == "trace-400"
    assert error_of(gone, 404)["details"]["request_id"] == gone.headers["x-request-id"]
    error_of(text, 415)
    statuses = [line["status"] for line in access_lines(json_lines)]
    assert statuses == [400, 404, 415]


def test_a_caller_refused_on_the_routes_own_way_is_refused_as_usual(
    keyed: tuple[Settings, str, str, str], routed: list[str]
) -> None:
    settings, reader, _, writer = keyed
    with TestClient(create_app(settings)) as client:
        assert error_of(post(client), 401)["details"]["request_id"]
        assert error_of(post(client, **bearer(writer)), 403)
        assert post(client, **bearer(reader)).status_code == 200
    assert routed == []


def test_an_unexpected_error_on_the_routes_own_way_is_a_500_with_its_id_and_line(
    settings: Settings,
    json_lines: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    routed: list[str],
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(use, "query", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post(
            QUERY, content=b'{"query": "x"}', headers={**JSON, "X-Request-ID": "t-500"}
        )
    assert routed == []
    a_500_with_its_id_and_line(response, "t-500", json_lines, "boom")
