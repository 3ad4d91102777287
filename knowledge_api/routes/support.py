"""POST /v1/knowledge/support: the sidecar's retrieve_knowledge, which never fails.

Even a malformed body is answered 200 with the fallback shape and the reason in `gaps`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.usecases import support as use
from knowledge_api.views import FILTERS
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, Custom, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import INTEGER, NUMBER, STRING, array, enum, obj

SUPPORT = Body(
    "SupportRequest",
    Text("intent", "Primary intent from classification, e.g. not_hashing.", "", max_length=200),
    Text("message", "The customer's latest message.", max_length=use.MESSAGE_MAX),
    Custom(
        "metadata",
        "Optional product (articles for other devices are left out) and attachments.",
        None,
        shape={"type": "object", "properties": {"product": {"type": "string", "maxLength": 200}}},
    ),
    FILTERS,
)

SOURCE = obj(
    {
        "title": {**STRING, "maxLength": use.TITLE_MAX},
        "url": {**STRING, "maxLength": use.URL_MAX},
        "relevance_score": {**NUMBER, "maximum": 1},
        "excerpt": {**STRING, "maxLength": use.EXCERPT_MAX},
        "last_updated": STRING,
    }
)
RESPONSE = obj(
    {
        "sources_consulted": array(SOURCE, maxItems=use.MAX_SOURCES),
        "coverage": enum("high", "medium", "low", "none"),
        "gaps": array(STRING),
        "retrieval_time_ms": {**INTEGER, "minimum": 0},
    }
)
"""What `use.retrieve` answers, the fallback included."""


async def support(request: Request) -> Response:
    """The body's fields go to the use case, which validates them as the in-process
    contract does; only the JSON itself and unknown fields are checked here."""
    caller = access(request)
    caller.collection(service(request).settings.support_collection)
    try:
        body = validation.require_object(await read_json(request))
        validation.reject_unknown(body, SUPPORT.names)
    except KnowledgeAPIError as e:
        return JSONResponse(use.invalid(e))
    answer = await use.retrieve(
        service(request),
        body.get("intent"),
        body.get("message"),
        body.get("metadata"),
        body.get("filters"),
        caller.principals,
    )
    return JSONResponse(answer)
