from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from knowledge_api.models import QueryRequest
from knowledge_api.routes.http import JSONResponse, read_json, service


async def query(request: Request) -> Response:
    parsed = QueryRequest.from_payload(await read_json(request))
    if not parsed.stream:
        return JSONResponse(await service(request).query(parsed))
    events = service(request).query_events(parsed)
    first = await anext(events)  # errors surface as a status code, before the stream starts
    return StreamingResponse(
        server_sent(first, events),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def server_sent(
    first: tuple[str, Any], rest: AsyncIterator[tuple[str, Any]]
) -> AsyncIterator[bytes]:
    yield event_bytes(*first)
    async for name, data in rest:
        yield event_bytes(name, data)


def event_bytes(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
