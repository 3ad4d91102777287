"""The HTTP contract of the spec's E2E list, against a real SQLite store."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from knowledge_api.models import SOURCE_TYPES

QUERY = "/v1/knowledge/query"


def ask(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(QUERY, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_health_reports_service_cache_store_and_embedder(client: TestClient) -> None:
    body = client.get("/health").json()
    assert body["status"] == "healthy"
    assert body["service"] == "knowledge-api"
    assert body["version"] == "1.0.0"
    assert set(body["cache"]) >= {"response_entries", "embedding_entries", "hit_rate"}
    assert body["timestamp"].endswith("Z")
    assert body["store"]["status"] == "ok" and body["store"]["documents"] == 6
    assert body["embedder"]["status"] == "ok"


def test_query_returns_ranked_results_with_every_field(client: TestClient) -> None:
    body = ask(client, query="How do I create a test case in AOMA?", synthesize=False)
    assert "synthesis" not in body
    first = body["results"][0]
    assert first["source_id"] == "https://wiki.example.com/aoma/test-cases"
    assert set(first) == {
        "id",
        "content",
        "source_type",
        "source_id",
        "similarity",
        "collection",
        "metadata",
        "expandable",
        "start",
        "end",
    }
    stored = client.get(f"/v1/knowledge/documents/{first['metadata']['document_id']}").json()
    there = stored["content"][first["start"] : first["end"]]
    assert there.split() == first["content"].split()  # where it sits in its document
    assert first["source_type"] == "wiki" and first["collection"] == "default"
    assert first["metadata"]["title"] == "Creating test cases"
    assert first["expandable"] is True  # the page has two sections, so two chunks
    similarities = [r["similarity"] for r in body["results"]]
    assert all(0.2 <= s <= 1 for s in similarities)
    metrics = body["metrics"]
    assert metrics["cache_hit"] is False
    assert set(metrics) == {"total_ms", "cache_hit", "embedding_ms", "search_ms", "ranking"}
    assert metrics["total_ms"] >= metrics["search_ms"] >= 0
    assert metrics["ranking"] == {
        "fusion": "convex",
        "vector_weight": 0.8,
        "prf": True,
        "recency": None,
        "reranker": "none",
    }
    assert body["next_offset"] is None  # six passages above the threshold, all on this page


def test_query_with_synthesis_cites_its_results(client: TestClient) -> None:
    body = ask(client, query="Which audio formats does asset ingestion accept?")
    assert body["results"][0]["source_id"] == "kb-7"
    assert "[1]" in body["synthesis"]
    assert "WAV and FLAC" in body["synthesis"]
    assert body["metrics"]["synthesis_ms"] >= 0


def test_sources_filter_keeps_only_those_types(client: TestClient) -> None:
    body = ask(client, query="login timeout test case", sources=["jira"], threshold=0.0)
    assert body["results"] and {r["source_type"] for r in body["results"]} == {"jira"}


def test_metadata_filter(client: TestClient) -> None:
    body = ask(client, query="assets", filters={"app_under_test": "dam"}, threshold=0.0)
    assert [r["source_id"] for r in body["results"]] == ["kb-7"]


def test_repeat_is_a_cache_hit_with_the_same_results(client: TestClient) -> None:
    first = ask(client, query="release date of version 4.2")
    again = ask(client, query="  Release DATE of version 4.2 ")
    assert first["metrics"]["cache_hit"] is False
    assert again["metrics"]["cache_hit"] is True
    assert again["results"] == first["results"] and again["synthesis"] == first["synthesis"]
    assert again["metrics"]["embedding_ms"] == again["metrics"]["search_ms"] == 0
    cache = client.get("/health").json()["cache"]
    assert cache["response_entries"] == 1 and cache["hit_rate"] == 0.5


def test_limit_caps_results(client: TestClient) -> None:
    docs = [
        {"source_type": "wiki", "source_id": f"note-{i}", "content": f"Release note {i}."}
        for i in range(25)
    ]
    client.post("/v1/knowledge/documents", json={"documents": docs})
    for limit in (1, 2, 20):
        body = ask(client, query="release note", limit=limit, threshold=0.0)
        assert len(body["results"]) == limit
    assert len(ask(client, query="release note", threshold=0.0)["results"]) == 5


def test_threshold_cuts_low_similarity(client: TestClient) -> None:
    body = ask(client, query="login timeout", threshold=0.99)
    assert body["results"] == []
    assert body["synthesis"] == "The knowledge base has no passage relevant to this question."


@pytest.mark.parametrize(
    ("body", "field", "error_type"),
    [
        ({}, "query", "invalid_query"),
        ({"query": ""}, "query", "invalid_query"),
        ({"query": "   \n"}, "query", "invalid_query"),
        ({"query": "x" * 1001}, "query", "invalid_query"),
        ({"query": 42}, "query", "invalid_query"),
        ({"query": "ok", "limit": 0}, "limit", "invalid_request"),
        ({"query": "ok", "limit": 21}, "limit", "invalid_request"),
        ({"query": "ok", "limit": "5"}, "limit", "invalid_request"),
        ({"query": "ok", "limit": 2.5}, "limit", "invalid_request"),
        ({"query": "ok", "limit": True}, "limit", "invalid_request"),
        ({"query": "ok", "threshold": -0.1}, "threshold", "invalid_request"),
        ({"query": "ok", "threshold": 1.5}, "threshold", "invalid_request"),
        ({"query": "ok", "threshold": "high"}, "threshold", "invalid_request"),
        ({"query": "ok", "sources": ["slack"]}, "sources", "invalid_request"),
        ({"query": "ok", "sources": "jira"}, "sources", "invalid_request"),
        ({"query": "ok", "sources": []}, "sources", "invalid_request"),
        ({"query": "ok", "synthesize": "yes"}, "synthesize", "invalid_request"),
        ({"query": "ok", "stream": 1}, "stream", "invalid_request"),
        ({"query": "ok", "filters": ["a"]}, "filters", "invalid_request"),
        ({"query": "ok", "filters": {"a": [1]}}, "filters.a", "invalid_request"),
        ({"query": "ok", "treshold": 0.5}, "treshold", "invalid_request"),
        ([1, 2], "body", "invalid_request"),
    ],
)
def test_bad_input_is_a_400_naming_field_and_rule(
    client: TestClient, body: Any, field: str, error_type: str
) -> None:
    response = client.post(QUERY, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == error_type
    assert error["details"]["field"] == field
    assert error["message"].startswith(f"{field}: ") and error["details"]["rule"]


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe"])
def test_non_json_body_is_a_400(client: TestClient, raw: bytes) -> None:
    response = client.post(QUERY, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_json"
    assert response.json()["error"]["details"]["field"] == "body"


def test_body_over_64_kib_is_a_413(client: TestClient) -> None:
    response = client.post(QUERY, json={"query": "x", "pad": "y" * 70000})
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "payload_too_large"


def test_chunked_body_over_the_limit_is_a_413(client: TestClient) -> None:
    def chunks() -> Any:
        for _ in range(20):
            yield b" " * 4096

    response = client.post(QUERY, content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_unknown_route_is_a_404_listing_the_routes(client: TestClient) -> None:
    response = client.get("/v1/knowledge/nope")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "not_found"
    assert "POST /v1/knowledge/query" in error["details"]["routes"]
    assert "GET /health" in error["details"]["routes"]


def test_wrong_method_is_a_405(client: TestClient) -> None:
    response = client.get(QUERY)
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "method_not_allowed"
    assert response.json()["error"]["details"]["allowed"] == "POST"
    assert "POST" in response.headers["allow"]


def test_detail_returns_the_full_record(client: TestClient) -> None:
    result = ask(client, query="create a test case", sources=["wiki"])["results"][0]
    for key in (result["source_id"], result["id"], result["metadata"]["document_id"]):
        body = client.get(f"/v1/knowledge/detail/wiki/{key}").json()
        assert body["source_id"] == "https://wiki.example.com/aoma/test-cases"
        assert "Link a test case to a Jira ticket" in body["content"]
        assert [c["section"] for c in body["chunks"]] == ["", "Linking"]


def test_detail_looks_in_the_named_collection(client: TestClient) -> None:
    record = {"source_type": "knowledge", "source_id": "KB-7", "content": "Team A's own runbook."}
    posted = client.post("/v1/knowledge/documents", json={**record, "collection": "team-a"})
    assert posted.status_code in (200, 201)
    found = client.get("/v1/knowledge/detail/knowledge/KB-7?collection=team-a")
    assert found.status_code == 200 and found.json()["content"] == "Team A's own runbook."
    elsewhere = client.get("/v1/knowledge/detail/knowledge/KB-7")
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["details"]["collection"] == "default"
    bad = client.get("/v1/knowledge/detail/knowledge/KB-7?collection=../etc")
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "collection"


def test_detail_unknown_id_is_a_404_and_unknown_type_a_400(client: TestClient) -> None:
    missing = client.get("/v1/knowledge/detail/jira/SIAM-999")
    assert missing.status_code == 404
    assert missing.json()["error"]["details"] == {
        "type": "jira",
        "id": "SIAM-999",
        "collection": "default",
        "request_id": missing.headers["x-request-id"],
    }
    wrong_type = client.get("/v1/knowledge/detail/git/SIAM-101")
    assert wrong_type.status_code == 404
    bad = client.get("/v1/knowledge/detail/slack/SIAM-101")
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "type"
    assert set(SOURCE_TYPES) <= set(bad.json()["error"]["message"].replace(",", "").split())


def test_documents_create_get_delete(client: TestClient) -> None:
    doc = {
        "source_type": "jira",
        "source_id": "SIAM-555",
        "title": "Export crash",
        "content": "Exporting a playlist with 500 tracks crashes the exporter.",
        "metadata": {"priority": "low"},
    }
    created = client.post("/v1/knowledge/documents", json=doc)
    assert created.status_code == 201 and created.json()["indexed"] == 1
    doc_id = created.json()["ids"][0]
    again = client.post("/v1/knowledge/documents", json=doc).json()
    assert again["indexed"] == 0 and again["skipped"] == 1
    fetched = client.get(f"/v1/knowledge/documents/{doc_id}").json()
    assert fetched["metadata"] == {"priority": "low"} and fetched["title"] == "Export crash"
    assert client.delete(f"/v1/knowledge/documents/{doc_id}").json()["deleted"] == doc_id
    assert client.get(f"/v1/knowledge/documents/{doc_id}").status_code == 404
    assert client.delete(f"/v1/knowledge/documents/{doc_id}").status_code == 404


def test_documents_batch_and_validation(client: TestClient) -> None:
    docs = [
        {"source_type": "wiki", "source_id": f"page-{i}", "content": f"Page {i} text"}
        for i in range(3)
    ]
    assert client.post("/v1/knowledge/documents", json={"documents": docs}).json()["indexed"] == 3
    bad = client.post("/v1/knowledge/documents", json={"source_type": "wiki", "content": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "source_id"
    bad = client.post("/v1/knowledge/documents", json={"documents": []})
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "documents"


def test_a_write_invalidates_cached_responses(client: TestClient) -> None:
    question = {"query": "playlist export crash", "threshold": 0.3}
    assert ask(client, **question)["results"] == []
    assert ask(client, **question)["metrics"]["cache_hit"] is True
    doc = {
        "source_type": "jira",
        "source_id": "SIAM-556",
        "content": "Playlist export crash when a playlist holds 500 tracks.",
    }
    doc_id = client.post("/v1/knowledge/documents", json=doc).json()["ids"][0]
    after_write = ask(client, **question)
    assert after_write["metrics"]["cache_hit"] is False
    assert after_write["results"][0]["source_id"] == "SIAM-556"
    client.delete(f"/v1/knowledge/documents/{doc_id}")
    after_delete = ask(client, **question)
    assert after_delete["metrics"]["cache_hit"] is False and after_delete["results"] == []


def test_stream_sends_results_synthesis_and_done_events(client: TestClient) -> None:
    with client.stream("POST", QUERY, json={"query": "login timeout", "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = "".join(response.iter_text())
    blocks = [block.split("\n") for block in raw.strip().split("\n\n")]
    events = [e for e in blocks if e[0] != "event: source_results"]  # additive, per source
    assert [e[0] for e in events] == ["event: results", "event: synthesis", "event: done"]
    assert '"SIAM-101"' in events[0][1]


def test_stream_rejects_bad_input_with_a_status(client: TestClient) -> None:
    response = client.post(QUERY, json={"query": "", "stream": True})
    assert response.status_code == 400


def test_a_405_allows_every_method_of_the_path(client: TestClient) -> None:
    """GET and DELETE of a document are two routes; a PUT is told about both."""
    response = client.put("/v1/knowledge/documents/some-id")
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET, HEAD, PATCH"
    assert response.json()["error"]["details"]["allowed"] == "DELETE, GET, HEAD, PATCH"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (QUERY, {"query": "login", "filters": {"\u0000": False}}),
        ("/v1/knowledge/answer", {"query": "login", "filters": {"team\u0000": "qa"}}),
        (QUERY, {"query": "login", "filters": {"team": "q\u0000a"}}),
        (
            "/v1/knowledge/documents",
            {"source_type": "wiki", "source_id": "x", "content": "y", "metadata": {"\u0000": 1}},
        ),
        (QUERY, {"query": "login\u0000 timeout"}),
        ("/v1/knowledge/answer", {"query": "login\u0000"}),
        ("/v1/knowledge/documents", {"source_type": "wiki", "source_id": "x", "content": "\u0000"}),
        (
            "/v1/knowledge/documents",
            {"source_type": "wiki", "source_id": "x", "content": "y", "title": "t\u0000"},
        ),
    ],
)
def test_nul_in_a_text_is_a_400(client: TestClient, path: str, body: dict[str, Any]) -> None:
    """A NUL in a metadata key or value was a 500 (SQLite's JSON path ends at it; found
    by tests/test_fuzz.py); in a question, a title or a text a 503 on Postgres and
    Supabase, which keep no NUL in a text, and taken by the other stores. (A chat
    message's NUL is dropped: tests/test_chat.py.)"""
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert "NUL" in response.json()["error"]["message"]


DOCUMENTS = "/v1/knowledge/documents"
PAGE = '{"source_type": "wiki", "source_id": "n", "content": "Numbers.", '


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (PAGE + '"metadata": {"n": 1' + "0" * 300 + "}}", "metadata.n"),
        (PAGE + '"metadata": {"n": -9223372036854775809}}', "metadata.n"),
        (PAGE + '"metadata": {"n": 9223372036854775808}}', "metadata.n"),
        (PAGE + '"metadata": {"n": -' + "9" * 5000 + "}}", "metadata.n"),
        (
            '{"documents": [' + PAGE + '"metadata": {"a": 1, "n": 1' + "0" * 30 + "}}]}",
            "metadata.n",
        ),
        ('{"query": "login", "limit": 1' + "0" * 30 + "}", "limit"),
    ],
)
def test_an_integer_past_64_bits_is_a_400_naming_it(
    client: TestClient, body: str, field: str
) -> None:
    """It was stored: orjson reads 10**300 as 1e300 and -2**63-1 as -9.22e18."""
    path = QUERY if body.startswith('{"query"') else DOCUMENTS
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["details"]["field"] == field
    assert "signed 64-bit range" in error["message"]


