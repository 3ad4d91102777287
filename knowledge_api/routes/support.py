"""POST /v1/knowledge/support: the sidecar's retrieve_knowledge, which never fails.

Even a malformed body is answered 200 with the fallback shape and the reason in `gaps`.
"""

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import support as retriever
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.routes.http import JSONResponse, read_json, service


async def support(request: Request) -> Response:
    try:
        payload = await read_json(request)
    except KnowledgeAPIError as e:
        return JSONResponse(retriever.invalid(e))
    return JSONResponse(await retriever.retrieve_payload(service(request), payload))
