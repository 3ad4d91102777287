"""What the benchmarks that serve the API over HTTP share: a free port on loopback, the
environment of a service on the fake embedder, a server started and awaited, the bare
Starlette app a hit is measured beside, a run of wrk posting one body, and rounds of
closed-loop clients sending distinct cold queries."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
MSMARCO_DEV = ROOT.parent / "shared" / "datasets" / "msmarco-dev"
"""The public dev set beside the checkout (benchmarks only; the product never reads it)."""
HOST = "127.0.0.1"
QUERY_PATH = "/v1/knowledge/query"
BARE_APP = """\
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

BODY = open("bare_body.json", "rb").read()


async def ok(request):
    return Response(BODY, media_type="application/json")


app = Starlette(routes=[Route("/{path:path}", ok, methods=["GET", "POST"])])
"""
WRK_SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{auth}wrk.body = [==[{body}]==]
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def service_env(folder: Path, **settings: str) -> dict[str, str]:
    """The host's environment without its KNOWLEDGE_ settings, and a service on the fake
    embedder and the extractive synthesizer with its files in `folder`; `settings` by
    their KNOWLEDGE_ name without the prefix (`log_level="warning"`)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_")},
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_SYNTHESIZER": "extractive",
        "KNOWLEDGE_DB_PATH": str(folder / "k.db"),
        **{f"KNOWLEDGE_{name.upper()}": value for name, value in settings.items()},
    }


def serve_command(port: int) -> list[str]:
    return [sys.executable, "-m", "knowledge_api", "serve", "--port", str(port)]


