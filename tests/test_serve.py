"""The server runtime (knowledge_api/cli/serve.py): what one step of the event loop
writes goes out in one call, in order, never later than that step; once it listens,
the garbage collector leaves what it started with alone."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from knowledge_api.cli.serve import GC_YOUNG, Corked, ReadyServer


class Recorded:
    """A transport that keeps each call made to it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, lines: Any) -> None:
        self.calls.append(("writelines", b"".join(lines)))

    def close(self) -> None:
        self.calls.append(("close", None))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"extra {name}"


def corked() -> tuple[Corked, Recorded]:
    transport = Recorded()
    return Corked(transport, asyncio.get_running_loop()), transport  # type: ignore[arg-type]


async def test_headers_and_body_written_in_one_step_go_out_in_one_call() -> None:
    writes, transport = corked()
    writes.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert transport.calls == []  # held until the body, or the end of the step
    writes.write(b"{}")
    assert transport.calls == [("writelines", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(transport.calls) == 1  # nothing left to send at the end of the step


async def test_a_write_alone_goes_out_at_the_end_of_its_step() -> None:
    writes, transport = corked()
    writes.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    writes.write(b"")  # nothing: holds on
    await asyncio.sleep(0)
    assert transport.calls == [("write", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")]
    writes.write(b"5\r\nevent\r\n")  # a stream's event, written in a later step
    await asyncio.sleep(0)
    assert transport.calls[1:] == [("write", b"5\r\nevent\r\n")]


async def test_closing_sends_what_is_held_first() -> None:
    writes, transport = corked()
    writes.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    writes.close()
    assert transport.calls == [("write", b"HTTP/1.1 408 Request Timeout\r\n\r\n"), ("close", None)]
    assert writes.is_closing()
    await asyncio.sleep(0)
    assert len(transport.calls) == 2  # the step's end finds nothing held


async def test_a_write_held_when_the_connection_closed_is_dropped() -> None:
    writes, transport = corked()
    writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.closing = True  # the client left: the transport closed itself
    await asyncio.sleep(0)
    assert transport.calls == []
    assert writes.get_extra_info("peername") == "extra peername"  # the rest is the transport's


@pytest.fixture
def collector() -> Iterator[None]:
    """The garbage collector as it was, after the test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


async def plain(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


@pytest.mark.usefixtures("collector")
async def test_a_started_server_leaves_what_it_started_with_to_the_collector_no_more() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = ReadyServer(uvicorn.Config(plain, log_config=None, lifespan="on"))
    started_with: list[int] = []  # a container: the collector tracks it
    assert gc.get_freeze_count() == 0
    serving = asyncio.create_task(server.serve([listener]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        assert gc.get_threshold()[0] == GC_YOUNG
        assert not any(o is started_with for o in gc.get_objects())  # frozen
    finally:
        server.should_exit = True
        await serving
        listener.close()
