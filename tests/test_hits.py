"""The hit path of POST /v1/knowledge/query (routes/hot.py): a repeated body answered
from its rendered tier-1 entry, exactly as the route would answer it, for callers the
route would admit, and never after the store changed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.errors import BackendConnectionError
from knowledge_api.models import Document
from knowledge_api.routes import hot, query
from knowledge_api.routes.hot import QueryHits
from knowledge_api.service import Served
from knowledge_api.settings import Settings
from tests.conftest import corpus, make_settings
from tests.test_access import bearer, error_of, make_key

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
    app = create_app(settings)
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())
        yield client


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
    assert body["metrics"] == {"cache_hit": True, "embedding_ms": 0.0, "search_ms": 0.0}
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

    async def unavailable() -> None:
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
