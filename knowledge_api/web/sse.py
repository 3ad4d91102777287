"""Server-Sent Events: a use case's event generator as a text/event-stream response.

The first event is computed before the response starts, so bad input and an
unavailable store still answer with a status code and the error shape. Each event is
translated into the resource's own event and JSON (`translate`). A failure after the
first event ends the stream with the resource's last word on it (`failure`; by default
an `error` event in the error shape). When the client goes away the generator is
closed at once, which stops generation at the provider.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.logs import request_id

log = logging.getLogger("knowledge_api.errors")
Event = tuple[str, Any]
Translate = Callable[[str, Any], Event]
Failure = Callable[[Exception], Event]
UNEXPECTED = "internal error: this is a bug, the log has the traceback"


def events_schema(*names: str) -> dict[str, Any]:
    """JSON Schema of one event of a stream whose events are `names`: each event's data
    is one JSON document."""
    data = {"type": "string", "contentMediaType": "application/json"}
    event = {"type": "string", "enum": list(names)}
    return {
        "type": "object",
        "properties": {"event": event, "data": data},
        "required": ["event", "data"],
    }


class EventStream(StreamingResponse):
    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def error_event(error: Exception) -> Event:
    if not isinstance(error, KnowledgeAPIError):
        log.error("unhandled error in an event stream", exc_info=error)
        error = KnowledgeAPIError(UNEXPECTED)
    body = error.body()
    if rid := request_id():
        body["error"]["details"] = {**body["error"]["details"], "request_id": rid}
    return "error", body


async def event_stream(
    events: AsyncGenerator[Event, None], translate: Translate, failure: Failure = error_event
) -> Response:
    first = await anext(events)
    return EventStream(
        server_sent(translate(*first), events, translate, failure),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def server_sent(
    first: Event, rest: AsyncGenerator[Event, None], translate: Translate, failure: Failure
) -> AsyncGenerator[bytes, None]:
    async with aclosing(rest):
        yield event_bytes(*first)
        try:
            async for name, data in rest:
                yield event_bytes(*translate(name, data))
        except Exception as e:
            yield event_bytes(*failure(e))


def event_bytes(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
