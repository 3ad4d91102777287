from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.models import DEFAULT_COLLECTION
from knowledge_api.routes.http import JSONResponse, service


async def detail(request: Request) -> Response:
    params = request.path_params
    collection = request.query_params.get("collection", DEFAULT_COLLECTION)
    return JSONResponse(await service(request).detail(params["type"], params["id"], collection))
