"""POST /v1/knowledge/retrieve and /v1/knowledge/validate (the RAG contract)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidQuery, InvalidRequest
from knowledge_api.models import DEFAULT_COLLECTION, SearchHit
from knowledge_api.usecases import retrieval as use
from knowledge_api.usecases.retrieval import (
    QueryValidation,
    Retrieved,
    RetrieveParams,
    ValidateParams,
    Validation,
)
from knowledge_api.views import (
    COLLECTIONS,
    FACET_COUNTS,
    FACETS,
    FACETS_CUT,
    FILTERS,
    NEXT_OFFSET,
    OFFSET,
    RANKING,
    RANKING_RAN,
    facets_view,
    placed,
)
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, CollectionName, Custom, Integer, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import BOOLEAN, INTEGER, NUMBER, STRING, array, nullable, obj

QUERY_MAX_LENGTH = 999  # "less than 1000 characters"
MAX_TEST_QUERIES = 50
COLLECTION = CollectionName("collection", "The collection to search.")
SEARCHED = CollectionName(
    "collection", "The collection to search (required unless `collections` names them).", None
)
TOP_K = Integer("top_k", "Most chunks returned.", 5, low=1, high=100)
NOT_BLANK = {"type": "string", "minLength": 1, "pattern": validation.NOT_BLANK_PATTERN}
STRINGS = {"type": "array", "items": NOT_BLANK, "minItems": 1}

RETRIEVE = Body(
    "RetrieveRequest",
    Text("query", "The query text.", max_length=QUERY_MAX_LENGTH, error=InvalidQuery),
    SEARCHED,
    COLLECTIONS,
    TOP_K,
    Text(
        "query_embedding_model",
        "The model the query is embedded with: must be the collections' own.",
        "",
        max_length=200,
    ),
    FILTERS,
    OFFSET,
    RANKING,
    FACETS,
)


def test_queries(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TEST_QUERIES:
        raise InvalidRequest("test_queries", f"must be a list of 1 to {MAX_TEST_QUERIES} queries")
    return tuple(
        validation.text(
            {f"test_queries[{i}]": q},
            f"test_queries[{i}]",
            max_length=QUERY_MAX_LENGTH,
            error=InvalidQuery,
        ).strip()
        for i, q in enumerate(value)
    )


VALIDATE = Body(
    "ValidateRequest",
    COLLECTION,
    Custom(
        "test_queries",
        f"Queries to run (1-{MAX_TEST_QUERIES}).",
        check=test_queries,
        shape={
            **STRINGS,
            "items": {**NOT_BLANK, "maxLength": QUERY_MAX_LENGTH},
            "maxItems": MAX_TEST_QUERIES,
        },
    ),
    Custom(
        "expected_sources",
        "Source URLs or ids each test query should find, for nDCG, recall and MRR.",
        [],
        shape={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "query": {**NOT_BLANK, "description": "One of test_queries."},
                    "sources": STRINGS,
                },
                "required": ["query", "sources"],
                "additionalProperties": False,
            },
        },
    ),
    Integer("consistency_runs", "Runs of each query, for consistency.", 3, low=1, high=10),
    TOP_K,
)


def parse_retrieve(payload: Any) -> RetrieveParams:
    body = validation.require_object(payload, "body")
    if "collection" not in body and "collections" not in body:
        raise InvalidRequest("collection", "is required (or several in collections)")
    return RetrieveParams(**RETRIEVE.parse(body, defaults={"collection": DEFAULT_COLLECTION}))


def parse_validate(payload: Any) -> ValidateParams:
    values = VALIDATE.parse(payload)
    queries = values["test_queries"]
    return ValidateParams(
        collection=values["collection"],
        test_queries=queries,
        expected_sources=expected_sources(values["expected_sources"], queries),
        consistency_runs=values["consistency_runs"],
        top_k=values["top_k"],
    )


def expected_sources(value: Any, queries: Sequence[str]) -> dict[str, frozenset[str]]:
    """[{"query": one of test_queries, "sources": [source URL or id, ...]}] -> by query."""
    if not isinstance(value, list):
        raise InvalidRequest("expected_sources", "must be a list of {query, sources} objects")
    mapping: dict[str, frozenset[str]] = {}
    for i, item in enumerate(value):
        where = f"expected_sources[{i}]"
        body = validation.require_object(item, where)
        validation.reject_unknown(body, ("query", "sources"))
        query = body.get("query")
        if not isinstance(query, str) or query.strip() not in queries:
            raise InvalidRequest(f"{where}.query", "must be one of test_queries")
        sources = body.get("sources")
        if (
            not isinstance(sources, list)
            or not sources
            or not all(isinstance(s, str) and s.strip() for s in sources)
        ):
            raise InvalidRequest(
                f"{where}.sources", "must be a non-empty list of source URLs or ids"
            )
        mapping[query.strip()] = frozenset(s.strip() for s in sources)
    return mapping


async def retrieve(request: Request) -> Response:
    params = parse_retrieve(await read_json(request))
    access(request).searches(params.searched)
    params = access(request).asking(params)
    found = await use.retrieve(service(request), params)
    return JSONResponse(render_retrieved(found))


async def validate(request: Request) -> Response:
    params = parse_validate(await read_json(request))
    params = access(request).asking(params)
    report = await use.validate(service(request), params)
    return JSONResponse(render_validation(report))


CHUNK = obj(
    {
        "content": STRING,
        "source_url": STRING,
        "page_title": STRING,
        "section_hierarchy": STRING,
        "chunk_index": INTEGER,
        "similarity_score": NUMBER,
        "vector_id": STRING,
        "collection": {**STRING, "description": "The collection the chunk is in."},
    },
    {"start": INTEGER, "end": INTEGER, "page": INTEGER},
)
"""`start`, `end`: where the chunk sits in its document's text (code points), `page`
its PDF page, when the store has them."""
TRUE = {"const": True}
RETRIEVED = obj(
    {
        "success": TRUE,
        "retrieved_chunks": array(CHUNK),
        "query_embedding": nullable(obj({"vector": array(NUMBER), "model": STRING})),
        "next_offset": NEXT_OFFSET,
        "metrics": obj(
            {"response_time_ms": NUMBER, "retrieval_count": INTEGER}, {"ranking": RANKING_RAN}
        ),
    },
    {"warnings": array(STRING), "facets": FACET_COUNTS, "facets_cut": FACETS_CUT},
)
"""The body `render_retrieved` returns."""
QUERY_VALIDATION = obj(
    {
        "query": STRING,
        "retrieved_chunks": array(CHUNK),
        "relevance_valid": BOOLEAN,
        "metadata_correct": BOOLEAN,
        "consistency_score": NUMBER,
        "validation_metrics": obj(
            {
                "accuracy": nullable(NUMBER),
                "relevance_score": NUMBER,
                "consistency_variance": NUMBER,
            }
        ),
    },
    {"retrieval_metrics": obj({}, extra=NUMBER)},
)
VALIDATED = obj(
    {
        "success": TRUE,
        "validation_results": array(QUERY_VALIDATION),
        "overall_validation": obj({"passed": BOOLEAN, "summary": STRING, "score": NUMBER}),
    }
)
"""The body `render_validation` returns."""


def render_retrieved(found: Retrieved) -> dict[str, Any]:
    body: dict[str, Any] = {
        "success": True,
        "retrieved_chunks": [chunk_view(hit) for hit in found.hits],
        "query_embedding": None
        if found.vector is None
        else {"vector": [round(float(x), 6) for x in found.vector], "model": found.model},
        "next_offset": found.next_offset,
        "metrics": {
            "response_time_ms": found.response_ms,
            "retrieval_count": len(found.hits),
            "ranking": found.ranking,
        },
    }
    if found.warnings:
        body["warnings"] = found.warnings
    if found.facets is not None:
        body.update(facets_view(found.facets))
    return body


def chunk_view(hit: SearchHit) -> dict[str, Any]:
    chunk = hit.chunk
    return {
        "content": chunk.content,
        "source_url": use.source_url(hit),
        "page_title": chunk.title,
        "section_hierarchy": chunk.section,
        "chunk_index": chunk.chunk_index,
        "similarity_score": round(hit.similarity, 4),
        "vector_id": chunk.id,
        "collection": hit.collection,
        **placed(chunk),
    }


def render_validation(report: Validation) -> dict[str, Any]:
    return {
        "success": True,
        "validation_results": [query_validation_view(result) for result in report.results],
        "overall_validation": {
            "passed": report.passed,
            "summary": report.summary,
            "score": round(report.score, 4),
        },
    }


def query_validation_view(result: QueryValidation) -> dict[str, Any]:
    accuracy = result.accuracy
    view: dict[str, Any] = {
        "query": result.query,
        "retrieved_chunks": [chunk_view(hit) for hit in result.hits],
        "relevance_valid": result.relevance_valid,
        "metadata_correct": result.metadata_correct,
        "consistency_score": round(result.consistency_score, 4),
        "validation_metrics": {
            "accuracy": None if accuracy is None else round(accuracy, 4),
            "relevance_score": round(result.relevance_score, 4),
            "consistency_variance": round(result.consistency_variance, 6),
        },
    }
    if result.retrieval_metrics is not None:
        metrics = result.retrieval_metrics
        view["retrieval_metrics"] = {name: round(value, 4) for name, value in metrics.items()}
    return view
