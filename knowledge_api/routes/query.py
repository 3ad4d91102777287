from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.models import QueryRequest
from knowledge_api.routes.http import JSONResponse, read_json, service
from knowledge_api.routes.sse import event_stream


async def query(request: Request) -> Response:
    parsed = QueryRequest.from_payload(await read_json(request))
    if not parsed.stream:
        return JSONResponse(await service(request).query(parsed))
    return await event_stream(service(request).query_events(parsed))
