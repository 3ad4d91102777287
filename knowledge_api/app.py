"""create_app(settings) -> the Starlette application."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware

from knowledge_api import tracing
from knowledge_api.compose import build_service
from knowledge_api.errors import BackendConnectionError, ConfigurationError
from knowledge_api.logs import LINES
from knowledge_api.mcp import endpoint as mcp_endpoint
from knowledge_api.redaction import Redactor
from knowledge_api.routes import ROUTES
from knowledge_api.routes.hot import QueryHits
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases.connectors import scheduled_syncs, sync_jobs
from knowledge_api.usecases.kb_sync import periodic_sync
from knowledge_api.usecases.uploads import upload_jobs
from knowledge_api.web import access
from knowledge_api.web.http import EXCEPTION_HANDLERS
from knowledge_api.web.metrics import Metrics
from knowledge_api.web.multipart import Receiving
from knowledge_api.web.observe import RequestObserver
from knowledge_api.web.redact import RedactSecrets, redacted_logs
from knowledge_api.web.streams import StreamLimits
from knowledge_api.web.traces import TraceRequests


def create_app(
    settings: Settings | None = None, service: KnowledgeService | None = None
) -> Starlette:
    settings = settings or Settings.from_env()
    if tracing.traces_endpoint(settings):  # before the service: its HTTP clients trace
        tracing.configure(settings)
    knowledge = service or build_service(settings)
    metrics = Metrics(knowledge)
    knowledge.observe(metrics.observer)

    gate = access.Gate(
        settings,
        knowledge,
        access.rate_limiter(settings),
        access.TrustedHosts.of(settings),
        access.write_origins(settings),
        access.ratings_limiter(settings),
    )
    redactor = Redactor(settings.secrets())
    mcp = mcp_endpoint.McpEndpoint(knowledge, settings)
    # /mcp speaks MCP (JSON-RPC), not the REST contract: it is no ApiRoute, so the
    # OpenAPI document leaves it out.
    mcp_route = mcp_endpoint.route(mcp)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with redacted_logs(redactor):
            try:
                # every refusal to start before the model loads or a document is written
                await knowledge.open()
                await require_a_key(settings, knowledge)
                await knowledge.load()
                await knowledge.seed_in_background()
                async with (
                    periodic_sync(knowledge),
                    upload_jobs(knowledge) as uploads,
                    sync_jobs(knowledge) as syncs,
                    scheduled_syncs(knowledge, syncs),
                ):
                    app.state.uploads = uploads
                    app.state.syncs = syncs
                    async with mcp.running():
                        yield
            finally:
                await knowledge.stop()
                LINES.flush()
                if traces := tracing.active():
                    await asyncio.to_thread(traces.flush)

    # With tracing on, each request's span encloses everything else (the hit path too).
    traced = [Middleware(TraceRequests)] if tracing.active() else []
    # Without secrets configured there is nothing to mask: no layer for every request.
    masked = [Middleware(RedactSecrets, redactor=redactor)] if redactor else []
    # The request observer ids and logs every request, refused ones too. Only the hit
    # path goes ahead of it, doing its part for a hit itself (routes/hot.py); secrets are
    # masked in whatever either of them sends. Streams are capped beneath the observer,
    # so a refused one is logged like any request.
    app = Starlette(
        routes=[*ROUTES, mcp_route],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
        middleware=[
            *traced,
            *masked,
            Middleware(QueryHits, gate=gate),
            Middleware(RequestObserver, metrics=metrics, settings=settings),
            Middleware(StreamLimits, settings=settings),
            *access.cors(settings),
        ],
    )
    app.state.settings = settings
    app.state.service = knowledge
    app.state.gate = gate
    app.state.metrics = metrics
    app.state.receiving = Receiving(settings.max_uploads, settings.max_uploads_per_key)
    return app


async def require_a_key(settings: Settings, knowledge: KnowledgeService) -> None:
    """With keys required and none created, nobody could use the service: refuse to
    start and say how to create one. (A key store that cannot answer is no proof there
    is none: /health shows the store, requests get 503 until it is back.)"""
    if not settings.auth_required:
        return
    try:
        keys = await knowledge.keys.all()
    except BackendConnectionError:
        return
    if not keys:
        raise ConfigurationError(
            f"API keys are required (KNOWLEDGE_AUTH={settings.auth}, the service binds "
            f"{settings.host}) but none exists: create one with `knowledge-api keys create "
            "--name NAME --scopes read`, or bind 127.0.0.1, or set KNOWLEDGE_AUTH=off "
            "to serve without keys"
        )
