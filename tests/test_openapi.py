"""GET /openapi.json is generated from the route table, so it lists every route, every
declared field with its limits, the one error shape and each route's security; GET
/docs serves an interactive page for it without reaching the network."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from starlette.testclient import TestClient

from knowledge_api import validation
from knowledge_api.routes import PUBLIC, ROUTES, ApiRoute
from knowledge_api.routes.openapi import ASSETS, document, openapi_path

DOC = document(ROUTES)
SCHEMAS = DOC["components"]["schemas"]


def operation(route: ApiRoute) -> dict[str, Any]:
    op: dict[str, Any] = DOC["paths"][openapi_path(route.path)][route.contract.method.lower()]
    return op


def test_the_served_document_is_the_generated_one(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == DOC


def test_every_route_is_an_operation_and_nothing_else_is() -> None:
    listed = {(path, method.upper()) for path, ops in DOC["paths"].items() for method in ops}
    assert listed == {(openapi_path(r.path), r.contract.method) for r in ROUTES}
    assert "/v1/knowledge/detail/{type}/{id}" in DOC["paths"]
    ids = [op["operationId"] for ops in DOC["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(ROUTES)


def test_every_declared_field_is_documented_with_its_limits() -> None:
    for route in ROUTES:
        if route.contract.body is None:
            assert "requestBody" not in operation(route)
            continue
        schema = SCHEMAS[route.contract.body.name]
        assert set(schema["properties"]) == set(route.contract.body.names)
        assert schema["additionalProperties"] is route.contract.body.others_ignored
    assert [r.path for r in ROUTES if r.contract.body and r.contract.body.others_ignored] == [
        "/v1/chat/completions"  # OpenAI's clients send fields of their own
    ]
    query = SCHEMAS["QueryRequest"]["properties"]
    assert query["query"]["maxLength"] == 1000 and query["query"]["minLength"] == 1
    assert (query["limit"]["minimum"], query["limit"]["maximum"]) == (1, 20)
    assert query["limit"]["type"] == "integer" and query["limit"]["default"] == 5
    assert (query["threshold"]["minimum"], query["threshold"]["maximum"]) == (0, 1)
    assert SCHEMAS["QueryRequest"]["required"] == ["query"]
    assert SCHEMAS["AnswerRequest"]["properties"]["query"]["maxLength"] == 500
    assert SCHEMAS["RetrieveRequest"]["properties"]["top_k"]["maximum"] == 100
    assert SCHEMAS["ValidateRequest"]["properties"]["test_queries"]["maxItems"] == 50
    assert SCHEMAS["Document"]["properties"]["content"]["maxLength"] == 60000
    for body in ("QueryRequest", "RetrieveRequest"):
        offset = SCHEMAS[body]["properties"]["offset"]
        assert (offset["type"], offset["minimum"], offset["maximum"]) == ("integer", 0, 200)
    for body in ("QueryRequest", "AnswerRequest", "RetrieveRequest", "ChatRequest"):
        ranking = SCHEMAS[body]["properties"]["ranking"]["properties"]
        assert ranking["fusion"]["enum"] == ["convex", "rrf"]
        assert (ranking["vector_weight"]["minimum"], ranking["vector_weight"]["maximum"]) == (0, 1)
        half_life = ranking["recency"]["properties"]["half_life_days"]
        assert (half_life["exclusiveMinimum"], half_life["maximum"]) == (0, 36500)
    assert "offset" not in SCHEMAS["AnswerRequest"]["properties"]  # one answer, no pages


def test_a_route_taking_either_of_two_bodies_documents_both() -> None:
    documents = operation(route_at("/v1/knowledge/documents", "POST"))
    schema = documents["requestBody"]["content"]["application/json"]["schema"]
    refs = {ref["$ref"] for ref in schema["anyOf"]}
    assert refs == {"#/components/schemas/Documents", "#/components/schemas/Document"}


def test_path_and_query_parameters_are_typed() -> None:
    detail = {
        p["name"]: p
        for p in operation(route_at("/v1/knowledge/detail/{type}/{id:path}"))["parameters"]
    }
    assert detail["type"]["in"] == "path" and detail["type"]["required"] is True
    assert detail["type"]["schema"]["enum"] == [
        "git",
        "jira",
        "knowledge",
        "wiki",
        "email",
        "metrics",
        "chat",
    ]
    assert detail["id"]["schema"]["type"] == "string"
    assert detail["collection"]["in"] == "query" and detail["collection"]["required"] is False
    assert detail["collection"]["schema"]["default"] == "default"
    doc_id, offsets = operation(route_at("/v1/knowledge/documents/{id}"))["parameters"]
    assert doc_id["in"] == "path" and doc_id["schema"] == {"type": "string", "pattern": "^[^/]+$"}
    assert offsets["in"] == "query" and offsets["schema"]["enum"] == ["codepoints", "utf16"]
    assert detail["offsets"]["schema"]["default"] == "codepoints"


def test_every_error_response_references_the_one_error_shape() -> None:
    error = SCHEMAS["Error"]
    assert error["required"] == ["success", "error"]
    assert error["properties"]["error"]["required"] == ["type", "message", "details"]
    for route in ROUTES:
        for status, response in operation(route)["responses"].items():
            if int(status) in route.contract.statuses:
                continue
            assert response["content"] == {
                "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
            }, (route.path, status)


def test_errors_follow_the_route() -> None:
    def statuses(path: str, method: str = "GET") -> set[str]:
        return set(operation(route_at(path, method))["responses"])

    assert statuses("/v1/knowledge/query", "POST") == {
        "200",
        "400",
        "401",
        "403",
        "404",
        "413",
        "415",
        "421",
        "429",
        "503",
    }
    assert statuses("/v1/knowledge/documents", "POST") >= {"201", "400", "413"}
    assert "200" not in statuses("/v1/knowledge/documents", "POST")
    assert {"404", "503"} <= statuses("/v1/knowledge/documents/{id}", "DELETE")
    assert statuses("/health") == {"200", "503", "421", "429"}
    assert statuses("/v1/knowledge/support", "POST") == {"200", "401", "403", "421", "429"}


def test_security_follows_each_route_scope() -> None:
    schemes = DOC["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearer"]["description"],
    }
    assert "kapi_" in schemes["bearer"]["description"]
    assert (schemes["apiKey"]["in"], schemes["apiKey"]["name"]) == ("header", "X-API-Key")
    for route in ROUTES:
        op = operation(route)
        if route.contract.scope == PUBLIC:
            assert op["security"] == [] and "x-required-scope" not in op
            assert {"401", "403"}.isdisjoint(op["responses"])
        else:
            assert op["security"] == [
                {"bearer": [route.contract.scope]},
                {"apiKey": [route.contract.scope]},
            ]
            assert op["x-required-scope"] == route.contract.scope
            assert route.contract.scope in op["description"]
            assert {"401", "403"} <= set(op["responses"])
    assert operation(route_at("/v1/knowledge/validate", "POST"))["x-required-scope"] == "admin"


def test_streaming_routes_offer_an_event_stream() -> None:
    for route in ROUTES:
        content = operation(route)["responses"][str(route.contract.statuses[0])]["content"]
        assert ("text/event-stream" in content) is route.contract.streams
    assert {r.path for r in ROUTES if r.contract.streams} == {
        "/v1/knowledge/query",
        "/v1/knowledge/answer",
        "/v1/chat",
        "/v1/chat/completions",
    }
    query = operation(route_at("/v1/knowledge/query", "POST"))["responses"]["200"]["content"]
    event = query["text/event-stream"]["schema"]["properties"]
    assert event["event"]["enum"] == [
        "source_results",
        "results",
        "synthesis",
        "reset",
        "done",
        "error",
    ]
    assert event["data"]["contentMediaType"] == "application/json"


def test_every_json_route_declares_its_response() -> None:
    for route in ROUTES:
        if route.contract.media_type == "application/json":
            assert route.contract.response is not None, route.path
            content = operation(route)["responses"][str(route.contract.statuses[0])]["content"]
            assert content["application/json"]["schema"] is route.contract.response


def test_the_document_is_valid_openapi_3_1() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(DOC)
    assert DOC["openapi"] == "3.1.0"


def test_docs_page_loads_the_document_from_this_service_only(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    script = client.get("/docs/docs.js")
    assert script.status_code == 200 and '"/openapi.json"' in script.text
    assert "validatorUrl: null" in script.text
    for text in (page.text, script.text):
        assert not re.search(r"(https?:)?//[a-z0-9]", text, re.IGNORECASE), text
    for src in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        assert src.startswith("/docs/"), src
        assert client.get(src).status_code == 200, src


def test_docs_assets_are_served_from_the_package(client: TestClient) -> None:
    for name, media_type in ASSETS.items():
        response = client.get(f"/docs/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type)
        assert len(response.content) > 500
    assert "SwaggerUIBundle" in client.get("/docs/swagger-ui-bundle.js").text
    missing = client.get("/docs/index.html")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"


def route_at(path: str, method: str = "GET") -> ApiRoute:
    return next(r for r in ROUTES if r.path == path and r.contract.method == method)


def request_schema_accepts(path: str, body: Any) -> bool:
    route = next(r for r in ROUTES if r.path == path and r.contract.method == "POST")
    schema = operation(route)["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**schema, "components": DOC["components"]})
    return bool(validator.is_valid(body))


USER = {"role": "user", "content": "login timeout"}
PAGE = {"source_type": "wiki", "source_id": "p", "content": "Text."}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/knowledge/query", {"query": "login", "filters": {"": 1}}),
        ("/v1/knowledge/query", {"query": "login", "filters": {'a"b': 1}}),
        ("/v1/knowledge/answer", {"query": "login", "filters": {"a\\b": True}}),
        ("/v1/knowledge/documents", {**PAGE, "metadata": {"": 1}}),
        ("/v1/knowledge/documents", {**PAGE, "metadata": {"tab\there": 1}}),
        ("/v1/knowledge/documents", {**PAGE, "metadata": {"team": "qa", "n": 2}}),
        ("/v1/knowledge/query", {"query": "login", "limit": 5.0}),
        ("/v1/knowledge/query", {"query": "\u001e"}),
        ("/v1/knowledge/query", {"query": "\ufeff login"}),
        ("/v1/knowledge/validate", {"collection": "default", "test_queries": ["x" * 1000]}),
        (
            "/v1/knowledge/validate",
            {
                "collection": "default",
                "test_queries": ["login"],
                "expected_sources": [{"query": "login", "sources": [" "]}],
            },
        ),
        ("/v1/chat", {"messages": [USER]}),
        ("/v1/chat", {"messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]}),
        ("/v1/chat", {"messages": [{"role": "assistant", "content": "Hello."}]}),
        ("/v1/chat", {"messages": [{"role": "user", "parts": " ", "content": "login"}]}),
        ("/v1/chat", {"messages": [USER], "threshold": 2}),
        ("/v1/chat/completions", {"model": "knowledge", "messages": [USER], "temperature": 0}),
        ("/v1/chat/completions", {"model": "no such/collection", "messages": [USER]}),
        ("/v1/knowledge/query", {"query": "login", "offset": 200.0}),
        ("/v1/knowledge/query", {"query": "login", "ranking": None}),
        ("/v1/knowledge/query", {"query": "login", "ranking": {"prf": None}}),
        ("/v1/knowledge/query", {"query": "login", "ranking": {"vector_weight": 1}}),
        ("/v1/knowledge/retrieve", {"query": "login", "collection": "default", "offset": -1}),
        ("/v1/knowledge/answer", {"query": "login", "ranking": {"recency": {"field": "x"}}}),
        (
            "/v1/chat",
            {"messages": [USER], "ranking": {"recency": {"half_life_days": 1e-300}}},
        ),
        ("/v1/knowledge/feedback", {"query_id": "0", "rating": "up"}),
        ("/v1/knowledge/feedback", {"query_id": "chatcmpl-x", "rating": "up"}),
    ],
)
def test_the_document_and_the_parsers_agree(client: TestClient, path: str, body: Any) -> None:
    """Cases where they disagreed (found by tests/test_fuzz.py): empty or quoted filter
    and metadata keys, a float that is whole, Python's blanks, expected_sources' shapes,
    a chat body the document did not declare at all."""
    response = client.post(path, json=body)
    assert response.status_code < 500, response.text
    assert request_schema_accepts(path, body) == (response.status_code < 300), response.text


def test_a_chat_route_declares_its_body_as_required(client: TestClient) -> None:
    for path in ("/v1/chat", "/v1/chat/completions"):
        body = operation(next(r for r in ROUTES if r.path == path))["requestBody"]
        assert body["required"] is True
        assert client.post(path).status_code == 415  # no body, no content type


def test_the_blank_pattern_is_what_str_strip_removes() -> None:
    blank = re.compile(validation.NOT_BLANK_PATTERN)
    for code in range(0x110000):
        char = chr(code)
        assert (blank.fullmatch(char) is None) == char.isspace(), hex(code)
