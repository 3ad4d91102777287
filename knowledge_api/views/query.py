"""The query's contract, POST /v1/knowledge/query's body and reply: parsed and rendered
the same way by the route, its hit path, the MCP tool and the `query` command (whose
`--json` output is the HTTP reply)."""

from __future__ import annotations

from typing import Any

from knowledge_api.errors import InvalidQuery
from knowledge_api.service import Served
from knowledge_api.spans import Unit
from knowledge_api.usecases.query import QueryParams, QueryResult
from knowledge_api.views import (
    CITATIONS,
    FACET_COUNTS,
    FACETS,
    FACETS_CUT,
    NEXT_OFFSET,
    OFFSET,
    OFFSETS,
    RANKING_RAN,
    RESULT,
    SYNTHESIZER,
    citations_view,
    facets_view,
    result_view,
    search_body,
    zeroed_on_hit,
)
from knowledge_api.web.fields import Boolean, Number, Text
from knowledge_api.web.schema import BOOLEAN, NUMBER, STRING, array, obj

QUERY = search_body(
    "QueryRequest",
    Text("query", "The question or search text.", max_length=1000, error=InvalidQuery),
    "Most results returned.",
    Number("threshold", "Lowest similarity (cosine, 0-1) of a result.", 0.2),
    Boolean("synthesize", "Write an answer from the results.", True),
    OFFSET,
    FACETS,
    OFFSETS,
)


def parse(payload: Any) -> tuple[QueryParams, bool, Unit]:
    """The query's parameters, whether the answer streams, and the unit of offsets."""
    values = QUERY.parse(payload)
    stream = values.pop("stream")
    unit = values.pop("offsets")
    return QueryParams(**values), stream, unit


def render(served: Served[QueryResult], unit: Unit = "codepoints") -> dict[str, Any]:
    result = served.value
    body: dict[str, Any] = {
        "query_id": result.query_id,
        "results": [result_view(hit) for hit in result.hits],
        "next_offset": result.next_offset,
    }
    if result.outcome is not None:
        body["synthesis"] = result.outcome.text
        body["synthesizer"] = result.outcome.view()
        body["citations"] = citations_view(result.outcome, unit)
    if result.warnings:
        body["warnings"] = list(result.warnings)
    if result.facets is not None:
        body.update(facets_view(result.facets))
    body["metrics"] = metrics(served)
    return body


METRICS = obj(
    {"total_ms": NUMBER, "cache_hit": BOOLEAN, "embedding_ms": NUMBER, "search_ms": NUMBER},
    {
        "synthesis_ms": NUMBER,
        "rerank_ms": NUMBER,
        "facets_ms": NUMBER,
        "routed": array(STRING),
        "ranking": RANKING_RAN,
    },
)
RESPONSE = obj(
    {
        "query_id": {**STRING, "format": "uuid"},
        "results": array(RESULT),
        "next_offset": NEXT_OFFSET,
        "metrics": METRICS,
    },
    {
        "synthesis": STRING,
        "synthesizer": SYNTHESIZER,
        "citations": CITATIONS,
        "warnings": array(STRING),
        "facets": FACET_COUNTS,
        "facets_cut": FACETS_CUT,
    },
)
"""The body `render` returns (without `stream`)."""


def metrics(served: Served[QueryResult]) -> dict[str, Any]:
    timings = zeroed_on_hit(served.value.timings, served.cache_hit)
    body: dict[str, Any] = {"total_ms": served.total_ms, "cache_hit": served.cache_hit, **timings}
    if served.value.routed is not None:
        body["routed"] = list(served.value.routed)
    if served.value.ranking:
        body["ranking"] = served.value.ranking
    return body
