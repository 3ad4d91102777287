"""GET /health: open to anyone; its details (store, embedder, providers, cache) only to
callers who may read when keys are required, and what the store holds (its counts, its
place) only to callers that read all of it: an admin key that does not delegate (and
every caller with KNOWLEDGE_AUTH off)."""

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.web.access import READ, access
from knowledge_api.web.http import JSONResponse, service
from knowledge_api.web.schema import NUMBER, STRING, enum, obj

MINIMAL = ("status", "service", "version", "timestamp")
DETAILED_PARTS = ("store", "embedder", "synthesizer", "reranker", "cache", "uptime_s")
"""The parts a key limited to some collections sees whole (the store but its backend
and status aside, see `limited`); of any other part (a sync), only its status."""

PART = obj({"status": STRING}, extra=True)
"""A part's own report (store, embedder, synthesizer, sync): its status and details."""
RESPONSE = obj(
    {
        "status": enum("healthy", "degraded", "unhealthy"),
        "service": STRING,
        "version": STRING,
        "timestamp": STRING,
    },
    {
        "cache": obj({}, extra=True),
        "uptime_s": NUMBER,
        "store": PART,
        "embedder": PART,
        "synthesizer": PART,
        "seeding": obj({"done": NUMBER, "total": NUMBER}, {"error": STRING}),
    },
    extra=PART,
)
"""The body of 200 and of 503 alike; the details only for callers who may read."""


class NotReady(KnowledgeAPIError):
    status = 503
    type = "not_ready"


async def health(request: Request) -> Response:
    """200 while the store answers (even degraded); 503 when it does not."""
    body = await service(request).health()
    caller = access(request)
    if not caller.allows(READ):
        body = {key: body[key] for key in MINIMAL}
    elif caller.collections is not None or caller.principals is not None:
        body = limited(body)  # the store's counts would say hidden documents exist
    return JSONResponse(body, status_code=503 if body["status"] == "unhealthy" else 200)


COUNTS_LEFT_OUT = (
    "left out: they would count documents this key may not read; "
    "GET /v1/knowledge/collections counts those it may"
)
"""Why a caller reading part of the store sees no counts. Its own would cost a count of
the store by its principals on every poll (a scan of every document on Chroma and
Qdrant), and the collections route already answers it."""


def limited(body: dict[str, Any]) -> dict[str, Any]:
    """/health as a caller reading part of the store sees it (a key limited to some
    collections, a key that is not admin, a key asking for a user it delegates for):
    the store's backend and status without its store-wide counts (and why), its place
    (a path, a URL) or its error (which may name them), and the status of each part
    beyond the store's and the providers'."""
    store = body["store"]
    seen = {name: part_seen(name, value) for name, value in body.items() if name not in MINIMAL}
    seen["store"] = {key: store[key] for key in ("backend", "status") if key in store}
    seen["store"]["counts"] = COUNTS_LEFT_OUT
    return {**{key: body[key] for key in MINIMAL}, **seen}


def part_seen(name: str, value: dict[str, Any]) -> dict[str, Any]:
    """A part of /health as a caller reading part of the store sees it: a detailed part
    whole, the seed's progress without its error (an exception's text may name a path),
    any other part's status alone."""
    if name in DETAILED_PARTS:
        return value
    if name == "seeding":
        return {key: value[key] for key in ("done", "total")}
    return {"status": value.get("status")}


ALIVE = obj({"status": enum("alive")})
READY = obj({"status": enum("ready")})


async def livez(request: Request) -> Response:
    return JSONResponse({"status": "alive"})


async def readyz(request: Request) -> Response:
    """200 when requests can be served; 503 naming each part that is not ready."""
    problems = await service(request).readiness()
    if problems:
        parts = ", ".join(f"{part}: {why}" for part, why in problems.items())
        raise NotReady(f"not ready ({parts})", **problems)
    return JSONResponse({"status": "ready"})
