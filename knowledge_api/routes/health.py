from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.routes.fields import NUMBER, STRING, enum, obj
from knowledge_api.routes.http import JSONResponse, service

PART = obj({"status": STRING}, extra=True)
"""A part's own report (store, embedder, synthesizer, sync): its status and details."""
RESPONSE = obj(
    {
        "status": enum("healthy", "degraded", "unhealthy"),
        "service": STRING,
        "version": STRING,
        "cache": obj({}, extra=True),
        "timestamp": STRING,
        "uptime_s": NUMBER,
        "store": PART,
        "embedder": PART,
        "synthesizer": PART,
    },
    extra=PART,
)
"""The body of 200 and of 503 alike."""


async def health(request: Request) -> Response:
    """200 while the store answers (even degraded); 503 when it does not."""
    body = await service(request).health()
    return JSONResponse(body, status_code=503 if body["status"] == "unhealthy" else 200)