def test_a_long_integer_in_a_field_the_service_ignores_is_no_error(client: TestClient) -> None:
    """OpenAI clients send fields of their own; the service reads none of them."""
    body = '{"messages": [{"role": "user", "content": "login"}], "seed": 1' + "0" * 30 + "}"
    response = client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text


def test_every_accepted_number_reads_back_as_it_was_sent(client: TestClient) -> None:
    numbers = (
        '{"max": 9223372036854775807, "min": -9223372036854775808, "huge": 1e300, '
        '"tenth": 0.1, "whole": 1.0, "digits": 12345678901234567.5, "zero": -0.0}'
    )
    body = PAGE + f'"metadata": {numbers}}}'
    created = client.post(DOCUMENTS, content=body, headers={"content-type": "application/json"})
    assert created.status_code == 201, created.text
    stored = client.get(f"{DOCUMENTS}/{created.json()['ids'][0]}").content
    metadata = orjson.loads(stored)["metadata"]
    assert orjson.dumps(metadata) == orjson.dumps(
        {
            "max": 2**63 - 1,
            "min": -(2**63),
            "huge": 1e300,
            "tenth": 0.1,
            "whole": 1.0,
            "digits": 12345678901234567.5,
            "zero": 0.0,
        }
    )
    assert b"9223372036854775807" in stored and b"1e+300" in stored
