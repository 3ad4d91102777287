"""A collection no document is in: one 404 `collection_not_found` on every reading route,
listing only the collections the caller may read; /support keeps answering; a write
creates the collection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.conftest import corpus, make_settings
from tests.test_access import bearer, error_of, make_key
from tests.test_mcp import connected, load, serving, text_of

MISSING = "drafts"
"""A collection the key may read, which holds no document."""
QUESTION = "How long before a login times out?"
MESSAGE = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}

READING = [
    ("POST", "/v1/knowledge/query", {"query": QUESTION, "collection": MISSING}),
    ("POST", "/v1/knowledge/query", {"query": QUESTION, "collection": MISSING, "stream": True}),
    ("POST", "/v1/knowledge/answer", {"query": QUESTION, "collection": MISSING}),
    ("POST", "/v1/knowledge/answer", {"query": QUESTION, "collection": MISSING, "stream": True}),
    ("POST", "/v1/knowledge/retrieve", {"query": QUESTION, "collection": MISSING}),
    ("POST", "/v1/knowledge/validate", {"collection": MISSING, "test_queries": [QUESTION]}),
    ("POST", "/v1/chat", {"messages": [MESSAGE], "collection": MISSING}),
    (
        "POST",
        "/v1/chat/completions",
        {"model": MISSING, "messages": [{"role": "user", "content": QUESTION}]},
    ),
    ("GET", f"/v1/knowledge/detail/jira/SIAM-101?collection={MISSING}", None),
]
"""Every reading route, the playground's message (a streamed query) among them."""


def manuals() -> list[Document]:
    return [Document("wiki", "printer", "The printer jams on A3 paper.", collection="manuals")]


def secrets() -> list[Document]:
    return [Document("wiki", "salaries", "Salaries are paid monthly.", collection="hr")]


@pytest.fixture
async def keyed(tmp_path: Path) -> tuple[Settings, str]:
    """Three collections stored (default, manuals, hr); a key that may read default,
    manuals, the empty drafts and support (no KB synced), not hr."""
    settings = make_settings(tmp_path, auth="keys")
    await load(settings, corpus() + manuals() + secrets())
    token = await make_key(settings, "ops", ["admin"], ("default", "manuals", MISSING, "support"))
    return settings, token


@pytest.fixture
def client(keyed: tuple[Settings, str]) -> Iterator[TestClient]:
    settings, token = keyed
    with TestClient(create_app(settings), headers=bearer(token)) as test_client:
        yield test_client


@pytest.mark.parametrize(("method", "path", "body"), READING)
def test_every_reading_route_answers_404_listing_the_callers_collections(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = client.request(method, path, json=body)
    error = error_of(response, 404)
    assert error["type"] == "collection_not_found"
    assert error["details"]["collection"] == MISSING
    assert error["details"]["available"] == ["default", "manuals"]  # not hr
    assert error["message"] == "no collection 'drafts' (collections: default, manuals)"


@pytest.mark.parametrize(("method", "path", "body"), READING[:1] + READING[4:5] + READING[-1:])
def test_an_existing_collection_is_read_as_before(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    changed = {**body, "collection": "default"} if body else None
    response = client.request(method, path.replace(MISSING, "default"), json=changed)
    assert response.status_code == 200, response.text


def test_an_empty_default_collection_is_no_typo(tmp_path: Path) -> None:
    """A new knowledge base has no document yet: its answers say so, they are no 404."""
    with TestClient(create_app(make_settings(tmp_path))) as client:
        response = client.post("/v1/knowledge/answer", json={"query": QUESTION})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "insufficient_context"


def test_support_keeps_answering_without_its_collection(client: TestClient) -> None:
    response = client.post("/v1/knowledge/support", json={"intent": "x", "message": QUESTION})
    assert response.status_code == 200, response.text
    assert response.json()["coverage"] == "none"


def test_a_write_creates_the_collection(client: TestClient) -> None:
    doc = {"source_type": "wiki", "source_id": "draft-1", "collection": MISSING}
    doc["content"] = "Drafts are reviewed by two editors before they are published."
    assert client.post("/v1/knowledge/documents", json=doc).status_code in (200, 201)
    body = {"query": "who reviews drafts", "collection": MISSING, "synthesize": False}
    response = client.post("/v1/knowledge/query", json=body)
    assert response.status_code == 200, response.text
    assert [r["source_id"] for r in response.json()["results"]] == ["draft-1"]


@pytest.fixture
async def mcp_app(keyed: tuple[Settings, str]) -> AsyncIterator[tuple[Any, str]]:
    settings, token = keyed
    async with serving(settings) as app:
        yield app, token


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("search", {"query": QUESTION, "collection": MISSING}),
        ("answer", {"query": QUESTION, "collection": MISSING}),
        ("get_document", {"type": "jira", "id": "SIAM-101", "collection": MISSING}),
    ],
)
async def test_mcp_tools_name_the_callers_collections(
    mcp_app: tuple[Any, str], tool: str, arguments: dict[str, Any]
) -> None:
    app, token = mcp_app
    async with connected(app, token) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert text_of(result).endswith(": no collection 'drafts' (collections: default, manuals)")
