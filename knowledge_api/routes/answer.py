"""POST /v1/knowledge/answer: a grounded answer with citations and confidence."""

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.models import AnswerRequest
from knowledge_api.routes.http import JSONResponse, read_json, service
from knowledge_api.routes.sse import event_stream


async def answer(request: Request) -> Response:
    threshold = service(request).answer_threshold
    parsed = AnswerRequest.from_payload(await read_json(request), threshold)
    if parsed.stream:
        return await event_stream(service(request).answer_events(parsed))
    return JSONResponse(await service(request).answer(parsed))
