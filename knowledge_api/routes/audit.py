"""GET /v1/knowledge/audit: the trail of writes, newest first; and who a request writes
as (`actor`), for every route that writes to say so."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.ledger import (
    MAX_PAGE,
    Actor,
    AuditQuery,
    audit_query,
    cursor_of,
    key_name,
    moment,
    optional_collection,
    page_size,
    position,
)
from knowledge_api.validation import COLLECTION_PATTERN
from knowledge_api.web.fields import Custom
from knowledge_api.web.http import JSONResponse, service
from knowledge_api.web.schema import STRING, array, nullable, obj


def actor(request: Request) -> Actor:
    """Who writes: the request's key (`-` with keys off) and its request id."""
    state = request.state
    return Actor(str(getattr(state, "key_name", "-")), getattr(state, "request_id", None))


LIMIT = Custom(
    "limit",
    f"Entries on the page (1-{MAX_PAGE}).",
    50,
    page_size,
    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
)
CURSOR = Custom("cursor", "next_cursor of the page before.", None, position, {"type": "string"})
KEY = Custom("key", "Only this key's writes (or cli:<user>, kb-sync).", None, key_name, STRING)
COLLECTION = Custom(
    "collection",
    "Only writes to this collection.",
    None,
    optional_collection,
    {"type": "string", "pattern": COLLECTION_PATTERN},
)
SINCE = Custom(
    "since",
    "At or after (ISO 8601 date or time, UTC; empty: no bound).",
    None,
    moment("since"),
    STRING,
)
UNTIL = Custom(
    "until", "Before (ISO 8601 date or time, UTC; empty: no bound).", None, moment("until"), STRING
)
PARAMETERS = (LIMIT, CURSOR, KEY, COLLECTION, SINCE, UNTIL)
ENTRY = obj(
    {
        "id": {"type": "integer"},
        "at": STRING,
        "key": STRING,
        "action": STRING,
        "collection": nullable(STRING),
        "changes": {"type": "object"},
        "request_id": nullable(STRING),
    }
)
RESPONSE = obj({"entries": array(ENTRY), "next_cursor": nullable(STRING)})


def query_of(values: dict[str, Any]) -> AuditQuery:
    """An audit page asked for by query parameters (see ledger.audit_query)."""
    return audit_query(values)


async def audit(request: Request) -> Response:
    query = query_of(dict(request.query_params))
    entries = await service(request).audit_page(query)
    last = entries[-1].id if len(entries) == query.limit else None
    return JSONResponse(
        {
            "entries": [entry.view() for entry in entries],
            "next_cursor": None if last is None else cursor_of(last),
        }
    )
