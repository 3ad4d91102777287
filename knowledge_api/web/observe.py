"""Request ids, one log line per request and request metrics (the lines themselves are
written by knowledge_api/logs.py).

Every request gets an id: the caller's `X-Request-ID` when it is a plausible one
(1-128 characters of letters, digits and `._:-`), a new uuid4 otherwise. It is echoed
in the `X-Request-ID` response header, added to error bodies (`details.request_id`)
and to every log line written while the request runs.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from typing import cast

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_api.logs import LINES, NO_VALUE, Logged, access_log, current
from knowledge_api.settings import Settings
from knowledge_api.web.metrics import METRICS_PATH, Metrics, metrics_token_ok

HEADER = "X-Request-ID"
ID_HEADER = b"x-request-id"
VALID_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


class Exchange(Logged):
    """One request on its way through the app: its id, what its log line says beyond
    the route, and the receive and send the app is given in place of the server's
    (bound methods, so a request costs no closures)."""

    __slots__ = (
        "_receive",
        "_send",
        "cache_hit",
        "disconnected",
        "finished",
        "id_header",
        "started",
        "status",
    )

    def __init__(self, offered: bytes | None, started: float) -> None:
        self.started = started
        if offered is not None and VALID_ID.fullmatch(offered):
            self.request_id = offered.decode("ascii")
            self.id_header = (ID_HEADER, offered)
        else:
            self.request_id = f"{ID_PREFIX}{next(ID_COUNTER):016x}"
            self.id_header = (ID_HEADER, self.request_id.encode("ascii"))
        self.cache_hit: bool | None = None
        self.status = 500
        self.finished = False
        self.disconnected = False
        """The client left before the end of the response."""
        self._receive: Receive
        self._send: Send

    def upstream(self, receive: Receive, send: Send) -> None:
        """The receive and send that `receive` and `send` stand in for."""
        self._receive = receive
        self._send = send

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.finished:
            self.disconnected = True
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            headers = [*message.get("headers", ())]
            for name, _ in headers:
                if name.lower() == ID_HEADER:  # the app's own: ours replaces it
                    headers = [(k, v) for k, v in headers if k.lower() != ID_HEADER]
                    break
            headers.append(self.id_header)
            message["headers"] = headers
        elif kind == "http.response.body" and not message.get("more_body"):
            self.finished = True
        await self._send(message)


def exchange() -> Exchange | None:
    """The exchange of the request being served, None outside a request."""
    return cast(Exchange | None, current.get())


def note_cache_hit(hit: bool) -> None:
    """Say in the request's log line whether tier 1 answered it."""
    exchange = cast(Exchange | None, current.get())
    if exchange is not None:
        exchange.cache_hit = hit


ID_PREFIX = os.urandom(8).hex()
ID_COUNTER = itertools.count()
"""New ids: 32 hex digits, random to the process, then counted: unique without drawing
random bytes for every request."""


def new_id_prefix() -> None:
    global ID_PREFIX
    ID_PREFIX = os.urandom(8).hex()


os.register_at_fork(after_in_child=new_id_prefix)  # a forked worker counts on its own


class RequestObserver:
    """ASGI middleware: the request id, the log line and the duration histogram.

    It sits outside routing, so it sees 404s and 405s too, and reads the matched
    route's template (never the raw path) after the route ran. Only the hit path of
    POST /v1/knowledge/query sits ahead of it, and does its part for a hit itself
    (`begin` and `record`, routes/hot.py)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, settings: Settings) -> None:
        self.app = app
        self.measure = metrics.request
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.observed(scope, self.begin(scope, offered_id(scope)), receive, send)

    def begin(self, scope: Scope, offered: bytes | None, started: float | None = None) -> Exchange:
        """The request's exchange: its id, set where error bodies and log lines find it.
        `offered`: the caller's X-Request-ID; `started`: when the request came in, if
        already known (routes/hot.py begins a hit's exchange itself)."""
        exchange = Exchange(offered, time.perf_counter() if started is None else started)
        # Not reset afterwards: the 500 handler runs after the request's layers returned,
        # in the same task, and its log line needs the id. Each request is a task of its own.
        current.set(exchange)
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        state["request_id"] = exchange.request_id
        if scope["path"] == METRICS_PATH:
            authorization = header(scope, b"authorization")
            state["metrics_token_ok"] = metrics_token_ok(self.settings, authorization)
        return exchange

    async def observed(
        self, scope: Scope, exchange: Exchange, receive: Receive, send: Send
    ) -> None:
        """The app run with `exchange` standing between it and the server; the request
        recorded once it returned or raised."""
        exchange.upstream(receive, send)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except ClientDisconnect:
            exchange.disconnected = True
        finally:
            self.record(scope, exchange)

    def record(self, scope: Scope, exchange: Exchange) -> None:
        """The request's line and metrics, from what its scope says once answered."""
        route = getattr(scope.get("route"), "path", None)
        if not isinstance(route, str):
            route = "unmatched"
        key = str(scope["state"].get("key_name") or NO_VALUE)
        self.recorded(exchange, route, scope["method"], key)

    def recorded(self, exchange: Exchange, route: str, method: str, key: str) -> None:
        """The request's line and metrics: `route` is its route's template, `key` the
        name of the key it came with (the hit path, which knows them, says them)."""
        seconds = time.perf_counter() - exchange.started
        self.measure(route, method, exchange.status, seconds)
        if access_log.isEnabledFor(logging.INFO):
            LINES.request(
                exchange.request_id,
                method,
                route,
                exchange.status,
                seconds * 1000,
                exchange.cache_hit,
                key,
                exchange.disconnected,
            )


def offered_id(scope: Scope) -> bytes | None:
    """The caller's X-Request-ID, as sent (the first of repeated ones)."""
    for name, value in scope["headers"]:
        if name == ID_HEADER:
            return cast(bytes, value)
    return None


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
