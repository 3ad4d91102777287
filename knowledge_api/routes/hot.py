"""The hit path of POST /v1/knowledge/query: a repeated request answered from tier 1
without routing, parsing or rendering it again.

A query body that was answered once is remembered, byte for byte, with the tier-1 key
the route parsed it to and the tier-1 value it was answered with; that value is
rendered as a hit when the body first comes again.
When the same bytes come again and tier 1 still holds that very value (same store
generation, entry alive), the rendered bytes are sent with this request's `total_ms`,
once the caller is admitted by the same decision the routes use (web/access.py).
Anything else (another body, a changed store, a caller refused, a body in several
parts, a browser's request) goes the usual way, which answers exactly as before; so
this is only a shortcut, never a second source of answers. A hit gets the same request
id, log line and metrics as any request (web/observe.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.routes import ROUTES, query
from knowledge_api.routes.query import ASKED
from knowledge_api.service import Served
from knowledge_api.spans import Unit
from knowledge_api.timing import Spelled
from knowledge_api.views.query import render
from knowledge_api.web.access import READ, Gate, admit
from knowledge_api.web.http import EXCEPTION_HANDLERS
from knowledge_api.web.observe import Exchange, RequestObserver, offered_id

PATH = "/v1/knowledge/query"
ROUTE = next(route for route in ROUTES if route.path == PATH)
"""The route this path shortens: its template names a hit in logs and metrics."""
MAX_BODIES = 10_000
"""Bodies remembered (their tier-1 values are bounded by tier 1 itself)."""
MAX_BODY_BYTES = 4096
"""Longer bodies are never remembered: a query is at most 1,000 characters."""
JSON = b"application/json"
TOTAL_MS = Spelled(3, lambda ms: repr(ms).encode())
"""`total_ms` as the route's rendering writes it (to a thousandth)."""
PICKED = frozenset(
    (b"authorization", b"x-api-key", b"content-type", b"host", b"origin", b"x-request-id")
)


@dataclass(slots=True)
class Rendered:
    """A tier-1 value as a hit renders it, around the one number that changes: rendered
    at its first hit, not when remembered (most bodies a server answers never come
    again, and rendering is a good part of a miss's own work)."""

    key: Hashable
    value: Any
    collection: str | tuple[str, ...]
    """Every collection the query searched: the caller must reach each."""
    unit: Unit = "codepoints"
    principals: frozenset[str] | None = None
    """What the value was read with (knowledge_api.principals)."""
    cut: tuple[bytes, bytes] | None = None
    """The body up to `total_ms`'s value, and the rest (once rendered)."""

    def body(self, started: float) -> bytes:
        if self.cut is None:
            self.cut = rendered_cut(self.value, self.unit)
        head, tail = self.cut
        return b"".join((head, TOTAL_MS((time.perf_counter() - started) * 1000), tail))


