"""`knowledge-api serve`: the server runtime around the app. Its ready line, PM2's
ready signal, a socket replicas share, draining on shutdown, and uvicorn's HTTP
protocol with a deadline for a request's headers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from knowledge_api import __version__
from knowledge_api.errors import ConfigurationError, KnowledgeAPIError, RequestTimeout
from knowledge_api.settings import Settings

GRACEFUL_SHUTDOWN_S = 8
"""Seconds in-flight requests get to finish after SIGINT or SIGTERM (PM2 waits 10)."""
DRAIN_S = 0.25
GIL_SWITCH_S = 0.0005
"""How long a thread waiting for the GIL lets the one holding it run on (Python's
default: 5 ms). A query's steps hand off between threads (the model's, the store's
reader, the event loop): a thread back from the model or SQLite with a result waited
up to the whole interval while another ran Python, which made a cold query's embedding
and keyword legs milliseconds slower than their own work."""
GC_YOUNG = 50_000
"""Allocations between collections of the youngest generation (Python's default: 700).
Under 64 clients a cold query's objects outlived two of the default's collections while
it waited for the model, reached the oldest generation and brought on its collection,
which walks every object the process holds: 0.4 ms of CPU a request, most of it on the
event loop. At this threshold they are freed before a young collection sees them."""


def run_serve(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.app import create_app

    settings = settings.replace(host=args.host or settings.host, port=args.port or settings.port)
    sys.setswitchinterval(GIL_SWITCH_S)
    app = Draining(create_app(settings))
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level=settings.log_level,
        access_log=False,  # the app logs every request itself, with its id
        interface="asgi3",
        loop="uvloop",
        http=timed_http(settings.header_timeout),
        ws="none",  # no route speaks WebSocket; loading a library for it cost ~50 ms a start
        timeout_keep_alive=settings.keep_alive_timeout,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = ReadyServer(config, lambda: ready_message(settings, app.app.state.service), app)
    try:
        server.run(sockets=[shared_socket(settings.host, settings.port)])
    except SystemExit:  # uvicorn's exit status 3 when the app does not start
        if app.refusal is not None:
            raise app.refusal from None  # said in one line, exit status 2 (see `main`)
        raise
    return 0


def ready_message(settings: Settings, service: Any = None) -> str:
    """What `make run` shows once the service answers: where, and one request to try;
    the local model's precision and why; whether the bundled docs are still being
    indexed (a first start)."""
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    url = f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"
    key = " -H 'Authorization: Bearer <API key>'" if settings.auth_required else ""
    body = '{"query": "How do I add documents?"}'
    lines = [
        f"knowledge-api {__version__} is ready at {url}",
        f"try: curl -s {url}/v1/knowledge/query -H 'Content-Type: application/json'{key} "
        f"-d '{body}'",
    ]
    embedder = service.embedder.health() if service is not None else {}
    if "precision_reason" in embedder:  # the local model: what runs, and why
        lines.append(
            f"embedder: {embedder['model']}, {embedder['precision']} on {embedder['runtime']} "
            f"({embedder['precision_reason']})"
        )
    if service is not None and service.seeding:
        lines.append(
            f"seeding the empty store in the background ({service.catalog.seeding_progress()} so "
            f"far): queries answer from what is indexed; /health says how far it is"
        )
    return "\n".join(lines)


def shared_socket(host: str, port: int) -> socket.socket:
    """Bound with SO_REUSEPORT, so replicas (and a replacement during a reload) listen
    on the same port, the kernel spreading connections among them. It is not listening
    yet: uvicorn listens once the app has started, so no connection waits on a replica
    that cannot answer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {host}:{port} ({e.strerror}): another program holds the port, "
            "or the address is not this machine's; set KNOWLEDGE_API_PORT or --port "
            "(KNOWLEDGE_API_HOST or --host)"
        ) from e
    return sock


