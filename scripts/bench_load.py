"""A lean load generator for the rounds of distinct cold queries, beside the httpx one.

httpx's clients took 0.7-0.9 ms of CPU per cold query inside a round (and making the 64
of them, before its clock, 1.1 ms a request more), on the two cores the service's
2.9-3.6 ms ran on: the 64-client row measured the client as well as the service. This
one sends the same requests - the same `cold_texts`, each request's bytes built by an
httpx client (headers, body) before the clock starts - over the same number of
keep-alive connections, each the next once the last is answered, and reads the answers
with httptools (the C parser uvicorn serves with: Content-Length, chunked bodies), on
uvloop: the server's work per request is the same and the generator's a tenth of
httpx's. Every answer is judged as before (`bench_http.verdict`): its status, and a
200's body a complete JSON with its results. Bodies are read as sent: the service
compresses none (httpx would undo a Content-Encoding; here it would read as malformed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, cast

import httptools
import httpx
import numpy as np
import uvloop
from bench_http import (
    HOST,
    MSMARCO_DEV,
    QUERY_PATH,
    ColdRound,
    cold_body,
    cold_texts,
    cpu_seconds,
    distinct_cold_queries,
    free_port,
    serve_command,
    service_env,
    start_process,
    verdict,
    wait_ready,
)

TIMEOUT_S = 60.0
"""Seconds an answer may take, as the httpx clients' timeout."""


def encoded(http: httpx.Client, text: str) -> bytes:
    """The bytes httpx sends for the cold query `text`: request line, its headers in its
    order (Host, Accept, Accept-Encoding, Connection, User-Agent, Content-Length,
    Content-Type and the client's own, such as a key) and its JSON body."""
    request = http.build_request("POST", QUERY_PATH, json=cold_body(text))
    head = [b"POST " + request.url.raw_path + b" HTTP/1.1"]
    head += [name + b": " + value for name, value in request.headers.raw]
    return b"\r\n".join(head) + b"\r\n\r\n" + request.read()


class Connection(asyncio.Protocol):
    """One keep-alive connection sending `requests` from `sent` on, each once the last is
    answered, until they are all sent or the connection ends; `done` then holds the index
    of the first request not answered on it."""

    def __init__(self, requests: list[bytes], sent: int, found: ColdRound, opened: float) -> None:
        self.requests, self.sent, self.found = requests, sent, found
        self.opened = opened
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.started = 0.0
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.send(self.opened)  # as httpx times it: the connection's making counted

    def send(self, started: float | None = None) -> None:
        assert self.transport is not None
        if self.sent == len(self.requests):
            self.finish()
            return
        self.body.clear()
        self.started = time.perf_counter() if started is None else started
        self.timer = asyncio.get_running_loop().call_later(TIMEOUT_S, self.fail, "ReadTimeout")
        self.transport.write(self.requests[self.sent])

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.fail("RemoteProtocolError")  # httpx's name for an answer not HTTP

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.answered(verdict(self.parser.get_status_code(), b"".join(self.body)))
        if self.parser.should_keep_alive():
            self.send()
        else:  # the server closes it: the next request goes on a new connection
            self.finish()

    def answered(self, outcome: str) -> None:
        """The request in flight has its outcome (its latency when a well-formed 200)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.found.record(outcome, self.started)
        self.sent += 1

    def fail(self, why: str) -> None:
        """The request in flight failed (`why`, as httpx names it): the connection ends."""
        if self.timer is not None:  # a request is in flight
            self.answered(why)
        self.finish()

    def finish(self) -> None:
        assert self.transport is not None
        self.transport.close()
        if not self.done.done():
            self.done.set_result(self.sent)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:  # closed with an answer owed
            self.answered("RemoteProtocolError")
        if not self.done.done():
            self.done.set_result(self.sent)


async def lean_cold_queries(
    base_url: str, queries: list[str], clients: int, per_client: int
) -> ColdRound:
    """`distinct_cold_queries` sent by the lean generator: `clients` keep-alive
    connections, each sending its `cold_texts` one after another (a new connection where
    the server closed one, as httpx's pool opens)."""
    found = ColdRound()
    url = httpx.URL(base_url)
    with httpx.Client(base_url=base_url) as http:
        requests = [
            [encoded(http, text) for text in mine]
            for mine in cold_texts(queries, clients, per_client)
        ]
    loop = asyncio.get_running_loop()

    async def client(mine: list[bytes]) -> None:
        sent = 0
        while sent < len(mine):
            opened = time.perf_counter()
            try:
                _, connection = await loop.create_connection(
                    partial(Connection, mine, sent, found, opened), url.host, url.port or 80
                )
            except OSError:
                found.record("ConnectError", opened)
                sent += 1
                continue
            sent = await connection.done

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(client(mine) for mine in requests))
    found.wall_s, found.cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return found


def cold_queries(
    generator: str, base_url: str, queries: list[str], clients: int, per_client: int
) -> ColdRound:
    """A round of distinct cold queries sent by `generator`, "lean" (on uvloop) or
    "httpx" (on asyncio's own loop, as it always ran)."""
    if generator == "lean":
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(lean_cold_queries(base_url, queries, clients, per_client))
    if generator == "httpx":
        return asyncio.run(distinct_cold_queries(base_url, queries, clients, per_client))
    raise ValueError(f"unknown load generator {generator!r}: lean or httpx")


