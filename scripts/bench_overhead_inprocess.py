"""What authentication, request ids, request logs and metrics cost a cache hit, in the
process: no network, no server, only the app.

The same cached POST /v1/knowledge/query is sent straight to two apps, as ASGI
messages: `full` with API keys required (one key), a request id on every response, one
JSON log line per request at info through the service's own logging setup (written to
/dev/null) and Prometheus metrics; `plain` with keys off and the request observer taken
out (as in scripts/bench_overhead.py). Rounds alternate between the two, and the report
gives the median CPU microseconds per request of each and their difference, which is what
the features cost (the figure wrk's requests/s hide among the server's own work).

    .venv/bin/python scripts/bench_overhead_inprocess.py [--requests 5000] [--rounds 15]
    .venv/bin/python scripts/bench_overhead_inprocess.py --profile full.prof [--app plain]
    .venv/bin/python scripts/bench_overhead_inprocess.py --full KNOWLEDGE_AUTH=off  # one less

It prints one line per round and the medians; it checks each answer is a 200 with the
cached body (and, for `full`, a request id), never how fast it came.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.logs import configure_logging
from knowledge_api.settings import Settings
from knowledge_api.usecases import keys
from knowledge_api.web.observe import RequestObserver

QUERY = "/v1/knowledge/query"
BODY = json.dumps({"query": "How is a query answered?", "synthesize": False}).encode()
Message = dict[str, Any]


def settings_of(folder: Path, **environ: str) -> Settings:
    return Settings.from_env(
        environ={
            "KNOWLEDGE_EMBEDDER": "fake",
            "KNOWLEDGE_SYNTHESIZER": "extractive",
            "KNOWLEDGE_DB_PATH": str(folder / "k.db"),
            "KNOWLEDGE_LOG_LEVEL": "info",
            **environ,
        },
        env_file=None,
    )


async def new_token(settings: Settings) -> str:
    service = build_service(settings)
    await service.open_storage()
    try:
        _, token = await keys.create(service, "bench", ["read"], [])
    finally:
        await service.stop()
    return token


def scope_template(token: str) -> dict[str, Any]:
    """What uvicorn hands the app for wrk's request (the same headers, in its order)."""
    headers = [
        (b"host", b"127.0.0.1:3006"),
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(BODY)),
    ]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 3006),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": QUERY,
        "raw_path": QUERY.encode(),
        "query_string": b"",
        "headers": headers,
    }


class Caller:
    """Sends one request at a time to an app; remembers the last answer."""

    def __init__(self, app: Starlette, token: str) -> None:
        self.app = app
        self.template = scope_template(token)
        self.request: Message = {"type": "http.request", "body": BODY, "more_body": False}
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    async def receive(self) -> Message:
        return self.request

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = message.get("headers", [])
        else:
            self.body = message.get("body", b"")

    async def one(self) -> None:
        scope = dict(self.template)
        scope["state"] = {}
        await self.app(scope, self.receive, self.send)

    async def many(self, count: int) -> float:
        """Microseconds of this thread's CPU time per request over `count` requests
        (CPU time, so that other processes taking the core in between do not count)."""
        one = self.one
        started = time.thread_time()
        for i in range(count):
            await one()
            if i % 64 == 0:
                await asyncio.sleep(0)  # the loop runs its timers (the log's flushes)
        return (time.thread_time() - started) / count * 1e6


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[None]:
    async with app.router.lifespan_context(app):
        yield


def check(caller: Caller, name: str, cached: bytes, request_id: bool) -> None:
    if caller.status != 200:
        raise SystemExit(f"{name}: {caller.status} {caller.body[:300]!r}")
    if caller.body.split(b'"total_ms":')[0] != cached.split(b'"total_ms":')[0]:
        raise SystemExit(f"{name}: another body than the cached one")
    if request_id != any(k == b"x-request-id" for k, _ in caller.headers):
        raise SystemExit(f"{name}: X-Request-ID {'missing' if request_id else 'unexpected'}")


async def bench(args: argparse.Namespace, folder: Path) -> None:
    full = {"KNOWLEDGE_AUTH": "keys", "KNOWLEDGE_LOG_FORMAT": "json"}
    full.update(change.split("=", 1) for change in args.full)
    full_settings = settings_of(folder, **full)
    plain_settings = settings_of(folder, KNOWLEDGE_AUTH="off", KNOWLEDGE_SEED_ON_EMPTY="false")
    token = await new_token(full_settings)
    with open(os.devnull, "w") as devnull:
        configure_logging(full_settings, stdout=devnull, stderr=devnull)
        full_app = create_app(full_settings)
        plain_app = create_app(plain_settings)
        plain_app.user_middleware = [
            m for m in plain_app.user_middleware if m.cls is not RequestObserver
        ]
        async with running(full_app), running(plain_app):
            callers = {"full": Caller(full_app, token), "plain": Caller(plain_app, "")}
            cached = {}
            for name, caller in callers.items():
                await caller.one()  # answered the usual way, then remembered
                cached[name] = caller.body
                await caller.one()
                check(caller, name, cached[name], request_id=name == "full")
            await measure(callers, args)
            for name, caller in callers.items():
                check(caller, name, cached[name], request_id=name == "full")


async def measure(callers: dict[str, Caller], args: argparse.Namespace) -> None:
    for caller in callers.values():
        await caller.many(args.requests // 4)  # warm up
    if args.profile:
        await profiled(callers[args.app].many, args.requests, args.profile)
        return
    results: dict[str, list[float]] = {name: [] for name in callers}
    for round_ in range(args.rounds):
        order = list(callers) if round_ % 2 == 0 else list(reversed(callers))
        for name in order:
            results[name].append(await callers[name].many(args.requests))
        line = "  ".join(f"{name} {results[name][-1]:6.1f}" for name in callers)
        print(f"round {round_ + 1}: {line} us/request", flush=True)
    for label, pick in (("median", statistics.median), ("best", min)):
        of = {name: pick(values) for name, values in results.items()}
        print(
            f"{label} of {args.rounds} rounds of {args.requests:,} requests: "
            f"full {of['full']:.1f} us, plain {of['plain']:.1f} us, "
            f"the features {of['full'] - of['plain']:.1f} us a request"
        )


async def profiled(run: Callable[[int], Awaitable[float]], count: int, path: str) -> None:
    profile = cProfile.Profile()
    profile.enable()
    await run(count)
    profile.disable()
    profile.dump_stats(path)
    print(f"profile of {count:,} requests: {path} (python -m pstats {path})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of each app, alternated")
    parser.add_argument(
        "--full", action="append", default=[], metavar="KNOWLEDGE_X=VALUE",
        help="a setting of the full app (e.g. KNOWLEDGE_LOG_LEVEL=warning: without its lines)",
    )  # fmt: skip
    parser.add_argument("--profile", metavar="FILE", help="cProfile one app into FILE")
    parser.add_argument("--app", choices=("full", "plain"), default="full", help="the app profiled")
    args = parser.parse_args()
    try:
        import uvloop  # the server's loop

        run: Callable[[Any], Any] = uvloop.run
    except ImportError:
        run = asyncio.run
    with tempfile.TemporaryDirectory() as folder:
        run(bench(args, Path(folder)))


if __name__ == "__main__":
    main()
