"""POST /v1/knowledge/retrieve and /v1/knowledge/validate (the RAG contract)."""

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import rag
from knowledge_api.routes.http import JSONResponse, read_json, service


async def retrieve(request: Request) -> Response:
    parsed = rag.RetrieveRequest.from_payload(await read_json(request))
    return JSONResponse(await rag.retrieve(service(request), parsed))


async def validate(request: Request) -> Response:
    parsed = rag.ValidateRequest.from_payload(await read_json(request))
    return JSONResponse(await rag.validate(service(request), parsed))
