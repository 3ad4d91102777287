"""create_app(settings) -> the Starlette application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware

from knowledge_api.compose import build_service
from knowledge_api.routes import ROUTES
from knowledge_api.routes.http import EXCEPTION_HANDLERS
from knowledge_api.routes.metrics import Metrics
from knowledge_api.routes.observe import RequestObserver
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases.kb_sync import periodic_sync


def create_app(
    settings: Settings | None = None, service: KnowledgeService | None = None
) -> Starlette:
    settings = settings or Settings.from_env()
    knowledge = service or build_service(settings)
    metrics = Metrics(knowledge)
    knowledge.observe(metrics.observer)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await knowledge.start(seed=True)
        async with periodic_sync(knowledge):
            yield
        await knowledge.stop()

    # The request observer comes first: it ids and logs every request, refused ones too.
    middleware = [Middleware(RequestObserver, metrics=metrics, settings=settings)]
    app = Starlette(
        routes=ROUTES,
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.service = knowledge
    app.state.metrics = metrics
    return app