def cold_round(
    generator: str,
    base_url: str,
    queries: list[str],
    clients: int,
    per_client: int,
    server_pid: int | None = None,
) -> dict[str, Any]:
    """A round of distinct cold queries sent by `generator`: requests/s over the round,
    latency p50/p95/p99, the answers that were not well-formed 200s by status (503
    overloaded is the graceful one), and the CPU per request, in ms, of the clients
    (this process) and of the server (`server_pid`, all its threads, from /proc)."""
    server_cpu = cpu_seconds(server_pid) if server_pid else None
    found = cold_queries(generator, base_url, queries, clients, per_client)
    served = cpu_seconds(server_pid) if server_pid else None
    requests = clients * per_client
    ok = np.asarray(found.latencies_ms or [float("nan")])
    return {
        "generator": generator,
        "clients": clients,
        "requests": requests,
        "ok_per_s": round(len(found.latencies_ms) / found.wall_s, 1),
        **{f"p{q}_ms": round(float(np.percentile(ok, q)), 1) for q in (50, 95, 99)},
        "failures": found.failures,
        "client_cpu_ms": round(found.cpu_s * 1000 / requests, 3),
        "server_cpu_ms": (
            round((served - server_cpu) * 1000 / requests, 3)
            if served is not None and server_cpu is not None
            else None
        ),
    }


COLD_ROUNDS = 3
"""Rounds of 64 clients: a round lasts about 3 s, and one round's requests/s swung by a
fifth between runs on a shared host."""
MEDIANS = ("ok_per_s", "p50_ms", "p95_ms", "p99_ms", "client_cpu_ms", "server_cpu_ms")


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' median requests/s, latencies and CPU per request (each its own
    median), the answers not 200 of them all, and every round's requests/s."""
    failures: dict[str, int] = {}
    for found in rounds:
        for status, count in found["failures"].items():
            failures[status] = failures.get(status, 0) + count
    return {
        **rounds[0],
        **{
            key: float(np.median(values)) if None not in values else None
            for key in MEDIANS
            for values in [[r[key] for r in rounds]]
        },
        "requests": sum(r["requests"] for r in rounds),
        "failures": failures,
        "rounds_ok_per_s": [r["ok_per_s"] for r in rounds],
        "rounds": [{key: r[key] for key in MEDIANS} for r in rounds],
    }


def side_by_side(
    generators: list[str],
    base_url: str,
    queries: list[str],
    clients: int,
    per_client: int,
    rounds: int,
    server_pid: int | None = None,
) -> dict[str, dict[str, Any]]:
    """`rounds` rounds of each generator, alternated (first one, then the other first),
    so a host's swings fall on both alike: each one's `median_round`."""
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in generators}
    for i in range(rounds):
        for name in generators if i % 2 == 0 else generators[::-1]:
            found[name].append(cold_round(name, base_url, queries, clients, per_client, server_pid))
    return {name: median_round(figures) for name, figures in found.items()}


def generator_lines(figures: dict[str, dict[str, Any]]) -> list[str]:
    """The generators' medians, a line each, and their rounds below in the order run:
    what the clients cost beside what the server did per request (the same, whichever
    sends)."""
    lines = [
        f"  {'generator':<12} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
        f"{'client CPU ms/req':>18} "
        f"{'server CPU ms/req':>18}"
    ]
    for name, found in figures.items():
        rows = [(f"{name} median", found)]
        rows += [(f"  round {i}", r) for i, r in enumerate(found.get("rounds", []), 1)]
        lines += [
            f"  {label:<12} {r['ok_per_s']:7.1f} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f} "
            f"{r['p99_ms']:7.1f} "
            f"{shown(r['client_cpu_ms']):>18} {shown(r['server_cpu_ms']):>18}"
            for label, r in rows
        ]
    return lines


def shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    """The generators side by side on a server of this checkout over a copy of `--db`."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--db", type=Path, required=True, help="an ingested SQLite store")
    parser.add_argument("--queries", type=Path, default=MSMARCO_DEV / "queries.jsonl")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--rounds", type=int, default=COLD_ROUNDS)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--per-client", type=int, default=16)
    args = parser.parse_args()
    lines = args.queries.read_text(encoding="utf-8").splitlines()
    queries = [json.loads(line)["text"] for line in lines if line.strip()]
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-load-")))
        shutil.copy(args.db, folder / "k.db")
        settings = {"embedding_precision": args.precision, "log_level": "warning"}
        env = service_env(folder, embedder="local", seed_on_empty="false", **settings)
        port = free_port()
        server = start_process(stack, serve_command(port), env, folder, folder / "server.log")
        url = f"http://{HOST}:{port}"
        wait_ready(server, url + "/readyz", folder / "server.log", 180.0)
        cold_queries("lean", url, queries, args.clients, 4)  # the batcher and caches warm
        found = side_by_side(
            ["lean", "httpx"], url, queries, args.clients, args.per_client, args.rounds, server.pid
        )
    print(f"{args.clients} clients x {args.per_client} distinct cold queries, medians:")
    print("\n".join(generator_lines(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
