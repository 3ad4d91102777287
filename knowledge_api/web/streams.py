"""Streamed answers (Server-Sent Events, /mcp streams) with a cap and a lifetime.

A stream holds a connection, a task and often a provider's generation for as long as
it runs: 150 concurrent /mcp streams were all accepted, and one stayed open 600 s. So
a process serves at most KNOWLEDGE_MAX_STREAMS at once; one more is answered 503
`overloaded` with Retry-After, in the error shape, before its first event is sent.
Each ends after KNOWLEDGE_STREAM_LIFETIME seconds: its generator is cancelled (which
stops generation at the provider) and the response ends with an SSE comment saying
why, which every SSE client skips.

A response is a stream when its content type is text/event-stream, whichever route or
library (the MCP SDK) answers it, so no route needs to declare it.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_api.errors import Overloaded
from knowledge_api.settings import Settings
from knowledge_api.web.http import error_response

EVENT_STREAM = b"text/event-stream"
RETRY_AFTER_S = 5


class StreamLimits:
    """ASGI middleware: at most `most` streams at once, each for at most `lifetime` s."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.most = settings.max_streams
        self.lifetime = settings.stream_lifetime
        self.open = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stream = Stream(self, scope, receive, send)
        try:
            async with stream.deadline:
                await self.app(scope, receive, stream.send)
        except TimeoutError:
            if not stream.deadline.expired():
                raise  # one of the app's own deadlines, not the stream's
            stream.ended = True
        finally:
            stream.release()
        await stream.finish()


class Stream:
    """One request's response, watched for the start of a stream."""

    def __init__(self, limits: StreamLimits, scope: Scope, receive: Receive, send: Send) -> None:
        self.limits = limits
        self.scope = scope
        self.receive = receive
        self.upstream = send
        self.deadline = asyncio.timeout(None)
        self.counted = False
        self.refused = False
        self.ended = False
        """The app was stopped here (refused, or past its lifetime): its sends are dropped."""
        self.finished = False

    async def send(self, message: Message) -> None:
        if self.ended:
            return
        if message["type"] == "http.response.start" and is_event_stream(message):
            limits = self.limits
            if limits.open >= limits.most:
                await self.refuse()
                return
            limits.open += 1
            self.counted = True
            self.deadline.reschedule(asyncio.get_running_loop().time() + limits.lifetime)
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            self.finished = True
        await self.upstream(message)

    async def refuse(self) -> None:
        """503 in the error shape, and the app stopped at its next await."""
        most = self.limits.most
        error = Overloaded(
            f"{most} streamed answers are open, the most this process serves at once "
            f"(KNOWLEDGE_MAX_STREAMS): retry in {RETRY_AFTER_S} s",
            RETRY_AFTER_S,
            max_streams=most,
        )
        self.refused = self.ended = self.finished = True
        await error_response(error)(self.scope, self.receive, self.upstream)
        self.deadline.reschedule(asyncio.get_running_loop().time())

    def release(self) -> None:
        if self.counted:
            self.limits.open -= 1
            self.counted = False

    async def finish(self) -> None:
        """A stream stopped at its lifetime ends, saying why, as a complete response."""
        if self.ended and not self.finished:
            self.finished = True
            why = (
                f": the stream reached its lifetime of {self.limits.lifetime:g} s "
                "(KNOWLEDGE_STREAM_LIFETIME)\n\n"
            )
            await self.upstream({"type": "http.response.body", "body": why.encode()})


def is_event_stream(message: Message) -> bool:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-type":
            return bool(value.startswith(EVENT_STREAM))
    return False