class QueryHits:
    """ASGI middleware: repeated queries served from their rendered tier-1 entries.

    It sits ahead of the request observer (web/observe.py) and, when the observer is
    the layer right beneath it, does the observer's part for a hit itself: the same
    exchange (id, log line, metrics), without the observer's stand-ins for the
    server's receive and send, which cost a hit as much as the rest of its
    bookkeeping. Without an observer beneath (a benchmark's plain app), hits are served
    without ids, lines or metrics. Browsers' requests (an Origin header) go the usual
    way, through the CORS layer beneath."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate
        self.service = gate.service
        self.rendered: OrderedDict[bytes, Rendered] = OrderedDict()
        self.observer = app if isinstance(app, RequestObserver) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        first = await receive()
        body: bytes = first.get("body", b"")
        whole = first["type"] == "http.request" and not first.get("more_body")
        rendered = self.rendered.get(body) if whole else None
        headers = picked(scope) if rendered is not None else {}
        exchange = None
        if rendered is not None and servable(headers):
            observer = self.observer
            if observer is not None:
                offered = headers.get("x-request-id")  # as picked: no second scan
                offered_bytes = None if offered is None else offered.encode("latin-1")
                exchange = observer.begin(scope, offered_bytes, started)
            if await self.answered(scope, body, rendered, headers, started, send, exchange):
                return
        if whole and self.observer is not None and direct(body, headers or picked(scope)):
            if exchange is None:
                exchange = self.observer.begin(scope, offered_id(scope), started)
            status = await self.routed(scope, first, receive, send, exchange)
        else:
            status = await self.forward(scope, first, receive, send, exchange, started)
        if whole and status == 200:
            self.remember(body, scope)

    async def answered(
        self,
        scope: Scope,
        body: bytes,
        rendered: Rendered,
        headers: dict[str, str],
        started: float,
        send: Send,
        exchange: Exchange | None,
    ) -> bool:
        """Whether the hit was served: tier 1 still holds the value and the caller is
        admitted. With an exchange, the hit is recorded as the observer records a
        request (an error raised here too, as a 500, before it goes on up)."""
        scope["route"] = ROUTE  # the usual way's router would match it: errors name it too
        client = scope.get("client")
        host = client[0] if client else "-"
        try:
            if not await self.service.tier1.still(rendered.key, rendered.value):
                self.rendered.pop(body, None)
                return False
            # last, as the rate limit counts an admission: a request that goes the usual
            # way after all must be admitted (and counted) once, there; so must a refusal
            caller = await admit(
                self.gate, headers, host, READ, rendered.collection, count_refusals=False
            )
            if caller.principals != rendered.principals:
                return False  # remembered for other principals: the usual way reads it
        except KnowledgeAPIError:
            return False  # the usual way answers with the error
        except BaseException:
            self.record(scope, exchange)
            raise
        try:
            self.service.tier1.hit(rendered.key, rendered.value)
            self.rendered.move_to_end(body)
            content = rendered.body(started)
            response_headers = [(b"content-length", b"%d" % len(content)), (b"content-type", JSON)]
            if exchange is not None:
                exchange.cache_hit = True
                exchange.status = 200
                response_headers.append(exchange.id_header)
            await send({"type": "http.response.start", "status": 200, "headers": response_headers})
            await send({"type": "http.response.body", "body": content})
            if exchange is not None:
                exchange.finished = True
            query.followed_up(body, caller, host, self.service, rendered.value)
        finally:
            if exchange is not None and self.observer is not None:
                self.observer.recorded(exchange, ROUTE.path, "POST", caller.name)
        return True

    def record(self, scope: Scope, exchange: Exchange | None) -> None:
        """A request the hit path began an exchange for, as the observer records one."""
        if exchange is not None and self.observer is not None:
            self.observer.record(scope, exchange)

    async def forward(
        self,
        scope: Scope,
        first: Message,
        receive: Receive,
        send: Send,
        exchange: Exchange | None,
        started: float,
    ) -> int:
        """The request the usual way, its first message given back; its status. With
        an observer beneath, its exchange (the hit path's, or one begun here) goes on to
        it and says the status: no stand-in for the server's send of our own."""
        status = 0
        receiving = replaying(first, receive)
        observer = self.observer
        if observer is not None:
            if exchange is None:
                exchange = observer.begin(scope, offered_id(scope), started)
            await observer.observed(scope, exchange, receiving, send)
            return exchange.status

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receiving, sending)
        return status

    async def routed(
        self, scope: Scope, first: Message, receive: Receive, send: Send, exchange: Exchange
    ) -> int:
        """The request answered by the route itself, not by the layers between the
        observer and it (the stream cap, routing, Starlette's handlers), which cost a
        cold query as much as its admission, parsing and rendering together: the
        route's errors are answered by the same handlers, an error they leave goes on
        up as it would, and the exchange is recorded as the observer records one."""
        assert self.observer is not None
        scope["route"] = ROUTE
        exchange.upstream(replaying(first, receive), send)
        request = Request(scope, exchange.receive)
        try:
            try:
                response = await ROUTE.endpoint(request)
            except Exception as error:
                handler = handler_of(error)
                if handler is None:
                    raise
                response = await handler(request, error)
                error.__traceback__ = None  # an instance raised again keeps no old frames
            await response(scope, exchange.receive, exchange.send)
        except ClientDisconnect:
            exchange.disconnected = True
        finally:
            self.observer.record(scope, exchange)
        return exchange.status

    def remember(self, body: bytes, scope: Scope) -> None:
        """Render, as a hit, the tier-1 value this body was just answered from (for the
        principals it was read with: a hit is served to a caller reading with the same)."""
        if len(body) > MAX_BODY_BYTES or body in self.rendered:
            return
        state = scope.get("state", {})
        asked = state.get(ASKED)
        if asked is None or state.get("access") is None:
            return
        params, stream, unit = asked
        key = params.cache_key()
        value = self.service.tier1.peek(key)
        if stream or value is None:
            return  # a streamed answer, or one tier 1 did not keep (warnings)
        self.rendered[body] = Rendered(key, value, params.scope, unit, params.principals)
        if len(self.rendered) > MAX_BODIES:
            self.rendered.popitem(last=False)


def picked(scope: Scope) -> dict[str, str]:
    """The headers a hit is decided on (admission, the body's type, a browser's
    origin) and its request id, in one pass (the first of repeated ones, as
    Starlette's Headers.get answers)."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in PICKED:
            found.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return found


def direct(body: bytes, headers: dict[str, str]) -> bool:
    """Whether the route may answer by itself (`QueryHits.routed`): a body declared JSON
    with no Origin (as for a hit), that cannot ask for a stream (a stream is capped by
    the layer skipped: a key is "stream" as written or with letters escaped)."""
    return b"stream" not in body and b"\\u" not in body and servable(headers)


def replaying(first: Message, receive: Receive) -> Receive:
    """The server's receive, with the message already read given back first."""
    replayed = False

    async def receiving() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return first
        return await receive()

    return receiving


def handler_of(error: Exception) -> Callable[[Request, Exception], Awaitable[Response]] | None:
    """The app's handler for `error` as Starlette's exception layer finds it (by its
    class, then its bases), but the one for any Exception: that one answers a 500 at
    the outermost layer, once the error went on up through the rest."""
    for kind in type(error).__mro__:
        if kind is Exception:
            return None
        if kind in EXCEPTION_HANDLERS:
            return EXCEPTION_HANDLERS[kind]
    return None


def servable(headers: dict[str, str]) -> bool:
    """Whether the hit path may answer: a body declared JSON (else the route's 415), and
    no browser's Origin (the CORS layer, beneath the hit path, answers those)."""
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    return media_type == "application/json" and "origin" not in headers


def rendered_cut(value: Any, unit: Unit) -> tuple[bytes, bytes]:
    """The route's own rendering of a hit, cut where `total_ms` goes (the last field
    of `metrics`' first one, which `render` always writes first)."""
    body = render(Served(value, True, time.perf_counter()), unit)
    metrics = body.pop("metrics")
    metrics.pop("total_ms")
    head = orjson.dumps(body)[:-1] + b',"metrics":{"total_ms":'
    rest = orjson.dumps(metrics)
    tail = (b"," + rest[1:] if len(rest) > 2 else b"}") + b"}"
    return head, tail
