"""/mcp in the HTTP app, its MCP server built on the first request that reaches it.

The MCP SDK and the tools' schemas (mcp/server.py) take longer to import and build
than the rest of the service takes to start, and only MCP clients need them: a
server that is never asked over MCP never loads them. The first /mcp request waits
for the build (about a second); the ones after it find the server running.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.web.access import READ, Origins, authorize

PATH = "/mcp"


class McpEndpoint:
    """/mcp behind the API keys: a caller needs the read scope to speak MCP at all
    (401/403 as on every route, before anything is built); what its key allows further
    decides per tool."""

    def __init__(self, service: KnowledgeService, settings: Settings) -> None:
        self.service = service
        self.settings = settings
        self.origins = Origins(
            settings, settings.mcp_allowed_origins, "KNOWLEDGE_MCP_ALLOWED_ORIGINS"
        )
        self._server: asyncio.Future[Any] | None = None
        self._stopping: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._open = False

    @property
    def built(self) -> bool:
        return self._server is not None and self._server.done()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        await authorize(request, READ)
        self.origins.check(request.headers, PATH)
        server = await self.server()
        await server.session_manager.asgi_app(scope, receive, send)

    async def server(self) -> Any:
        """The running MCP server, built and started by the first caller."""
        if self._server is None:
            if not self._open:
                raise RuntimeError("/mcp is not running: the app's lifespan has not started")
            self._server = asyncio.get_running_loop().create_future()
            self._stopping = asyncio.Event()
            self._runner = asyncio.create_task(self._run(self._server, self._stopping))
        return await asyncio.shield(self._server)

    async def _run(self, server: asyncio.Future[Any], stopping: asyncio.Event) -> None:
        """Build off the event loop, then keep the session manager running in this one
        task (it must be left in the task that entered it) until the app stops."""
        try:
            built = await asyncio.to_thread(build_server, self.service, self.settings)
        except Exception as e:  # every caller gets the error, now and later
            server.set_exception(e)
            raise
        except BaseException:
            server.cancel()
            raise
        async with built.session_manager.run():
            server.set_result(built)
            await stopping.wait()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: /mcp may build its server while inside."""
        self._open = True
        try:
            yield
        finally:
            self._open = False
            if self._runner is not None and self._stopping is not None:
                self._stopping.set()
                await asyncio.gather(self._runner, return_exceptions=True)
            self._server = self._stopping = self._runner = None


def build_server(service: KnowledgeService, settings: Settings) -> Any:
    from knowledge_api.mcp import server as mcp

    return mcp.build_http(service, settings, PATH)


def route(endpoint: McpEndpoint) -> Route:
    return Route(PATH, endpoint, methods=["GET", "POST", "DELETE"])
