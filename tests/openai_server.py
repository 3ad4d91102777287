"""An OpenAI-compatible chat server on a loopback port, as Ollama, vLLM or llama.cpp's
server are: POST /v1/chat/completions, streamed as Server-Sent Events or whole, with
the usage chunk when `stream_options.include_usage` asks for it. It records what it
was sent, and a reply may fail, stall or end without a finish reason."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.loopback import serving_app

MODEL = "llama3.2:3b"


@dataclass
class Reply:
    pieces: Sequence[str] = ("An answer [1].",)
    status: int = 200
    tokens: int = 64
    then: str = "end"
    """`end` (a finish reason, then [DONE]), `stall` (nothing more for `stall` seconds)
    or `cut` (the body ends with no finish reason)."""
    pause: float = 0.0
    stall: float = 3.0


@dataclass
class Server:
    replies: list[Reply] = field(default_factory=list)
    """Taken in order, one a request; when none is left, `default`."""
    default: Reply = field(default_factory=Reply)
    requests: list[dict[str, Any]] = field(default_factory=list)
    """What each request sent: its JSON body, with `headers` and `path` beside."""
    url: str = ""

    def reply(self, pieces: Sequence[str], **options: Any) -> None:
        self.replies.append(Reply(pieces, **options))

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(
            {"body": body, "headers": dict(request.headers), "path": request.url.path}
        )
        reply = self.replies.pop(0) if self.replies else self.default
        if reply.status != 200:
            error = {"message": f"failure {reply.status}", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=reply.status)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if body.get("stream"):
            return StreamingResponse(
                events(reply, body["model"], usage), media_type="text/event-stream"
            )
        return JSONResponse(whole(reply, body["model"]))


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def events(reply: Reply, model: str, usage: bool) -> AsyncIterator[bytes]:
    yield sse(chunk(model, {"role": "assistant", "content": ""}))
    for piece in reply.pieces:
        yield sse(chunk(model, {"content": piece}))
        await asyncio.sleep(reply.pause)
    if reply.then == "stall":
        await asyncio.sleep(reply.stall)
        return
    if reply.then == "cut":
        return
    yield sse(chunk(model, {}, "stop"))
    if usage:
        counted = {"prompt_tokens": reply.tokens - 1, "completion_tokens": 1}
        last = {**chunk(model, {}), "choices": []}
        yield sse({**last, "usage": {**counted, "total_tokens": reply.tokens}})
    yield b"data: [DONE]\n\n"


def whole(reply: Reply, model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": "".join(reply.pieces)}
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": reply.tokens},
    }


@contextmanager
def serve(server: Server | None = None) -> Iterator[Server]:
    """The server on a free loopback port; its `url` ends with /v1, as a base URL does."""
    server = server or Server()
    app = Starlette(routes=[Route("/v1/chat/completions", server.completions, methods=["POST"])])
    with serving_app(app, start_seconds=10, lifespan="off", timeout_graceful_shutdown=1) as url:
        server.url = f"{url}/v1"
        yield server
