"""POST /v1/knowledge/query: results fused from every source, and a synthesis written
from them; with `stream: true` as Server-Sent Events."""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import InvalidQuery
from knowledge_api.principals import fingerprint
from knowledge_api.routes.views import (
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
    translation,
    zeroed_on_hit,
)
from knowledge_api.service import KnowledgeService, Served
from knowledge_api.spans import Unit
from knowledge_api.usecases import query as use
from knowledge_api.usecases.query import QueryParams, QueryResult
from knowledge_api.web.access import Access, access
from knowledge_api.web.fields import (
    BOOLEAN,
    NUMBER,
    STRING,
    Boolean,
    Number,
    Text,
    array,
    obj,
)
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.observe import note_cache_hit
from knowledge_api.web.sse import event_stream, events_schema

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


async def query(request: Request) -> Response:
    params, stream, unit = parse(await read_json(request))
    caller = access(request)
    caller.searches(params.searched)
    params = caller.asking(params)
    client = client_id(caller, request.client.host if request.client else "")
    if stream:
        events = use.events(service(request), params, client)
        return await event_stream(events, translation("synthesis", partial(done_event, unit=unit)))
    served = await use.query(service(request), params, client)
    note_cache_hit(served.cache_hit)
    return JSONResponse(render(served, unit))


def client_id(caller: Access, host: str) -> str:
    """Who asked, for the log of what each client asks next (prefetching): the key, the
    principals it read with (each user a key delegates for has a log of its own) and
    the address."""
    reading = "" if caller.principals is None else f"#{fingerprint(caller.principals)}"
    return f"{caller.name}{reading}@{host}"


def followed_up(
    request_body: bytes, caller: Access, host: str, service: KnowledgeService, value: QueryResult
) -> None:
    """A query answered without the use case (routes/hot.py) still goes into the log
    of what each client asks next, and its follow-ups are prefetched for the same
    principals."""
    if service.prefetcher.enabled:
        params = caller.asking(parse(orjson.loads(request_body))[0])
        use.prefetch(service, params, client_id(caller, host), value.hits)


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


def done_event(served: Served[QueryResult], unit: Unit = "codepoints") -> dict[str, Any]:
    """The last event: the whole synthesis, its citations, where the next page starts,
    the counts, the metrics and warnings."""
    note_cache_hit(served.cache_hit)
    body = render(served, unit)
    kept = ("query_id", "synthesis", "synthesizer", "citations", "next_offset", "facets")
    final: dict[str, Any] = {k: body[k] for k in (*kept, "facets_cut") if k in body}
    return {**final, "metrics": body["metrics"], "warnings": body.get("warnings", [])}


sse_event = translation("synthesis", done_event)
"""`source_results` as each source answers, `results` in the fused order, `synthesis`
deltas (and `reset`), then `done`."""
EVENTS = events_schema("source_results", "results", "synthesis", "reset", "done", "error")
"""A stream's events; `error` (the error shape) ends a stream that failed after it began."""


ROUTE: dict[str, Any] = {
    "endpoint": query,
    "summary": "Search every source; optionally a synthesis with citations.",
    "body": QUERY,
    "response": RESPONSE,
    "events": EVENTS,
}
