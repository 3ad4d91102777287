"""Several collections in one question: `collections` on every route that searches
(query, answer, retrieve, /v1/chat, /v1/chat/completions and the MCP tools), one
ranking over their union, each collection checked first, and tier 1 keeping such an
answer under every one's generation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.models import Document
from tests.conftest import ingested_client, make_settings
from tests.test_access import bearer, error_of, make_key
from tests.test_mcp import connected, load, serving, text_of

QUERY = "/v1/knowledge/query"
NOTES = [
    Document("wiki", "falcon-restart", "Restart Falcon with systemctl restart falcon.", "Falcon"),
    Document("jira", "falcon-config", "Falcon reads falcon.toml when it starts.", "Falcon setup"),
    Document("wiki", "osprey-rollback", "Roll back an Osprey wave with osprey rollback.", "Osprey"),
    Document("git", "osprey-cache", "Osprey caches the last answer for a minute.", "Osprey cache"),
    Document("wiki", "kestrel-deploy", "Kestrel deploys in waves of ten hosts.", "Kestrel"),
    Document("jira", "kestrel-restart", "Restart Kestrel after each wave.", "Kestrel restart"),
]  # fmt: skip
SPLIT = {"falcon": "a", "osprey": "b", "kestrel": "b"}
"""Which collection each note is in (by its first word), beside `whole`, which holds all."""


def documents() -> list[Document]:
    split = [replace(d, collection=SPLIT[d.source_id.split("-")[0]]) for d in NOTES]
    whole = [replace(d, collection="whole") for d in NOTES]
    elsewhere = [Document("wiki", "heron", "Heron restarts itself.", "Heron", collection="c")]
    return split + whole + elsewhere


def ask(**fields: Any) -> dict[str, Any]:
    return {"query": "how do I restart a wave", "synthesize": False, "threshold": 0, **fields}


def ranking(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """A ranking as a reader compares it (a passage's id names its collection)."""
    return [(r["source_id"], r["similarity"]) for r in results]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from ingested_client(make_settings(tmp_path, answer_threshold="0.3"), documents())


def posted(client: TestClient, path: str, body: dict[str, Any], status: int = 200) -> Any:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    return response.json()


def test_a_query_of_two_collections_ranks_as_one_collection_of_both(client: TestClient) -> None:
    both = posted(client, QUERY, ask(collections=["b", "a"], limit=6, facets=["source_type"]))
    whole = posted(client, QUERY, ask(collection="whole", limit=6, facets=["source_type"]))
    assert len(both["results"]) == 6 and ranking(both["results"]) == ranking(whole["results"])
    assert {r["collection"] for r in whole["results"]} == {"whole"}
    assert [r["collection"] for r in both["results"]] == [
        SPLIT[r["source_id"].split("-")[0]] for r in both["results"]
    ]
    assert both["facets"] == whole["facets"] == {"source_type": {"wiki": 3, "jira": 2, "git": 1}}
    first = posted(client, QUERY, ask(collections=["a", "b"], limit=2))
    second = posted(
        client, QUERY, ask(collections=["a", "b"], limit=2, offset=first["next_offset"])
    )
    assert ranking(first["results"] + second["results"]) == ranking(whole["results"])[:4]
    streamed = client.post(QUERY, json=ask(collections=["a", "b"], limit=6, stream=True))
    events = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")
    ]
    fused = next(e["results"] for e in events if "results" in e and "source" not in e)
    assert ranking(fused) == ranking(whole["results"])
    one = posted(client, QUERY, ask(collections=["a"]))  # one named: that collection's search
    assert {r["collection"] for r in one["results"]} == {"a"}


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (ask(collection="a", collections=["a", "b"]), "cannot be sent with 'collection'"),
        (ask(collections=[]), "must be a list of 1-10 collection names"),
        (ask(collections=[f"c{i}" for i in range(11)]), "must be a list of 1-10"),
        (ask(collections="a"), "must be a list of 1-10"),
        (ask(collections=None), "must be a list of 1-10"),  # null is no list either
        (ask(collections=["a", "Bad Name!"]), "must be 1-64 letters"),
    ],
)
def test_a_bad_list_of_collections_is_a_400_naming_the_field(
    client: TestClient, body: dict[str, Any], rule: str
) -> None:
    for path in (QUERY, "/v1/knowledge/answer"):
        body = {k: v for k, v in body.items() if path == QUERY or k != "synthesize"}
        error = error_of(client.post(path, json=body), 400)
        assert error["details"]["field"] == "collections" and rule in error["message"]
    both = error_of(client.post(QUERY, json=ask(collection="a", collections=["b"])), 400)
    assert both["details"]["fields"] == ["collection", "collections"]


