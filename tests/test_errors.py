"""One error shape on every route, and visible degradation when a dependency fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Match, Route
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import EmbedderMismatchError
from knowledge_api.routes import ROUTES, ApiRoute
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores.sqlite.store import SQLiteStore
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer
from tests.conftest import make_settings

METHODS = ("GET", "POST", "DELETE", "PUT", "PATCH")
# its contract answers bad bodies 200 with the fallback shape (tests/test_support.py)
NEVER_AN_ERROR = ("/v1/knowledge/support",)


def assert_error_shape(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"success", "error"} and body["success"] is False
    assert set(body["error"]) == {"type", "message", "details"}
    assert isinstance(body["error"]["type"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    error: dict[str, Any] = body["error"]
    return error


def concrete(path: str) -> str:
    return (
        path.replace("{type}", "jira")
        .replace("{id:path}", "NOPE-1")
        .replace("{id}", "nope")
        .replace("{name:path}", "nope")
        .replace("{name}", "nope")
    )


@pytest.mark.parametrize("route", [r for r in ROUTES if isinstance(r, Route)], ids=str)
def test_every_route_answers_errors_in_one_shape(client: TestClient, route: Route) -> None:
    path = concrete(route.path)
    # the methods of every route this path reaches: a source's name may hold '/', so
    # DELETE .../sources/x/sync deletes the source "x/sync"
    reached = {"type": "http", "path": path, "method": "GET"}
    allowed = {
        m
        for r in ROUTES
        if isinstance(r, Route) and r.matches(reached)[0] != Match.NONE
        for m in r.methods or ()
    }
    for method in sorted(set(METHODS) - allowed):
        assert_error_shape(client.request(method, path), 405)
    body = route.contract.body if isinstance(route, ApiRoute) else None
    if getattr(body, "media_type", "") == "multipart/form-data":
        as_json = {"content-type": "application/json"}
        assert_error_shape(client.post(path, content=b"{}", headers=as_json), 415)
        as_form = {"content-type": "multipart/form-data; boundary=b"}
        assert_error_shape(client.post(path, content=b"--b\r\nbroken", headers=as_form), 400)
    elif "POST" in (route.methods or ()) and route.path not in NEVER_AN_ERROR:
        as_json = {"content-type": "application/json"}
        assert_error_shape(client.post(path, content=b"[]", headers=as_json), 400)
        assert_error_shape(client.post(path, content=b"{", headers=as_json), 400)
        # over KNOWLEDGE_MAX_BODY_BYTES, what /documents takes on top of it, and the chat
        # routes' KNOWLEDGE_MAX_CHAT_BYTES
        assert_error_shape(client.post(path, content=b"x" * 1_100_000, headers=as_json), 413)
        as_text = {"content-type": "text/plain"}
        error = assert_error_shape(
            client.post(path, content=b'{"query": "x"}', headers=as_text), 415
        )
        assert error["type"] == "unsupported_media_type"
    elif "PUT" in (route.methods or ()):
        # a PUT names what it creates or replaces: a body it cannot read is the error
        assert_error_shape(client.put(path), 415)
    elif "{" in route.path:
        assert_error_shape(client.request(sorted(route.methods or ())[0], path), 404)


def test_unknown_routes_answer_a_404_in_the_shape(client: TestClient) -> None:
    for method in ("GET", "POST", "DELETE"):
        error = assert_error_shape(client.request(method, "/v2/anything"), 404)
        routes = error["details"]["routes"]
        # every declared route, and the MCP endpoint (GET, POST and DELETE /mcp)
        assert len(routes) == len(ROUTES) + 3 and "POST /mcp" in routes


@pytest.fixture
def broken_store_settings(tmp_path: Path) -> Settings:
    """A database path that is a folder: SQLite cannot open it."""
    (tmp_path / "db-is-a-folder").mkdir()
    return make_settings(tmp_path).replace(db_path=tmp_path / "db-is-a-folder")


def test_unavailable_store_is_503_and_unhealthy(broken_store_settings: Settings) -> None:
    with TestClient(create_app(broken_store_settings)) as client:
        health = client.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "unhealthy"
        assert health.json()["store"]["status"] == "unavailable"
        assert "db-is-a-folder" in health.json()["store"]["error"]
        error = assert_error_shape(client.post("/v1/knowledge/query", json={"query": "x"}), 503)
        assert error["type"] == "store_unavailable"
        assert_error_shape(client.get("/v1/knowledge/detail/jira/X-1"), 503)
        doc = {"source_type": "wiki", "source_id": "a", "content": "b"}
        assert_error_shape(client.post("/v1/knowledge/documents", json=doc), 503)


class ExplodingService(KnowledgeService):
    async def retrieve_asked(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("internal detail 1234")


def test_an_unexpected_error_is_a_500_in_the_shape(settings: Settings) -> None:
    app = create_app(settings, build_service(settings, ExplodingService))
    with TestClient(app, raise_server_exceptions=False) as client:
        error = assert_error_shape(client.post("/v1/knowledge/query", json={"query": "x"}), 500)
        assert error["type"] == "internal_error"
        assert "1234" not in error["message"]


def test_a_store_built_by_another_embedder_stops_the_start(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        client.post(
            "/v1/knowledge/documents",
            json={"source_type": "wiki", "source_id": "a", "content": "text"},
        )
    other = KnowledgeService(
        settings, SQLiteStore(settings.db_path), FakeEmbedder(dimension=32), ExtractiveSynthesizer()
    )
    with (
        pytest.raises(EmbedderMismatchError, match="fake:hash-64"),
        TestClient(create_app(settings, other)),
    ):
        pass


def test_a_wrong_method_lists_every_method_of_the_path(client: TestClient) -> None:
    response = client.put("/v1/knowledge/documents/x", json={})
    error = assert_error_shape(response, 405)
    assert error["details"]["allowed"] == "DELETE, GET, HEAD, PATCH"
    assert response.headers["allow"] == "DELETE, GET, HEAD, PATCH"


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"\u0000": 1}, "filters"),
        ({'a"b': 1}, "filters"),
        ({"": "x"}, "filters"),
        ({"big": 2**63}, "filters.big"),
        ({"huge": 2**64 - 1}, "filters.huge"),
    ],
)
def test_filters_that_no_store_could_apply_are_400s(
    client: TestClient, filters: dict[str, Any], field: str
) -> None:
    for route in ("/v1/knowledge/query", "/v1/knowledge/answer"):
        error = assert_error_shape(client.post(route, json={"query": "x", "filters": filters}), 400)
        assert error["details"]["field"] == field


def test_the_largest_64_bit_filter_value_is_fine(client: TestClient) -> None:
    body = {"query": "x", "filters": {"n": 2**63 - 1}, "synthesize": False}
    assert client.post("/v1/knowledge/query", json=body).json()["results"] == []


def test_a_document_of_headings_only_is_indexed_and_found(client: TestClient) -> None:
    doc = {"source_type": "wiki", "source_id": "h", "content": "# Quarterly zebra roadmap\n## Q3"}
    created = client.post("/v1/knowledge/documents", json=doc).json()
    assert created["chunks"] == 1
    body = {"query": "zebra roadmap", "synthesize": False, "threshold": 0}
    results = client.post("/v1/knowledge/query", json=body).json()["results"]
    assert results[0]["source_id"] == "h"
