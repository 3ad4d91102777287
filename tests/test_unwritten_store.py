"""A SQLite store never written (no file yet, or an empty file): every route answers as
it does for a collection that holds nothing, never a 5xx, and a refused delete leaves
/health healthy. The first write transaction of such a store comes after the side
tables (keys, audit, jobs) were created on another connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from tests.cli_env import cli_home
from tests.conftest import make_settings

ROUTES = [
    ("GET", "/v1/knowledge/sources", None),
    ("GET", "/v1/knowledge/sources?collection=knowledge", None),
    ("GET", "/v1/knowledge/documents?collection=knowledge", None),
    ("GET", "/v1/knowledge/documents/abc", None),
    ("PATCH", "/v1/knowledge/documents/abc", {"acl": ["public"]}),
    ("DELETE", "/v1/knowledge/documents/abc", None),
    ("GET", "/v1/knowledge/detail/knowledge/abc", None),
    ("PATCH", "/v1/knowledge/sources/docs?collection=knowledge", {"acl": ["public"]}),
    ("GET", "/v1/knowledge/collections", None),
    ("POST", "/v1/knowledge/query", {"query": "printer", "facets": ["source_type"]}),
    ("POST", "/v1/knowledge/retrieve", {"query": "printer", "collection": "knowledge"}),
]


@pytest.fixture(params=["no file", "empty file"])
def unwritten(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path)
    if request.param == "empty file":
        Path(settings.db_path).touch()
    with TestClient(create_app(settings)) as client:
        yield client


def test_deleting_a_source_of_a_store_never_written_is_a_404(unwritten: TestClient) -> None:
    response = unwritten.delete("/v1/knowledge/sources/docs?collection=knowledge")
    assert response.status_code == 404, response.text
    assert response.json()["error"]["type"] == "collection_not_found"
    assert unwritten.get("/health").json()["status"] == "healthy"


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_no_route_fails_on_a_store_never_written(
    unwritten: TestClient, method: str, path: str, body: object
) -> None:
    response = unwritten.request(method, path, json=body)
    assert response.status_code < 500, response.text


def test_the_cli_refuses_a_collection_never_written_as_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch, KNOWLEDGE_SEED_ON_EMPTY="false")
    output = str(tmp_path / "out.jsonl")
    assert main(["export", "--collection", "knowledge", "--output", output]) == 2
    assert "no collection 'knowledge' in the store" in capsys.readouterr().err
    assert main(["sources", "remove", "docs", "--collection", "knowledge"]) == 1
    assert "no connector source 'docs'" in capsys.readouterr().err
