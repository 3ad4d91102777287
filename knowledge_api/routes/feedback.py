"""POST /v1/knowledge/feedback: a reader's rating of an answer; GET (admin) pages the
ratings, newest first."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import Rating, cursor_of
from knowledge_api.routes.audit import CURSOR, LIMIT, SINCE, actor
from knowledge_api.usecases import feedback as use
from knowledge_api.web.access import Gate, access, caller_name
from knowledge_api.web.fields import Body, Custom, OneOf, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import INTEGER, STRING, array, nullable, obj

MAX_CITED = 100
HEX = "[0-9a-fA-F]"
QUERY_ID_PATTERN = f"^({use.CHAT_PREFIX})?{HEX}{{8}}(-{HEX}{{4}}){{3}}-{HEX}{{12}}$"
"""A UUID as the service writes it (hyphenated), or an OpenAI completion id: the
document and the parser hold the same rule."""


def query_id(value: Any) -> str:
    """A query_id the service returned (or an OpenAI completion id, chatcmpl-<id>)."""
    if not isinstance(value, str) or re.fullmatch(QUERY_ID_PATTERN, value) is None:
        raise InvalidRequest(
            "query_id", "must be the query_id of a response (a UUID, or chatcmpl-<UUID>)"
        )
    return str(uuid.UUID(use.query_id_of(value)))


def cited(value: Any) -> list[int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_CITED
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in value)
    ):
        raise InvalidRequest(
            "cited", f"must be a list of 1 to {MAX_CITED} citation numbers (1 or more)"
        )
    return sorted(set(value))


FEEDBACK = Body(
    "FeedbackRequest",
    Custom(
        "query_id",
        "The query_id of the answer or query rated (or the OpenAI completion id).",
        check=query_id,
        shape={**STRING, "pattern": QUERY_ID_PATTERN},
    ),
    OneOf("rating", "Whether the answer was right.", allowed=("up", "down")),
    Text("comment", "What was right or wrong.", "", max_length=2000),
    Custom(
        "cited",
        "The citation numbers [n] the reader found right (1-based).",
        None,
        cited,
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
    ),
    Text(
        "expected_source",
        "The source the answer should have found: its source_id (a Jira key, a URL) or "
        "document id.",
        "",
        max_length=500,
    ),
)
CREATED = obj({"success": {"type": "boolean"}, "id": INTEGER, "query_id": STRING})
RATING = obj(
    {
        "id": INTEGER,
        "at": STRING,
        "query_id": STRING,
        "rating": STRING,
        "comment": nullable(STRING),
        "cited": nullable(array(INTEGER)),
        "expected_source": nullable(STRING),
        "key": STRING,
        "request_id": nullable(STRING),
        "query": nullable(STRING),
        "collection": nullable(STRING),
        "kind": nullable(STRING),
    }
)
PAGE = obj({"ratings": array(RATING), "next_cursor": nullable(STRING)})
PARAMETERS = (LIMIT, CURSOR, SINCE)


async def rate(request: Request) -> Response:
    values = FEEDBACK.parse(await read_json(request))
    gate: Gate = request.app.state.gate
    if gate.ratings is not None:
        gate.ratings.take(caller_name(request))
    who = actor(request)
    rating = Rating(
        values["query_id"],
        values["rating"],
        who.name,
        values["comment"] or None,
        values["cited"],
        values["expected_source"] or None,
        who.request_id,
    )
    caller = access(request)
    rating_id, answered = await use.rate(
        service(request), rating, caller.collection, caller.principals
    )
    changed = {"id": rating_id, "query_id": rating.query_id, "rating": rating.rating}
    await service(request).audit(who, "POST /v1/knowledge/feedback", answered.collection, changed)
    return JSONResponse(
        {"success": True, "id": rating_id, "query_id": rating.query_id}, status_code=201
    )


async def ratings(request: Request) -> Response:
    params = dict(request.query_params)
    validation.reject_unknown(params, [field.name for field in PARAMETERS])
    limit = LIMIT.parse(params, LIMIT.default)
    page = await service(request).feedback_log.ratings(
        limit, CURSOR.parse(params, None), SINCE.parse(params, None)
    )
    views = []
    for each in page:
        answered = await service(request).find_answered(each.query_id)
        views.append(
            {
                **each.view(),
                "query": answered.query if answered else None,
                "collection": answered.collection if answered else None,
                "kind": answered.kind if answered else None,
            }
        )
    last = page[-1].id if len(page) == limit else None
    return JSONResponse(
        {"ratings": views, "next_cursor": None if last is None else cursor_of(last)}
    )
