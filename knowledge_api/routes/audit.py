"""GET /v1/knowledge/audit: the trail of writes, newest first; and who a request writes
as (`actor`), for every route that writes to say so."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, date, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import Actor, AuditQuery, stamp
from knowledge_api.validation import COLLECTION_PATTERN, collection_name
from knowledge_api.web.fields import STRING, Custom, array, nullable, obj
from knowledge_api.web.http import JSONResponse, service

MAX_PAGE = 200
MAX_ID = 2**63 - 1
"""The largest entry id a store keeps (a signed 64-bit integer)."""


def actor(request: Request) -> Actor:
    """Who writes: the request's key (`-` with keys off) and its request id."""
    state = request.state
    return Actor(str(getattr(state, "key_name", "-")), getattr(state, "request_id", None))


def page_size(value: Any) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if not 1 <= size <= MAX_PAGE:
        raise InvalidRequest("limit", f"must be an integer from 1 to {MAX_PAGE}")
    return size


def cursor_of(entry_id: int) -> str:
    return base64.urlsafe_b64encode(f"audit:{entry_id}".encode()).decode().rstrip("=")


def position(value: Any) -> int | None:
    """The entry id an opaque cursor stands for."""
    if value is None:
        return None
    try:
        decoded = base64.urlsafe_b64decode(str(value) + "=" * (-len(str(value)) % 4)).decode()
        kind, _, entry_id = decoded.partition(":")
        if kind == "audit" and entry_id.isdigit() and int(entry_id) <= MAX_ID:
            return int(entry_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest("cursor", "must be the next_cursor of a previous page")


def moment(name: str) -> Any:
    def parse(value: Any) -> str | None:
        """A date (its midnight, UTC) or a date and time (UTC unless it says), within
        years 1 to 9999 once in UTC; empty, as absent: no bound."""
        if value is None or value == "":
            return None
        try:
            text = str(value).replace("Z", "+00:00")
            parsed = (
                datetime.fromisoformat(text)
                if "T" in text or " " in text
                else datetime.combine(date.fromisoformat(text), datetime.min.time())
            )
            return stamp(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))
        except ValueError:
            raise InvalidRequest(name, "must be an ISO 8601 date or date and time") from None
        except OverflowError:
            raise InvalidRequest(
                name, "must be a moment of the years 1 to 9999 once in UTC"
            ) from None

    return parse


def key_name(value: Any) -> str | None:
    return None if value is None else str(value)


def optional_collection(value: Any) -> str | None:
    return None if value is None else collection_name(value, "collection")


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
    """An audit page asked for by query parameters (also `knowledge-api audit`'s); an
    unknown parameter is refused, as every listing refuses it."""
    validation.reject_unknown(values, [field.name for field in PARAMETERS])
    return AuditQuery(
        limit=LIMIT.parse(values, LIMIT.default),
        before=CURSOR.parse(values, None),
        actor=KEY.parse(values, None),
        collection=COLLECTION.parse(values, None),
        since=SINCE.parse(values, None),
        until=UNTIL.parse(values, None),
    )


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