def test_an_unknown_collection_among_several_is_a_404_naming_it(client: TestClient) -> None:
    for path, body in (
        (QUERY, ask(collections=["a", "nope"])),
        (QUERY, ask(collections=["a", "nope"], stream=True)),
        ("/v1/knowledge/answer", {"query": "restart", "collections": ["nope", "a"]}),
        ("/v1/knowledge/retrieve", {"query": "restart", "collections": ["a", "nope"]}),
    ):
        error = error_of(client.post(path, json=body), 404)
        assert error["details"]["collection"] == "nope" and "'nope'" in error["message"], path


def test_answer_retrieve_and_chat_search_the_union(client: TestClient) -> None:
    answer = posted(
        client, "/v1/knowledge/answer", {"query": "restart Kestrel", "collections": ["a", "b"]}
    )
    whole = posted(
        client, "/v1/knowledge/answer", {"query": "restart Kestrel", "collection": "whole"}
    )
    assert answer["status"] == whole["status"] == "success"
    assert answer["answer"] == whole["answer"]
    cited = [(s["metadata"]["source_id"], s["collection"]) for s in answer["sources"]]
    assert cited and [i for i, _ in cited] == [s["metadata"]["source_id"] for s in whole["sources"]]
    assert all(collection == SPLIT[i.split("-")[0]] for i, collection in cited)
    retrieved = posted(
        client, "/v1/knowledge/retrieve", {"query": "restart", "collections": ["a", "b"]}
    )
    same = posted(client, "/v1/knowledge/retrieve", {"query": "restart", "collection": "whole"})
    chunks = retrieved["retrieved_chunks"]
    assert [(c["page_title"], c["similarity_score"]) for c in chunks] == [
        (c["page_title"], c["similarity_score"]) for c in same["retrieved_chunks"]
    ]
    assert {c["collection"] for c in chunks} == {"a", "b"}
    asked = {"messages": [{"role": "user", "content": "How do I restart Kestrel?"}]}
    completion = posted(
        client, "/v1/chat/completions", {**asked, "model": "c", "collections": ["a", "b"]}
    )
    assert completion["model"] == "c"  # echoed; the collections searched are a and b
    assert "Kestrel" in completion["choices"][0]["message"]["content"]
    alone = posted(client, "/v1/chat/completions", {**asked, "model": "c"})
    assert "Kestrel" not in alone["choices"][0]["message"]["content"]
    ui = {
        "messages": [
            {"role": "user", "parts": [{"type": "text", "text": "How do I restart Kestrel?"}]}
        ]
    }
    response = client.post("/v1/chat", json={**ui, "collections": ["a", "b"]})
    assert response.status_code == 200 and "Restart Kestrel after each wave" in response.text
    refused = client.post("/v1/chat", json={**ui, "collection": "a", "collections": ["a", "b"]})
    assert error_of(refused, 400)["details"]["field"] == "collections"


def test_an_answer_of_several_is_dropped_by_a_write_to_any_of_them(client: TestClient) -> None:
    body = ask(collections=["a", "b"])
    assert posted(client, QUERY, body)["metrics"]["cache_hit"] is False
    assert posted(client, QUERY, body)["metrics"]["cache_hit"] is True  # the hit path
    written = {
        "source_type": "wiki",
        "source_id": "heron-2",
        "content": "Heron sleeps.",
        "collection": "c",
    }
    posted(client, "/v1/knowledge/documents", written, 201)
    assert posted(client, QUERY, body)["metrics"]["cache_hit"] is True  # c is not searched
    for collection in ("b", "a"):
        written = {**written, "source_id": f"wave-{collection}", "collection": collection,
                   "content": "Restart a wave by restarting each of its hosts."}  # fmt: skip
        posted(client, "/v1/knowledge/documents", written, 201)
        again = posted(client, QUERY, body)
        assert again["metrics"]["cache_hit"] is False, collection
        assert f"wave-{collection}" in [r["source_id"] for r in again["results"]]
        assert posted(client, QUERY, body)["metrics"]["cache_hit"] is True


