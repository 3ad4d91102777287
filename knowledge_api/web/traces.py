"""The request's span: the server side of a trace, continuing the caller's.

Added to the app only when tracing is on (knowledge_api/tracing.py), outside every
other layer, so the hit path and refused requests have their span too and a service
that does not trace pays nothing. A W3C `traceparent` from the caller makes the span
its child; the span is named for the matched route's template, as the HTTP semantic
conventions ask, and carries the request id and the key's name (never its token, nor
the body).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_api import tracing
from knowledge_api.web.observe import exchange as current_exchange

PROPAGATED = (b"traceparent", b"tracestate")
CONTEXT = "trace_context"
"""Where the request's context waits in scope["state"] for work done in other tasks
(an MCP tool call)."""


class TraceRequests:
    """ASGI middleware: one SERVER span per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier: dict[str, str] = {}
        agent = None
        for name, value in scope["headers"]:
            if name in PROPAGATED:
                carrier[name.decode("latin-1")] = value.decode("latin-1")
            elif name == b"user-agent":
                agent = value.decode("latin-1")
        method = scope["method"]
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        with (
            tracing.within(tracing.extract(carrier)),
            tracing.span(method, request_attributes(scope, agent), kind="server") as server,
        ):
            state[CONTEXT] = tracing.context_now()
            try:
                await self.app(scope, receive, sending)
            finally:
                answered(server, scope, status)


def request_attributes(scope: Scope, agent: str | None) -> dict[str, object]:
    server = scope.get("server") or ("", 0)
    client = scope.get("client")
    attributes: dict[str, object] = {
        "http.request.method": scope["method"],
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "server.address": server[0] or "",
        "server.port": server[1] or 0,
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    if client:
        attributes["client.address"] = client[0]
    if agent:
        attributes["user_agent.original"] = agent
    return attributes


def answered(server: tracing.SpanLike, scope: Scope, status: int) -> None:
    """What is known once the app answered: the route, the status, the request id and
    the key, and whether tier 1 answered the hit path."""
    if not server.is_recording():
        return
    route = getattr(scope.get("route"), "path", None)
    state = scope["state"]
    attributes: dict[str, object] = {"http.response.status_code": status}
    if isinstance(route, str):
        attributes["http.route"] = route
        server.update_name(f"{scope['method']} {route}")  # type: ignore[attr-defined]
    if request_id := state.get("request_id"):
        attributes["knowledge.request_id"] = request_id
    if key := state.get("key_name"):
        attributes["knowledge.key_name"] = key
    exchange = current_exchange()
    if exchange is not None and exchange.cache_hit is not None:
        attributes["knowledge.cache.hit"] = exchange.cache_hit
    server.set_attributes(attributes)
    if status >= 500:
        server.set_attribute("error.type", str(status))
        tracing.failed(server, f"HTTP {status}")
