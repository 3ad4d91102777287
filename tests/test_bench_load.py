"""The bench's lean load generator (scripts/bench_load.py) against a loopback server:
it sends the bytes httpx sends, and it judges and counts every kind of answer as the
httpx clients do."""

from __future__ import annotations

import asyncio
import json
import socketserver
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench_http import QUERY_PATH, cold_body, distinct_cold_queries
from bench_load import cold_queries, encoded

ANSWERS = {
    "whole": b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"results": []}',
    "chunked": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"res\r\nb\r\nults": [1]}\r\n0\r\n\r\n'
    ),
    "closing": (
        b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 15\r\n\r\n{"results": []}'
    ),
    "resultless": b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"detail": 1}',
    "garbled": b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nnot json",
    "busy": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}",
    "unparsable": b"HTTP/1.1 OK 200\r\n\r\n",
    "dropped": b"",
}
"""The answer to a query by its first word ("dropped": the connection closed unanswered)."""


class Scripted(socketserver.StreamRequestHandler):
    """Reads requests off a connection (kept in `seen`) and answers each from ANSWERS."""

    seen: list[bytes]

    def handle(self) -> None:
        while head := self.read_head():
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = self.rfile.read(length)
            self.seen.append(head + body)
            answer = ANSWERS[json.loads(body)["query"].split()[0]]
            self.wfile.write(answer)
            if not answer or b"Connection: close" in answer:
                return

    def read_head(self) -> bytes:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = self.rfile.readline()
            if not line:
                return b""
            head += line
        return head


@contextmanager
def scripted() -> Iterator[tuple[str, list[bytes]]]:
    seen: list[bytes] = []
    handler = type("Handler", (Scripted,), {"seen": seen})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_request_is_the_bytes_httpx_sends() -> None:
    text = 'whole "café" 12'
    with scripted() as (url, seen):
        headers = {"Authorization": "Bearer kapi_test"}
        with httpx.Client(base_url=url, headers=headers) as http:
            assert http.post(QUERY_PATH, json=cold_body(text)).status_code == 200
            assert encoded(http, text) == seen[0]
            assert encoded(http, text + "3") != seen[0]


def test_every_answer_is_judged_and_counted_as_httpx_counts_it() -> None:
    queries = list(ANSWERS)
    with scripted() as (url, seen):
        lean = cold_queries("lean", url, queries, 3, len(queries))
        sent_lean = len(seen)
        plain = asyncio.run(distinct_cold_queries(url, queries, 3, len(queries)))
    expected = {"malformed": 6, "503": 3, "RemoteProtocolError": 6}
    assert lean.failures == expected
    assert plain.failures == expected
    assert len(lean.latencies_ms) == len(plain.latencies_ms) == 9
    assert sent_lean == len(seen) - sent_lean == 3 * len(queries)
    assert lean.wall_s > 0 and lean.cpu_s > 0