async def test_a_key_must_reach_every_collection_named_on_the_hit_path_too(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auth="keys", answer_threshold="0.3")
    await load(settings, documents())
    reader = await make_key(settings, "reader", ["read"])
    only_a = await make_key(settings, "only-a", ["read"], ("a",))
    body = json.dumps(ask(collections=["a", "b"])).encode()
    headers = {"content-type": "application/json"}
    with TestClient(create_app(settings)) as client:
        refused = client.post(QUERY, content=body, headers={**headers, **bearer(only_a)})
        assert "collection 'b'" in error_of(refused, 403)["message"]
        for _ in range(2):
            answered = client.post(QUERY, content=body, headers={**headers, **bearer(reader)})
            assert answered.status_code == 200, answered.text
        assert answered.json()["metrics"]["cache_hit"] is True  # the hit path holds it now
        refused = client.post(QUERY, content=body, headers={**headers, **bearer(only_a)})
        error = error_of(refused, 403)
        assert "collection 'b'" in error["message"] and error["details"]["collection"] == "b"
        alone = client.post(QUERY, json=ask(collections=["a"]), headers=bearer(only_a))
        assert alone.status_code == 200, alone.text
        rated = {"query_id": answered.json()["query_id"], "rating": "up"}
        refused = client.post("/v1/knowledge/feedback", json=rated, headers=bearer(only_a))
        assert error_of(refused, 403)["details"]["collection"] == "b"
        taken = client.post("/v1/knowledge/feedback", json=rated, headers=bearer(reader))
        assert taken.status_code == 201, taken.text
        for path, asked in (
            ("/v1/knowledge/answer", {"query": "restart", "collections": ["a", "b"]}),
            ("/v1/knowledge/retrieve", {"query": "restart", "collections": ["a", "b"]}),
            ("/v1/chat/completions", {"model": "a", "collections": ["a", "b"],
                                      "messages": [{"role": "user", "content": "restart?"}]}),
        ):  # fmt: skip
            error = error_of(client.post(path, json=asked, headers=bearer(only_a)), 403)
            assert error["details"]["collection"] == "b", path


async def test_the_mcp_tools_search_and_answer_over_several_collections(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auth="keys", answer_threshold="0.3")
    await load(settings, documents())
    reader = await make_key(settings, "reader", ["read"])
    only_a = await make_key(settings, "only-a", ["read"], ("a",))
    async with serving(settings) as app:
        async with connected(app, reader) as client:
            found = await client.call_tool(
                "search", {"query": "restart", "collections": ["a", "b"]}
            )
            results = json.loads(text_of(found))["results"]
            whole = await client.call_tool("search", {"query": "restart", "collection": "whole"})
            assert ranking(results) == ranking(json.loads(text_of(whole))["results"])
            assert {r["collection"] for r in results} == {"a", "b"}
            answered = await client.call_tool(
                "answer", {"query": "How do I restart Kestrel?", "collections": ["a", "b"]}
            )
            assert json.loads(text_of(answered))["status"] == "success"
            both = await client.call_tool(
                "search", {"query": "restart", "collection": "a", "collections": ["a", "b"]}
            )
            assert both.is_error and "collections" in text_of(both)
            missing = await client.call_tool("search", {"query": "x", "collections": ["a", "nope"]})
            assert missing.is_error and "'nope'" in text_of(missing)
        async with connected(app, only_a) as client:
            refused = await client.call_tool("answer", {"query": "x", "collections": ["a", "b"]})
            assert refused.is_error and "collection 'b'" in text_of(refused)


def test_the_openapi_document_declares_collections_and_each_results_collection(
    client: TestClient,
) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    replies = {
        path: document["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]
        for path in (QUERY, "/v1/knowledge/answer", "/v1/knowledge/retrieve")
    }
    for request in ("QueryRequest", "AnswerRequest", "RetrieveRequest", "ChatRequest",
                    "ChatCompletionRequest"):  # fmt: skip
        listed = schemas[request]["properties"]["collections"]
        assert listed["maxItems"] == 10 and listed["items"]["pattern"], request
    results = replies[QUERY]["schema"]["properties"]["results"]["items"]
    assert results["properties"]["collection"]["type"] == "string"
    assert "collection" in results["required"]
    sources = replies["/v1/knowledge/answer"]["schema"]["properties"]["sources"]["items"]
    assert "collection" in sources["required"]
    chunks = replies["/v1/knowledge/retrieve"]["schema"]["properties"]["retrieved_chunks"]
    assert "collection" in chunks["items"]["required"]
