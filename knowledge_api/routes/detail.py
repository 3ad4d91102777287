"""GET /v1/knowledge/detail/{type}/{id}: the full record behind a result."""

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES
from knowledge_api.routes.access import access
from knowledge_api.routes.http import JSONResponse, service
from knowledge_api.routes.views import document_view


async def detail(request: Request) -> Response:
    source_type, key = request.path_params["type"], request.path_params["id"]
    if source_type not in SOURCE_TYPES:
        raise InvalidRequest("type", f"must be one of: {', '.join(SOURCE_TYPES)}")
    collection = access(request).collection(
        validation.collection_name(request.query_params.get("collection", DEFAULT_COLLECTION))
    )
    doc = await service(request).find_document(source_type, key, collection)
    if doc is None:
        raise NotFound(
            f"no {source_type} record with id {key!r} in collection {collection!r}",
            type=source_type,
            id=key,
            collection=collection,
        )
    return JSONResponse(document_view(doc))