class Draining:
    """ASGI wrapper: once the server drains, every response says `Connection: close`.

    A client keeping its connection alive sends its next request on it at any moment;
    closed under it, that request is lost with a reset. Told so in the response it
    gets, the client opens a new connection instead, which only a listening replica
    accepts."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.on = False
        self.refusal: KnowledgeAPIError | None = None
        """Why the app refused to start (a setting, the store's embedder), if it did."""

    def __call__(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        """The app's own coroutine until the server drains: no layer of its own on
        every request (uvicorn is told the interface, as it cannot tell it from this)."""
        if not self.on or scope["type"] != "http":
            if scope["type"] == "lifespan":
                return self.lifespan(scope, receive, send)
            return self.app(scope, receive, send)  # type: ignore[no-any-return]
        return self.closing(scope, receive, send)

    async def lifespan(self, scope: Any, receive: Any, send: Any) -> None:
        """The app's start and stop. A start it refuses is kept for `run_serve` to say
        in one line, instead of the traceback uvicorn would log (Starlette sends it
        while handling the error, so the error is the one being handled)."""

        async def sending(message: dict[str, Any]) -> None:
            error = sys.exc_info()[1]
            if message["type"] == "lifespan.startup.failed" and isinstance(
                error, KnowledgeAPIError
            ):
                self.refusal = error
                message = {**message, "message": ""}
            await send(message)

        await self.app(scope, receive, sending)

    async def closing(self, scope: Any, receive: Any, send: Any) -> None:
        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        await self.app(scope, receive, closing)


class Corked:
    """A connection's transport that sends what one step of the event loop writes in
    one system call.

    uvicorn writes a response's status line and headers, then its body, each at once:
    two sends, two TCP segments, where one would do (for a cache hit, the headers' send
    cost about as much as the rest of the request). Here a write is held until the
    next one, which goes out with it (one `writev`), or until the end of the loop's
    step, when it goes out alone: a response is never delayed past the step that
    wrote it, and a streamed one's headers and events go out as they come. Whatever
    the connection writes (a 408, a 400) goes through here, so nothing overtakes a
    held write, and closing sends it first."""

    __slots__ = ("held", "loop", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        held = self.held
        if held is None:
            self.held = data
            self.loop.call_soon(self.flush)
            return
        self.held = None
        self.transport.writelines((held, data))

    def flush(self) -> None:
        held, self.held = self.held, None
        if held is not None and not self.transport.is_closing():
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class TimedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline for a request's headers.

    uvicorn closes a connection idle after a response (`timeout_keep_alive`), but it
    has no deadline for headers: a connection that sends nothing, or sends its header
    lines a few bytes at a time, stayed open for as long as its client liked (200 such
    connections were all open after 75 s). Here a connection must complete a request's
    headers within `header_timeout` seconds of its opening, or of the response before;
    past it, it is answered 408 (when the request had begun) and closed. A request's
    body has its own deadline (KNOWLEDGE_BODY_TIMEOUT, web/http.py)."""

    header_timeout = 10.0
    headers_due: asyncio.TimerHandle | None = None
    """The timer, armed at a deadline that may have moved on since (see `await_headers`)."""
    deadline: float | None = None
    """The loop's time by which the awaited headers are due; None while none are awaited."""
    begun = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = Corked(transport, self.loop)  # type: ignore[assignment]
        self.await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline = None
        if self.headers_due is not None:
            self.headers_due.cancel()
            self.headers_due = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.begun = True

    def on_headers_complete(self) -> None:
        self.deadline = None
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle: the next request's turn
            self.await_headers()

    def await_headers(self) -> None:
        """Headers due `header_timeout` from now. A busy connection moves its deadline
        at every response; rather than a timer armed and cancelled for each request,
        the one armed stays, and when it goes off before the deadline (moved on since)
        it is armed again for that deadline."""
        self.begun = False
        self.deadline = self.loop.time() + self.header_timeout
        if self.headers_due is None:
            self.headers_due = self.loop.call_at(self.deadline, self.headers_late)

    def headers_late(self) -> None:
        self.headers_due = None
        if self.deadline is None or self.transport.is_closing():
            return  # the headers arrived
        if self.loop.time() < self.deadline:
            self.headers_due = self.loop.call_at(self.deadline, self.headers_late)
            return
        if self.begun:
            message = (
                f"the request's headers did not arrive within {self.header_timeout:g} s "
                "(KNOWLEDGE_HEADER_TIMEOUT)"
            )
            error = RequestTimeout(message, timeout_s=self.header_timeout)
            body = orjson.dumps(error.body())
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
            )
        self.transport.close()


def timed_http(header_timeout: float) -> type[TimedHttp]:
    """The protocol class uvicorn makes each connection's protocol from."""
    return type("TimedHttp", (TimedHttp,), {"header_timeout": header_timeout})


class ReadyServer(uvicorn.Server):
    """Says when it listens (to the terminal, and to PM2); on shutdown, lets requests
    already on their way in start, answered as the last of their connection, before
    connections without one are closed."""

    def __init__(
        self,
        config: uvicorn.Config,
        ready: Callable[[], str] | None = None,
        draining: Draining | None = None,
    ) -> None:
        super().__init__(config)
        self.ready = ready
        self.draining = draining

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            collect_less()
            if self.ready is not None:
                print(self.ready(), flush=True)
            tell_pm2_ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Closing a listening socket resets the connections still in its accept queue,
        # and uvicorn closes every connection that has no request in progress: one
        # accepted just now may have its request in flight. Either way its client would
        # see a reset. So take in what is queued, stop listening, and give those requests
        # a moment to start before the connections still idle are closed.
        queued = self.take_queued(sockets or [])
        for server in self.servers:
            server.close()
        for listener in sockets or []:  # the event loop may listen on a copy of its own
            queued += self.take_queued([listener])
            listener.close()
        if self.draining is not None:
            self.draining.on = True
        loop = asyncio.get_running_loop()
        for connection in queued:
            await loop.connect_accepted_socket(self.new_protocol, connection)
        await asyncio.sleep(DRAIN_S)
        await super().shutdown(sockets)

    def take_queued(self, listeners: list[socket.socket]) -> list[socket.socket]:
        """The connections waiting in the listeners' accept queues, accepted at once (no
        await until the listeners are closed, so the loop serves none of them meanwhile).
        The kernel can still queue one in the microseconds between the last accept and
        the close, and resets it on close, unless `net.ipv4.tcp_migrate_req` is 1: then
        it hands it to another listener of the port (operations.md, "PM2")."""
        loop = asyncio.get_running_loop()
        taken = []
        for listener in listeners:
            if listener.fileno() < 0:
                continue
            loop.remove_reader(listener.fileno())
            listener.setblocking(False)
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:  # BlockingIOError: the queue is empty
                    break
                connection.setblocking(False)
                taken.append(connection)
        return taken

    def new_protocol(self) -> asyncio.Protocol:
        """The protocol uvicorn gives each connection it accepts."""
        protocol: asyncio.Protocol = self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol


def collect_less() -> None:
    """The garbage collector, once the server listens: young collections further apart
    (`GC_YOUNG`), and what the process holds by then (modules, the model, the app) left
    out of its walks, as it lives as long as the process (an oldest generation's
    collection walked it all, about half of what such a collection walked under load)."""
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    gc.freeze()


def tell_pm2_ready() -> None:
    """Send PM2's `ready` message (`wait_ready`) once the server listens. PM2 gives a
    process it forks a Node IPC channel: newline-separated JSON on NODE_CHANNEL_FD."""
    channel = os.environ.get("NODE_CHANNEL_FD", "")
    if channel.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(channel), b'"ready"\n')
