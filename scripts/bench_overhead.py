"""What authentication, request ids, request logs and metrics cost a cache hit.

Two servers of the same app run side by side on one small store (the bundled docs,
the fake embedder so nothing but the HTTP path is measured): `full` with API keys
required, a request id on every response, one log line per request and Prometheus
metrics; `plain` with keys off and the request observer (ids, logs, metrics) taken
out. wrk sends the same cached query to each, alternating, and the report gives
requests/s and the ratio full/plain (the budget: full >= 0.9 of plain), best against
best and round by round (the median), beside a bare Starlette app returning the same
bytes, then each server's CPU microseconds a request (process CPU seconds / requests,
which a loaded host disturbs less). `--baseline CHECKOUT` also serves the full app from
another checkout of the package (the code before a change, say), alternated with this
one in the same run, so both hit/bare ratios come from the same minutes of the same
host. With --traced another server, `traced`, is `full` exporting a span per request
to an OTLP/HTTP sink this script runs (OTEL_EXPORTER_OTLP_ENDPOINT set): what tracing
costs a hit, beside what it costs when off (`full`, no endpoint).

    .venv/bin/python scripts/bench_overhead.py [--duration 8] [--rounds 2]
        [--baseline DIR] [--traced]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from bench_http import (
    HOST,
    cpu_seconds,
    free_port,
    serve_command,
    service_env,
    start_server,
    uvicorn,
    write_bare_app,
    wrk_run,
)

QUERY = "/v1/knowledge/query"
BODY = {"query": "How is a query answered?", "synthesize": False}
PLAIN_APP = """\
from knowledge_api.app import create_app
from knowledge_api.web.observe import RequestObserver
from knowledge_api.settings import Settings

