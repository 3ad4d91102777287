"""Server-Sent Events: a route's event generator as a text/event-stream response.

The first event is computed before the response starts, so bad input and an
unavailable store still answer with a status code and the error shape. A failure
after that arrives as an `error` event in the same shape. When the client goes away
the generator is closed at once, which stops generation at the provider.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from knowledge_api.errors import KnowledgeAPIError

log = logging.getLogger("knowledge_api.errors")
Event = tuple[str, Any]


class EventStream(StreamingResponse):
    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def event_stream(events: AsyncGenerator[Event, None]) -> Response:
    first = await anext(events)
    return EventStream(
        server_sent(first, events), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def server_sent(
    first: Event, rest: AsyncGenerator[Event, None]
) -> AsyncGenerator[bytes, None]:
    async with aclosing(rest):
        yield event_bytes(*first)
        try:
            async for name, data in rest:
                yield event_bytes(name, data)
        except KnowledgeAPIError as e:
            yield event_bytes("error", e.body())
        except Exception:
            log.exception("unhandled error in an event stream")
            error = KnowledgeAPIError("internal error: this is a bug, the log has the traceback")
            yield event_bytes("error", error.body())


def event_bytes(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
