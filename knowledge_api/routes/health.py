from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.routes.http import JSONResponse, service


async def health(request: Request) -> Response:
    """200 while the store answers (even degraded); 503 when it does not."""
    body = await service(request).health()
    return JSONResponse(body, status_code=503 if body["status"] == "unhealthy" else 200)