app = create_app(Settings.from_env())
app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestObserver]
"""


class Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export and keeps nothing."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def sink(stack: ExitStack) -> str:
    server = ThreadingHTTPServer((HOST, 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.callback(server.shutdown)
    return f"http://{HOST}:{server.server_address[1]}"


def wrk(url: str, token: str, cwd: Path, duration: int, pid: int) -> tuple[float, float | None]:
    """Requests/s of the cached query posted to `url` (every answer must be a 2xx), and
    the server's CPU microseconds a request (None where they cannot be read)."""
    before = cpu_seconds(pid)
    run = wrk_run(url + QUERY, BODY, cwd, duration, token=token)
    after = cpu_seconds(pid)
    if run["non_2xx"] or run["requests_per_s"] is None:
        raise SystemExit(f"{url} under load: {run}")
    if before is None or after is None or not run["requests"]:
        return float(run["requests_per_s"]), None
    return float(run["requests_per_s"]), (after - before) / run["requests"] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds of each wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each server, alternated")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout whose full server runs alternated too"
    )
    parser.add_argument(
        "--traced", action="store_true", help="also `full` with tracing on, to a local sink"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        cwd = Path(folder)
        base = service_env(cwd, log_level="info")
        names = ("full", "plain", "bare")
        names += ("baseline",) if args.baseline else ()
        names += ("traced",) if args.traced else ()
        ports = {name: free_port() for name in names}
        urls = {name: f"http://{HOST}:{port}" for name, port in ports.items()}
        full_env = {**base, "KNOWLEDGE_AUTH": "keys", "KNOWLEDGE_LOG_FORMAT": "json"}
        tokens, pids = {}, {}
        tokens["full"], pids["full"] = serve_full(stack, full_env, cwd, ports["full"])
        if args.baseline:
            (cwd / "baseline").mkdir()
            baseline_env = {
                **full_env,
                "PYTHONPATH": str(args.baseline.resolve()),
                "KNOWLEDGE_DB_PATH": str(cwd / "baseline" / "k.db"),
            }
            tokens["baseline"], pids["baseline"] = serve_full(
                stack, baseline_env, cwd / "baseline", ports["baseline"]
            )
            auth = {"Authorization": f"Bearer {tokens['baseline']}"}
            httpx.post(urls["baseline"] + QUERY, json=BODY, headers=auth)
        token = tokens["full"]
        if args.traced:
            traced_env = {**full_env, "OTEL_EXPORTER_OTLP_ENDPOINT": sink(stack)}
            traced = serve_command(ports["traced"])
            pids["traced"] = start_server(stack, traced, traced_env, cwd, urls["traced"]).pid
            tokens["traced"] = token
        (cwd / "plain_app.py").write_text(PLAIN_APP, encoding="utf-8")
        plain_env = {**base, "KNOWLEDGE_AUTH": "off", "KNOWLEDGE_SEED_ON_EMPTY": "false"}
        plain = uvicorn("plain_app:app", ports["plain"])
        pids["plain"] = start_server(stack, plain, plain_env, cwd, urls["plain"]).pid
        headers = {"Authorization": f"Bearer {token}"}
        cached = httpx.post(urls["full"] + QUERY, json=BODY, headers=headers).content
        if args.traced:
            httpx.post(urls["traced"] + QUERY, json=BODY, headers=headers)
        httpx.post(urls["plain"] + QUERY, json=BODY)
        bare = uvicorn(write_bare_app(cwd, cached), ports["bare"])
        pids["bare"] = start_server(stack, bare, base, cwd, urls["bare"]).pid
        rates: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for name in rates:
                rate, micros = wrk(urls[name], tokens.get(name, ""), cwd, args.duration, pids[name])
                rates[name].append(rate)
                if micros is not None:
                    cpu[name].append(micros)
        report(rates, len(cached))
        if all(len(values) == args.rounds for values in cpu.values()):
            report_cpu(cpu)


def serve_full(stack: ExitStack, env: dict[str, str], cwd: Path, port: int) -> tuple[str, int]:
    """Start the full server (keys required) of the package on env's path; a read key
    and the server's process id."""
    created = subprocess.run(
        [sys.executable, "-m", "knowledge_api", "keys", "create", "--name", "bench",
         "--scopes", "read"],
        env=env, cwd=cwd, capture_output=True, text=True, check=True,
    )  # fmt: skip
    process = start_server(stack, serve_command(port), env, cwd, f"http://{HOST}:{port}")
    token = created.stdout.splitlines()[-1]
    seeded(f"http://{HOST}:{port}", token)
    return token, process.pid


def seeded(url: str, token: str) -> None:
    """Once the server has indexed the bundled docs (it seeds an empty store in the
    background): the cached answer, and so the bare app's bytes, is the seeded store's.
    (A read key's /health holds no counts: the collections route counts for it.)"""
    auth = {"Authorization": f"Bearer {token}"}
    for _ in range(1200):
        health = httpx.get(url + "/health", headers=auth).json()
        listed = httpx.get(url + "/v1/knowledge/collections", headers=auth).json()
        documents = sum(c["documents"] for c in listed["collections"])
        if documents and "seeding" not in health:
            return
        time.sleep(0.05)
    raise SystemExit(f"{url} was still seeding after a minute")


def report(rates: dict[str, list[float]], size: int) -> None:
    best = {name: max(values) for name, values in rates.items()}
    print(f"cache-hit throughput, wrk -t2 -c64, a {size}-byte response (best of each):")
    for name, values in rates.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"  {name:<6} {best[name]:>9,.0f} req/s   (runs: {runs})")
    ratio = best["full"] / best["plain"]
    verdict = "within" if ratio >= 0.9 else "OVER"
    print(
        f"  keys + request ids + logs + metrics: {ratio:.3f} of plain ({verdict} the 10 % budget)"
    )
    # each round's full beside the plain run right after it: the host's own swings,
    # which move whole rounds, move both alike
    paired = [full / plain for full, plain in zip(rates["full"], rates["plain"], strict=True)]
    print(f"  median of the rounds' full / plain: {statistics.median(paired):.3f}")
    print(f"  full / bare Starlette: {best['full'] / best['bare']:.3f}")
    if "baseline" in rates:
        print(f"  baseline / bare Starlette: {best['baseline'] / best['bare']:.3f}")
        for name in ("full", "baseline"):
            paired = [own / bare for own, bare in zip(rates[name], rates["bare"], strict=True)]
            print(f"  median of the rounds' {name} / bare: {statistics.median(paired):.3f}")
        paired = [own / base for own, base in zip(rates["full"], rates["baseline"], strict=True)]
        print(f"  median of the rounds' full / baseline: {statistics.median(paired):.3f}")
    if "traced" in rates:
        print(f"  traced / bare Starlette: {best['traced'] / best['bare']:.3f}")
        paired = [t / f for t, f in zip(rates["traced"], rates["full"], strict=True)]
        print(
            f"  tracing on / off (traced / full): {best['traced'] / best['full']:.3f} best, "
            f"{statistics.median(paired):.3f} median of the rounds"
        )


def report_cpu(cpu: dict[str, list[float]]) -> None:
    """The servers' CPU a request, which other processes on the host disturb less than
    requests/s: the median of each, and of the rounds' ratios."""
    print("server CPU a request (user + system, process CPU seconds / requests):")
    for name, values in cpu.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {name:<8} {statistics.median(values):6.1f} us   (runs: {runs})")
    pairs = [("full", "bare"), ("full", "plain"), ("baseline", "bare"), ("full", "baseline")]
    for own, peer in pairs:
        if own in cpu and peer in cpu:
            paired = [a / b for a, b in zip(cpu[own], cpu[peer], strict=True)]
            print(f"  median of the rounds' {own} / {peer} CPU: {statistics.median(paired):.3f}")


if __name__ == "__main__":
    main()
