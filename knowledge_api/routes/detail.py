"""GET /v1/knowledge/detail/{type}/{id}: the full record behind a result."""

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import NotFound
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES
from knowledge_api.routes.catalog import source_filter
from knowledge_api.validation import SOURCE_PATTERN
from knowledge_api.views import DOCUMENT, OFFSETS, document_view
from knowledge_api.web.access import access
from knowledge_api.web.fields import CollectionName, Custom, OneOf, Text
from knowledge_api.web.http import JSONResponse, service

TYPE = OneOf("type", "The result's source_type.", allowed=SOURCE_TYPES)
ID = Text("id", "The result's source_id (it may contain '/').", max_length=500, strip=False)
COLLECTION = CollectionName("collection", "The collection it is in.", DEFAULT_COLLECTION)
SOURCE = Custom(
    "source",
    "The source whose record to show, when several sources hold one of this source_id "
    "(a 409 `ambiguous_document` lists them in `details.sources`); empty: the record of "
    "no source.",
    None,
    check=source_filter,
    shape={"type": "string", "pattern": f"^$|{SOURCE_PATTERN}"},
)
PARAMETERS = (TYPE, ID, COLLECTION, SOURCE, OFFSETS)
"""The path's type and id, and the query's collection, source and offsets unit."""
RESPONSE = DOCUMENT


async def detail(request: Request) -> Response:
    source_type = TYPE.parse(request.path_params, TYPE.default)
    key = request.path_params["id"]
    query = dict(request.query_params)
    caller = access(request)
    collection = caller.collection(COLLECTION.parse(query, COLLECTION.default))
    source = SOURCE.parse(query, SOURCE.default)
    unit = OFFSETS.parse(query, OFFSETS.default)
    knowledge = service(request)
    doc = await knowledge.find_document(source_type, key, collection, source, caller.principals)
    if doc is None:
        await knowledge.require_collection(collection, caller.principals)
        raise NotFound(
            f"no {source_type} record with id {key!r} in collection {collection!r}",
            type=source_type,
            id=key,
            collection=collection,
        )
    return JSONResponse(document_view(doc, unit))
