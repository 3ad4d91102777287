"""The filter language: parsing, its limits and the paths its 400s name, on every route
that searches; the SQL it becomes stays shallow however many conditions it holds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api import filters
from knowledge_api.app import create_app
from knowledge_api.errors import InvalidRequest
from knowledge_api.filters import Combined, Condition, Instant, Negated
from knowledge_api.models import SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.keyword import filter_sql
from tests.conftest import make_settings, opened_sqlite
from tests.test_mcp import connected, load, serving, text_of

MANY_KEYS = {f"k{i}": "v" for i in range(999)}


def refused(value: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        filters.parse(value)
    return caught.value


def test_a_plain_object_is_an_and_of_equalities_in_key_order() -> None:
    tree = filters.parse({"b": 2, "a": "x"})
    assert tree == Combined("$and", (Condition("a", "$eq", "x"), Condition("b", "$eq", 2)))
    assert filters.equalities(tree) == (("a", "x"), ("b", 2))
    assert hash(tree) == hash(filters.parse({"a": "x", "b": 2}))  # part of a cache key


def test_operators_dates_and_combinators_parse_into_a_tree() -> None:
    tree = filters.parse(
        {
            "$or": [{"team": {"$in": ["qa", "qa", "dev"]}}, {"$not": {"n": {"$gt": 3}}}],
            "created_at": {"$gte": "2026-01-01"},
        }
    )
    assert tree == Combined(
        "$and",
        (
            Combined(
                "$or",
                (
                    Condition("team", "$in", ("qa", "dev")),
                    Negated(Condition("n", "$gt", 3)),
                ),
            ),
            Condition("created_at", "$gte", Instant(1767225600000, "2026-01-01")),
        ),
    )
    assert filters.equalities(tree) is None


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("2026-01-01", 1767225600000),
        ("2026-01-01T00:00:00Z", 1767225600000),
        ("2026-01-01T01:00:00+01:00", 1767225600000),
        ("2026-01-01 00:00:00.250", 1767225600250),
    ],
)
def test_dates_are_instants_a_bare_date_midnight_utc(text: str, millis: int) -> None:
    assert filters.millis_of(text) == millis


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        (MANY_KEYS, "filters", "at most 64 conditions"),
        ({"n": {"$in": list(range(101))}}, "filters.n.$in", "1 to 100 values"),
        ({"n": {"$in": []}}, "filters.n.$in", "1 to 100 values"),
        (
            {"$or": [{"a": 1}, {"created_at": {"$gte": "soon"}}]},
            "filters.$or[1].created_at.$gte",
            "ISO 8601",
        ),
        (
            {"$or": [{"a": 1}, {"b": {"$regex": "x"}}]},
            "filters.$or[1].b.$regex",
            "unknown operator",
        ),
        ({"$nor": [{"a": 1}]}, "filters.$nor", "unknown operator"),
        ({"a": {"$gt": "tall"}}, "filters.a.$gt", "a number or an ISO 8601 date"),
        ({"a": {"$gt": True}}, "filters.a.$gt", "a number or an ISO 8601 date"),
        ({"a": {"$exists": "yes"}}, "filters.a.$exists", "true or false"),
        ({"a": {"$contains": ""}}, "filters.a.$contains", "one word"),
        ({"a": {"$contains": "two words"}}, "filters.a.$contains", "one word"),
        ({"a": {}}, "filters.a", "at least one operator"),
        ({"a": None}, "filters.a", "must be a string, number, boolean"),
        ({"a": [1]}, "filters.a", "must be a string, number, boolean"),
        ({"$and": []}, "filters.$and", "non-empty list"),
        ({"$and": [{}]}, "filters.$and[0]", "non-empty object"),
        ({"$not": 3}, "filters.$not", "non-empty object"),
        ({"n": 2**63}, "filters.n", "64 bits"),
        ({"n": {"$in": [1, -(2**63) - 1]}}, "filters.n.$in[1]", "64 bits"),
        ({"n": {"$lt": 10**30}}, "filters.n.$lt", "64 bits"),
        ({"": "x"}, "filters", "field names must be 1-200 characters"),
        ({"$and": [{"": "x"}]}, "filters.$and[0]", "field names must be 1-200 characters"),
        ({"a\u0000": "x"}, "filters", "field names"),
        ({"a": "x\u0000"}, "filters.a", "NUL"),
        ({"created_at": "2026-02-30"}, "filters.created_at", "valid ISO 8601"),
        ({"updated_at": {"$contains": "2026"}}, "filters.updated_at.$contains", "is a date"),
    ],
)
def test_a_bad_filter_is_a_400_naming_its_path(value: Any, field: str, words: str) -> None:
    error = refused(value)
    assert error.status == 400
    assert error.details["field"] == field
    assert words in error.details["rule"]


def nested(depth: int) -> dict[str, Any]:
    tree: dict[str, Any] = {"a": 1}
    for _ in range(depth - 1):
        tree = {"$or": [tree]}
    return tree


def test_depth_is_at_most_eight() -> None:
    assert filters.parse(nested(8)) == Condition("a", "$eq", 1)
    error = refused(nested(9))
    assert error.details["field"] == "filters" + ".$or[0]" * 8
    assert error.details["limit"] == 8 and "8 levels" in error.details["rule"]


def test_sixty_four_conditions_are_fine_sixty_five_are_not() -> None:
    assert filters.parse({f"k{i}": i for i in range(64)}) is not None
    error = refused({"$or": [{f"k{i}": {"$ne": i}} for i in range(65)]})
    assert error.details["limit"] == 64


def test_the_sql_of_a_wide_filter_is_not_one_level_deep_per_condition() -> None:
    """SQLite refuses expression trees deeper than 1,000: a chain of 999 ANDs was a 500.
    Balanced groups keep 5,000 conditions (beyond the limit, to show the shape) about
    thirteen levels deep."""
    wide = Combined("$and", tuple(Condition(f"k{i}", "$eq", "v") for i in range(5000)))
    where, params = filter_sql(SearchFilters(where=wide))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE c (collection, source_type)")
    db.execute("CREATE TABLE d (source_id, metadata, created_at, updated_at)")
    db.execute(f"SELECT 1 FROM c, d WHERE {where}", params).fetchall()


# -- on the routes ------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Any:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        yield client


ROUTES = {
    "/v1/knowledge/query": {"query": "login", "synthesize": False},
    "/v1/knowledge/answer": {"query": "login"},
    "/v1/knowledge/retrieve": {"query": "login", "collection": "default"},
    "/v1/chat": {"messages": [{"role": "user", "parts": [{"type": "text", "text": "login"}]}]},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "login"}]},
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_999_keys_are_a_400_naming_the_limit_on_every_route(client: TestClient, route: str) -> None:
    response = client.post(route, json={**ROUTES[route], "filters": MANY_KEYS})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["details"]["field"] == "filters" and error["details"]["limit"] == 64
    assert "at most 64 conditions" in error["message"]


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_bad_operator_is_a_400_naming_its_path_on_every_route(
    client: TestClient, route: str
) -> None:
    bad = {"$or": [{"a": 1}, {"created_at": {"$after": "2026-01-01"}}]}
    response = client.post(route, json={**ROUTES[route], "filters": bad})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["details"]["field"] == "filters.$or[1].created_at.$after"


def test_a_filter_that_is_not_an_object_is_a_400(client: TestClient) -> None:
    for value in (None, [], "a"):
        body = {"query": "x", "filters": value}
        response = client.post("/v1/knowledge/query", json=body)
        assert response.status_code == 400
        assert response.json()["error"]["details"]["field"] == "filters"


async def test_mcp_search_and_answer_refuse_999_keys_naming_the_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    await load(settings)
    async with serving(settings) as app, connected(app) as client:
        for tool in ("search", "answer"):
            result = await client.call_tool(tool, {"query": "login", "filters": MANY_KEYS})
            assert result.is_error and "at most 64 conditions" in text_of(result), tool
        result = await client.call_tool(
            "answer", {"query": "login timeout", "filters": {"created_at": {"$lt": "2000-01-01"}}}
        )
        assert not result.is_error and "insufficient_context" in text_of(result)


NOTES = [
    ("jira", "N-1", {"team": "qa", "n": 1, "due": "2026-01-10"}),
    ("jira", "N-2", {"team": "dev", "n": 2, "due": "2026-02-10"}),
    ("wiki", "N-3", {"team": "qa", "n": 3, "due": "2026-03-10"}),
    ("wiki", "N-4", {"team": "ops", "n": 4}),
]
WANTED = {"$or": [{"n": {"$gte": 3}}, {"due": {"$lt": "2026-02-01"}}], "team": {"$ne": "ops"}}
"""N-1 (due before February) and N-3 (n >= 3); N-4 is ops."""


def noted(client: TestClient) -> None:
    documents = [
        {
            "source_type": kind,
            "source_id": key,
            "title": f"Upload queue {key}",
            "content": f"The upload queue release note {key}.",
            "metadata": meta,
        }
        for kind, key, meta in NOTES
    ]
    assert client.post("/v1/knowledge/documents", json={"documents": documents}).status_code == 201


def test_operators_filter_the_results_of_every_route(client: TestClient) -> None:
    noted(client)
    query = {"query": "upload queue release note", "threshold": 0, "filters": WANTED}
    found = client.post("/v1/knowledge/query", json={**query, "synthesize": False}).json()
    assert {r["source_id"] for r in found["results"]} == {"N-1", "N-3"}
    answered = client.post("/v1/knowledge/answer", json=query).json()
    assert {s["metadata"]["source_id"] for s in answered["sources"]} <= {"N-1", "N-3"}
    assert answered["sources"]
    retrieve = {"query": query["query"], "collection": "default", "filters": WANTED}
    chunks = client.post("/v1/knowledge/retrieve", json=retrieve).json()["retrieved_chunks"]
    assert sorted(c["page_title"] for c in chunks) == ["Upload queue N-1", "Upload queue N-3"]
    asked = {"role": "user", "parts": [{"type": "text", "text": "upload queue release note"}]}
    chat = {"messages": [asked], "threshold": 0, "filters": {"source_id": {"$in": ["N-2"]}}}
    stream = client.post("/v1/chat", json=chat).text
    parts = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    cited = {p["title"] for p in parts if p["type"] in ("source-url", "source-document")}
    assert cited == {"Upload queue N-2"}
    completion = {"messages": [{"role": "user", "content": "upload"}], "filters": {"n": {"$gt": 9}}}
    said = client.post("/v1/chat/completions", json=completion).json()
    assert "no passage matches" in said["choices"][0]["message"]["content"]


def test_support_takes_a_filter_and_answers_a_bad_one_with_its_reason(client: TestClient) -> None:
    body = {"message": "my upload is stuck", "filters": MANY_KEYS}
    answer = client.post("/v1/knowledge/support", json=body).json()
    assert answer["coverage"] == "none" and "at most 64 conditions" in answer["gaps"][0]
    fine = {"message": "my upload is stuck", "filters": {"device": {"$exists": True}}}
    assert client.post("/v1/knowledge/support", json=fine).status_code == 200


async def test_a_file_written_before_the_value_index_is_filtered_after_its_migration(
    tmp_path: Path,
) -> None:
    """Migration 006 fills `document_values` from the documents already stored."""
    from knowledge_api.models import Chunk, Document, chunk_id
    from knowledge_api.stores.sqlite.store import SQLiteStore

    path = tmp_path / "old.db"
    store = await opened_sqlite(path, "unit-4", 4)
    docs = []
    for i, meta in enumerate(({"n": 1, "due": "2026-01-05"}, {"n": 5, "ok": True}, {})):
        doc = Document("jira", f"O-{i}", f"old note {i}", f"O-{i}", meta)
        doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, doc.content, embedding=_unit(i))]
        docs.append(doc)
    await store.index_documents(docs)
    await store.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TRIGGER documents_values_ad; DROP TABLE document_values; "
        "DROP TRIGGER documents_acl_ad; DROP TABLE document_acl; "
        "ALTER TABLE documents DROP COLUMN acl; PRAGMA user_version = 5;"
    )
    # the columns of sources and chunks that later migrations add (they run again after 006)
    columns = {row[1] for row in db.execute("PRAGMA table_info(sources)")}
    for column in ("root", "connector", "lease_holder", "lease_until"):
        if column in columns:
            db.execute(f"ALTER TABLE sources DROP COLUMN {column}")
    for column in ("start_offset", "end_offset", "page"):
        db.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
    db.commit()
    db.close()
    again = SQLiteStore(path)
    await again.open()
    try:
        for case, wanted in (
            ({"n": {"$gt": 2}}, ["O-1"]),
            ({"due": {"$lt": "2026-02-01"}}, ["O-0"]),
            ({"ok": {"$exists": False}}, ["O-0", "O-2"]),
        ):
            where = SearchFilters(where=filters.parse(case))
            hits = await again.search(SearchRequest("old note", _unit(0), 5, where, 0.0, "vector"))
            assert sorted(h.source_id for h in hits) == wanted, case
    finally:
        await again.close()


def _unit(i: int) -> Any:
    import numpy as np

    vector = np.zeros(4, dtype=np.float32)
    vector[i % 4] = 1.0
    return vector


def test_openapi_declares_the_filter_language_with_its_limits(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schema = document["components"]["schemas"]["Filter"]
    assert "64 conditions" in schema["description"] and "8 levels" in schema["description"]
    operators = schema["additionalProperties"]["anyOf"][1]["properties"]
    assert set(operators) == set(filters.OPERATORS)
    assert operators["$in"]["maxItems"] == 100 and operators["$nin"]["maxItems"] == 100
    for body in ("QueryRequest", "AnswerRequest", "RetrieveRequest", "SupportRequest"):
        properties = document["components"]["schemas"][body]["properties"]
        assert properties["filters"]["$ref"] == "#/components/schemas/Filter", body


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"a": 1, "$or": [{"b": 2}, {"c": 3}]}, "$or"),
        ({"a": 1, "b": {"$gt": 2}}, "$gt"),
        ({"$and": [{"a": 1}, {"$not": {"b": 2}}]}, "$not"),
        ({"a": 1, "source_type": "jira"}, "source_type"),
    ],
)
def test_a_store_of_equalities_only_names_what_it_cannot_apply(value: Any, named: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        filters.require_equalities(filters.parse(value), "existing database (read_only)")
    assert caught.value.details["operator"] == named
    assert filters.require_equalities(filters.parse({"a": 1, "b": True}), "x") == (
        ("a", 1),
        ("b", True),
    )
