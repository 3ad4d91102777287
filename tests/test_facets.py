"""Facets on the routes that search: counts over every match, not the page; their
limits; the 400s naming `facets[i]`; the cache key; the stores that cannot count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api import facets
from knowledge_api.app import create_app
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import Document, document_id
from knowledge_api.service import KnowledgeService
from tests.conftest import ingested_client, make_settings, query_events, query_params

TEAMS = ("qa", "dev", "ops")


def notes(count: int) -> list[Document]:
    """`count` notes on the upload queue: team by turn, `n` as a number, `ok` a flag
    on every other one; the first one without a team."""
    docs = []
    for i in range(count):
        meta: dict[str, Any] = {"n": i % 4 + (0.5 if i % 4 == 3 else 0), "ok": i % 2 == 0}
        if i:
            meta["team"] = TEAMS[i % 3]
        kind = "jira" if i % 2 else "wiki"
        docs.append(Document(kind, f"N-{i}", f"Upload queue note {i}.", f"Note {i}", meta))
    return docs


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from ingested_client(make_settings(tmp_path), notes(30))


def reference(
    docs: list[Document], fields: tuple[str, ...], keep: Any
) -> dict[str, dict[str, int]]:
    passages = [
        {**d.metadata, "source_type": d.source_type, "source_id": d.source_id}
        for d in docs
        if keep(d)
    ]
    return {name: dict(found.counts) for name, found in facets.count(fields, passages).items()}


def test_query_counts_every_match_not_the_page(client: TestClient) -> None:
    body = {"query": "upload queue note", "limit": 3, "synthesize": False}
    fields = ["team", "source_type", "ok", "n"]
    response = client.post("/v1/knowledge/query", json={**body, "facets": fields})
    assert response.status_code == 200, response.text
    found = response.json()
    assert len(found["results"]) == 3
    assert found["facets"] == reference(notes(30), tuple(fields), lambda d: True)
    assert found["facets"]["team"] == {"dev": 10, "ops": 10, "qa": 9}
    assert list(found["facets"]["n"]) == ["0", "1", "2", "3.5"]
    assert "facets_cut" not in found
    assert found["metrics"]["facets_ms"] >= 0


def test_filters_and_sources_define_the_match_set(client: TestClient) -> None:
    body = {
        "query": "upload queue note",
        "limit": 1,
        "synthesize": False,
        "sources": ["jira"],
        "filters": {"n": {"$gte": 1}},
        "facets": ["team", "source_id"],
    }
    found = client.post("/v1/knowledge/query", json=body).json()

    def keep(d: Document) -> bool:
        return d.source_type == "jira" and d.metadata["n"] >= 1

    assert found["facets"] == reference(notes(30), ("team", "source_id"), keep)
    assert sum(found["facets"]["source_id"].values()) == 15


def test_retrieve_counts_too(client: TestClient) -> None:
    body = {
        "query": "upload queue note",
        "collection": "default",
        "top_k": 2,
        "filters": {"ok": True},
        "facets": ["team"],
    }
    response = client.post("/v1/knowledge/retrieve", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["facets"] == reference(
        notes(30), ("team",), lambda d: d.metadata["ok"] is True
    )


def test_the_cache_key_includes_the_facets(client: TestClient) -> None:
    body = {"query": "upload queue note", "synthesize": False}
    first = client.post("/v1/knowledge/query", json={**body, "facets": ["team"]}).json()
    other = client.post("/v1/knowledge/query", json={**body, "facets": ["ok"]}).json()
    again = client.post("/v1/knowledge/query", json={**body, "facets": ["team"]}).json()
    plain = client.post("/v1/knowledge/query", json=body).json()
    assert other["metrics"]["cache_hit"] is False and list(other["facets"]) == ["ok"]
    assert again["metrics"]["cache_hit"] is True and again["facets"] == first["facets"]
    assert plain["metrics"]["cache_hit"] is False and "facets" not in plain


def test_a_field_with_more_values_than_returned_says_so(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    docs = [
        Document("wiki", f"P-{i}", f"Release page {i}.", f"Page {i}", {"page": f"p{i:03d}"})
        for i in range(facets.MAX_VALUES + 5)
    ]
    docs[7].metadata["page"] = docs[3].metadata["page"] = "p000"
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, docs)  # type: ignore[union-attr]
        body = {"query": "release page", "synthesize": False, "facets": ["page"]}
        found = client.post("/v1/knowledge/query", json=body).json()
    counts = found["facets"]["page"]
    assert len(counts) == facets.MAX_VALUES
    assert next(iter(counts.items())) == ("p000", 3)
    assert found["facets_cut"] == {"page": facets.MAX_VALUES + 3}


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        (["team", 3], "facets[1]", "must be a field name"),
        (["team", ""], "facets[1]", "must be a field name"),
        (["team", 'a"b'], "facets[1]", "must be a field name"),
        (["team", "created_at"], "facets[1]", "timestamps are not counted"),
        (["team", "team"], "facets[1]", "a second time"),
        ([f"k{i}" for i in range(9)], "facets", "at most 8 field names"),
        ("team", "facets", "must be a list"),
    ],
)
def test_a_bad_facet_is_a_400_naming_it(value: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        facets.parse(value)
    assert caught.value.details["field"] == field
    assert words in caught.value.details["rule"]


@pytest.mark.parametrize("route", ["/v1/knowledge/query", "/v1/knowledge/retrieve"])
def test_a_bad_facet_is_a_400_on_the_routes(client: TestClient, route: str) -> None:
    body = {"query": "x", "collection": "default", "facets": ["team", {"a": 1}]}
    response = client.post(route, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["details"]["field"] == "facets[1]"
    assert "must be a field name" in error["message"]


def test_openapi_declares_the_limits(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for name in ("QueryRequest", "RetrieveRequest"):
        declared = schemas[name]["properties"]["facets"]
        assert declared["maxItems"] == facets.MAX_FIELDS and declared["uniqueItems"] is True
        assert str(facets.MAX_VALUES) in declared["description"]


async def test_a_streamed_query_ends_with_the_facets(service: KnowledgeService) -> None:
    await service.ingest(notes(30))
    params = query_params({"query": "upload queue", "stream": True, "facets": ["team"]})
    events = [event async for event in query_events(service, params)]
    name, done = events[-1]
    assert name == "done"
    assert done["facets"] == {"team": {"dev": 10, "ops": 10, "qa": 9}}


def test_counts_follow_every_write(client: TestClient) -> None:
    body = {"query": "upload queue note", "synthesize": False, "facets": ["team", "source_id"]}
    before = client.post("/v1/knowledge/query", json=body).json()["facets"]
    added = {
        "source_type": "jira",
        "source_id": "N-new",
        "content": "Upload queue note.",
        "metadata": {"team": "sales"},
    }
    assert client.post("/v1/knowledge/documents", json=added).status_code in (200, 201)
    assert (
        client.delete(
            f"/v1/knowledge/documents/{document_id('default', 'jira', 'N-1')}"
        ).status_code
        == 200
    )
    after = client.post("/v1/knowledge/query", json=body).json()["facets"]
    assert after["team"] == {**before["team"], "sales": 1, "dev": before["team"]["dev"] - 1}
    assert "N-new" in after["source_id"] and "N-1" not in after["source_id"]
