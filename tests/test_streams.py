"""Streamed answers capped and given a lifetime (web/streams.py), on a tiny app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from knowledge_api.web.streams import StreamLimits
from tests.conftest import make_settings

stopped: list[str] = []


async def ticks() -> AsyncIterator[bytes]:
    try:
        while True:
            yield b"event: tick\ndata: {}\n\n"
            await asyncio.sleep(0.05)
    finally:
        stopped.append("generator closed")


async def events(request: Request) -> Response:
    return StreamingResponse(ticks(), media_type="text/event-stream")


async def plain(request: Request) -> Response:
    await asyncio.sleep(0.3)
    return PlainTextResponse("done")


async def test_one_stream_too_many_is_503_and_each_ends_at_its_lifetime(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_streams=1, stream_lifetime=0.6)
    app = Starlette(
        routes=[Route("/events", events), Route("/plain", plain)],
        middleware=[Middleware(StreamLimits, settings=settings)],
    )
    transport = httpx.ASGITransport(app=app)
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        began = loop.time()
        first = asyncio.create_task(client.get("/events"))
        await asyncio.sleep(0.2)
        refused, answered = await asyncio.gather(client.get("/events"), client.get("/plain"))
        ended = await asyncio.wait_for(first, 5)
        lived = loop.time() - began
        again = asyncio.create_task(client.get("/events"))  # the slot is free again
        assert (await asyncio.wait_for(again, 5)).status_code == 200
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    error = refused.json()["error"]
    assert error["type"] == "overloaded" and error["details"]["max_streams"] == 1
    assert answered.text == "done"  # a response that is no stream is never counted
    # it streamed until its lifetime (a count of its 0.05 s ticks would depend on load)
    assert ended.status_code == 200 and "event: tick" in ended.text and lived >= 0.6
    assert ended.text.endswith(
        ": the stream reached its lifetime of 0.6 s (KNOWLEDGE_STREAM_LIFETIME)\n\n"
    )
    assert stopped.count("generator closed") == 3  # the refused one's too
