"""POST /v1/knowledge/query: results fused from every source, and a synthesis written
from them; with `stream: true` as Server-Sent Events."""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.principals import fingerprint
from knowledge_api.service import KnowledgeService, Served
from knowledge_api.spans import Unit
from knowledge_api.usecases import query as use
from knowledge_api.usecases.query import QueryResult
from knowledge_api.views import translation
from knowledge_api.views.query import QUERY, RESPONSE, parse, render
from knowledge_api.web.access import Access, access
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.observe import note_cache_hit
from knowledge_api.web.sse import event_stream, events_schema

ASKED = "query_asked"
"""Where the route leaves the request's parameters as read (with the caller's
principals), its streaming and unit, for the hit path to remember without parsing the
body again (routes/hot.py)."""


async def query(request: Request) -> Response:
    params, stream, unit = parse(await read_json(request))
    caller = access(request)
    caller.searches(params.searched)
    params = caller.asking(params)
    setattr(request.state, ASKED, (params, stream, unit))
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