def uvicorn(app: str, port: int) -> list[str]:
    """An ASGI app under the service's uvicorn options."""
    return [
        sys.executable, "-m", "uvicorn", app, "--host", HOST, "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


def write_bare_app(folder: Path, body: bytes) -> str:
    """A bare Starlette app in `folder` answering every request with `body`; its name
    for `uvicorn`."""
    (folder / "bare_app.py").write_text(BARE_APP, encoding="utf-8")
    (folder / "bare_body.json").write_bytes(body)
    return "bare_app:app"


def start_process(
    stack: ExitStack, command: list[str], env: dict[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    """A child in its own session (a Ctrl-C reaches us; we stop it), logging to `log`."""
    out = stack.enter_context(log.open("wb"))
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    stack.callback(stop_process, proc)
    return proc


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def wait_ready(
    proc: subprocess.Popen[bytes],
    url: str,
    log: Path,
    deadline_s: float,
    started: float | None = None,
) -> float:
    """Seconds until `url` answers 200, counted from `started` (perf_counter; now when
    None); fails when the process exits or time runs out."""
    started = time.perf_counter() if started is None else started
    while time.perf_counter() - started < deadline_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited ({proc.returncode}):\n{tail(log)}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {deadline_s:.0f}s:\n{tail(log)}")


def tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def start_server(
    stack: ExitStack, command: list[str], env: dict[str, str], cwd: Path, url: str
) -> subprocess.Popen[bytes]:
    """`command` started in `cwd` (stopped with `stack`), once `url` is live; its process."""
    log = cwd / f"server-{len(stack._exit_callbacks)}.log"
    process = start_process(stack, command, env, cwd, log)
    wait_ready(process, url + "/livez", log, 60.0)
    return process


def cpu_seconds(pid: int) -> float | None:
    """The user and system CPU seconds a process has used (None where /proc has none):
    divided by the requests it served, less disturbed by other processes on a loaded
    host than requests/s."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk_run(
    url: str, body: Any, cwd: Path, duration: int, connections: int = 64, token: str = ""
) -> dict[str, Any]:
    """wrk posting `body` (as JSON) to `url` for `duration` seconds, with a bearer
    `token` if given: requests/s (None when wrk reported none) and how many, the count
    of non-2xx answers and the socket errors."""
    raw = json.dumps(body)
    if "]==]" in raw:
        raise ValueError("the wrk body cannot hold ']==]'")
    auth = f'wrk.headers["Authorization"] = "Bearer {token}"\n' if token else ""
    script = cwd / "post.lua"
    script.write_text(WRK_SCRIPT.format(auth=auth, body=raw), encoding="utf-8")
    done = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=False,
    )
    output = done.stdout + done.stderr
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    count = re.search(r"(\d+) requests in", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors:.*", output)
    return {
        "requests_per_s": float(rate.group(1)) if rate else None,
        "requests": int(count.group(1)) if count else 0,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(0) if errors else "",
        "returncode": done.returncode,
    }


def serve_alone(env: dict[str, str], folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`knowledge-api serve` on a free port in `folder` (its log `server.log`), once it is
    live: the process (the caller stops it) and its URL."""
    port = free_port()
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            serve_command(port), env=env, cwd=folder, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://{HOST}:{port}"
    try:
        wait_ready(process, url + "/livez", log, 60.0)
    except RuntimeError:
        stop_process(process)
        raise
    return process, url


@dataclass
class ColdRound:
    """A round of closed-loop clients: the latency of each well-formed 200 answer, the
    other answers by status ("malformed": a 200 whose body is not a JSON object with its
    results; else the transport error's name), the round's wall time and the CPU seconds
    the clients' process spent in it."""

    latencies_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def record(self, outcome: str, started: float) -> None:
        """One answer's outcome (`verdict`), its request sent at `started` (perf_counter)."""
        if outcome == "200":
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
        else:
            self.failures[outcome] = self.failures.get(outcome, 0) + 1


def verdict(status: int, body: bytes) -> str:
    """An answer's outcome: its status, or "malformed" for a 200 whose body is not a
    complete JSON object holding a list of results (a cut or garbled answer)."""
    if status != 200:
        return str(status)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "malformed"
    complete = isinstance(parsed, dict) and isinstance(parsed.get("results"), list)
    return "200" if complete else "malformed"


VARIANTS = itertools.count(1)
"""The numbers that make a query new, each taken once in a process."""


def cold_texts(queries: list[str], clients: int, per_client: int) -> list[list[str]]:
    """The texts each of `clients` sends, `per_client` queries no one asked before (so
    each one is embedded).

    A query is made new by one number after it, one the process has not put after it
    before: one token more for the model. A tag of letters and digits (" c64 12-3") made
    the dev set's queries 56 % longer in tokens (13.9 against 8.9), and the peer's query
    call, which the round's target is drawn from, is timed on the queries as they are."""
    numbers = [next(VARIANTS) for _ in range(-(-clients * per_client // len(queries)))]
    return [
        [
            f"{queries[j % len(queries)]} {numbers[j // len(queries)]}"
            for j in range(number * per_client, (number + 1) * per_client)
        ]
        for number in range(clients)
    ]


def cold_body(text: str) -> dict[str, Any]:
    """The body of a cold query: retrieval alone, nothing synthesized."""
    return {"query": text, "synthesize": False}


async def distinct_cold_queries(
    base_url: str, queries: list[str], clients: int, per_client: int
) -> ColdRound:
    """`clients` httpx connections, each sending its `cold_texts`, the next once the last
    is answered.

    The clients are made before the clock starts. Making an httpx client costs ~17 ms of
    CPU (it builds an SSL context, even for http), synchronously on the event loop: made
    inside the round, the 64 clients of a round held the loop for over a second before
    the connection of any first request was made, and that second was counted in the
    latency of the first requests - the slowest 6 % of the round, so its whole p99 -
    and in the round's wall time."""
    found = ColdRound()
    texts = cold_texts(queries, clients, per_client)

    async def client(mine: list[str], http: httpx.AsyncClient) -> None:
        for text in mine:
            started = time.perf_counter()
            try:
                response = await http.post(QUERY_PATH, json=cold_body(text))
                outcome = verdict(response.status_code, response.content)
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            found.record(outcome, started)

    async with AsyncExitStack() as stack:
        pool = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=base_url, timeout=60.0))
            for _ in range(clients)
        ]
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client(mine, http) for mine, http in zip(texts, pool, strict=True)))
        found.wall_s, found.cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return found
