"""Connections held open on purpose, against a real server on loopback: a client that
sends nothing, one that drips its header lines, one idle after a response, streams
past the cap and past their lifetime. Each is closed or refused within its limit."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import orjson
import pytest

from tests.test_faults import free_port, read_to_end, serve

pytestmark = pytest.mark.fault
REQUEST = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
MCP_STREAM = (
    b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
    b"mcp-protocol-version: 2025-06-18\r\n\r\n"
)


@contextmanager
def server(tmp_path: Path, **settings: str) -> Iterator[int]:
    port = free_port()
    process = serve(tmp_path, port, **settings)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=20)


def connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection.setblocking(False)
    return connection


def closed(connection: socket.socket, received: bytearray) -> bool:
    """Whether the server closed the connection (what it sent before goes to `received`)."""
    try:
        while data := connection.recv(4096):
            received += data
    except BlockingIOError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_silent_dripping_and_idle_connections_are_closed(tmp_path: Path) -> None:
    """20 connections that send nothing and 20 that send a header byte every 0.2 s are
    all closed past KNOWLEDGE_HEADER_TIMEOUT (the drippers told 408); one idle after a
    response is closed past KNOWLEDGE_KEEP_ALIVE_TIMEOUT. Before, all stayed open."""
    with server(tmp_path, KNOWLEDGE_HEADER_TIMEOUT="1.5", KNOWLEDGE_KEEP_ALIVE_TIMEOUT="1") as port:
        answered = socket.create_connection(("127.0.0.1", port), timeout=5)
        answered.sendall(REQUEST)
        assert answered.recv(4096).startswith(b"HTTP/1.1 200")
        answered.setblocking(False)
        silent = [connect(port) for _ in range(20)]
        dripping = [connect(port) for _ in range(20)]
        connections = {c: bytearray() for c in [answered, *silent, *dripping]}
        drip = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: " + b"a" * 100
        started = time.monotonic()
        open_after: dict[float, int] = {}
        sent = 0
        while connections and time.monotonic() - started < 8:
            for connection in list(connections):
                if closed(connection, connections[connection]):
                    if connection in dripping:
                        assert connections[connection].startswith(b"HTTP/1.1 408")
                        assert b'"type":"request_timeout"' in connections[connection]
                    connection.close()
                    del connections[connection]
                elif connection in dripping:
                    connection.send(drip[sent : sent + 1])
            sent += 1
            open_after[round(time.monotonic() - started, 1)] = len(connections)
            time.sleep(0.2)
        # the dripping ones were still open past their first second: the drip did not
        # reset the deadline, and the deadline did not close them early
        assert max(n for t, n in open_after.items() if t <= 0.8) >= 40
        assert connections == {}, f"{len(connections)} still open after 8 s"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as fresh:
            fresh.sendall(REQUEST)
            assert fresh.recv(4096).startswith(b"HTTP/1.1 200")  # the server still serves


def test_a_busy_connection_moves_its_header_deadline_at_every_response(tmp_path: Path) -> None:
    """A connection sending a request every 0.3 s for three times the header deadline is
    never closed (each response gives the next headers the whole deadline, and the one
    timer the connection keeps goes off early and is armed again); then headers begun
    and left unfinished are a 408, past the deadline from the last response only."""
    settings = {"KNOWLEDGE_HEADER_TIMEOUT": "1", "KNOWLEDGE_KEEP_ALIVE_TIMEOUT": "5"}
    with (
        server(tmp_path, **settings) as port,
        socket.create_connection(("127.0.0.1", port), timeout=5) as connection,
    ):
        started = time.monotonic()
        while time.monotonic() - started < 3:
            connection.sendall(REQUEST)
            response = b""
            while not response.endswith(b"}"):  # headers and body may come apart
                response += connection.recv(4096)
            assert response.startswith(b"HTTP/1.1 200")
            answered = time.monotonic()
            time.sleep(0.3)
        connection.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert read_to_end(connection).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - answered >= 0.9


def test_streams_past_the_cap_are_503_and_each_ends_at_its_lifetime(tmp_path: Path) -> None:
    settings = {"KNOWLEDGE_MAX_STREAMS": "3", "KNOWLEDGE_STREAM_LIFETIME": "2"}
    with server(tmp_path, **settings) as port, ExitStack() as opened:
        streams = [
            opened.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            for _ in range(3)
        ]  # closed even when the test fails: a socket left to the collector fails another
        for stream in streams:
            stream.sendall(MCP_STREAM)
            assert stream.recv(4096).startswith(b"HTTP/1.1 200")  # open
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            extra.sendall(MCP_STREAM.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            refused = read_to_end(extra)
        head, _, body = refused.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 5" in head.lower()
        error = orjson.loads(body)["error"]
        assert error["type"] == "overloaded" and "KNOWLEDGE_MAX_STREAMS" in error["message"]
        ends = []
        for stream in streams:
            stream.settimeout(10)
            rest = b""
            while b"0\r\n\r\n" not in rest:  # the chunked response's end
                part = stream.recv(4096)
                assert part, "closed before the stream's end"
                rest += part
            ends.append(time.monotonic() - started)
            assert b"KNOWLEDGE_STREAM_LIFETIME" in rest
            stream.close()
        assert max(ends) < 6
        with socket.create_connection(("127.0.0.1", port), timeout=10) as again:
            again.sendall(MCP_STREAM)
            assert again.recv(4096).startswith(b"HTTP/1.1 200")  # the slots were freed
