"""The cold query path of this checkout beside another's, on two servers at once.

Both serve a copy of one SQLite store on the local model (`--db`: a store ingested
before, e.g. by `knowledge-api ingest` of the msmarco-dev corpus). Sequential cold
queries go to each server in turn, query by query (the same text to both), so load
from elsewhere falls on both alike: medians of the server's total_ms, embedding_ms and
search_ms, and the server's CPU time per request (all its threads, /proc). Then rounds
of `--clients` connections sending distinct cold queries, the servers alternated
round by round: requests/s, p50/p99, CPU per request (all threads, and the event
loop's thread alone: one thread, which bounds requests/s), and the batches the query
batcher ran (/health): their number and the queries a batch. Every round sends
clients x per-client queries, so the mean batch is that over a whole number of batches
(28.444 is 512 / 18): two runs that ran as many batches print the same. Ratios are this
checkout over the baseline.

    .venv/bin/python scripts/bench_cold_path.py --db store.db --baseline ../main \
        [--precision fp32] [--rounds 3] [--clients 64] [--per-client 8] [--generator httpx]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from bench_http import (
    HOST,
    MSMARCO_DEV,
    QUERY_PATH,
    ROOT,
    free_port,
    serve_command,
    start_process,
    wait_ready,
)
from bench_load import cold_queries

QUERIES = MSMARCO_DEV / "queries.jsonl"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of process `pid`, all its threads (or its `thread`
    alone: the main one, `pid` itself, runs the event loop)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def serve(stack: ExitStack, name: str, checkout: Path, args: argparse.Namespace, work: Path) -> Any:
    """A server of `checkout` on its own copy of the store: (name, client, pid)."""
    folder = work / name
    folder.mkdir()
    shutil.copy(args.db, folder / "k.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_")}
    env.update(
        PYTHONPATH=str(checkout),
        KNOWLEDGE_DB_PATH=str(folder / "k.db"),
        KNOWLEDGE_SEED_ON_EMPTY="false",
        KNOWLEDGE_EMBEDDER="local",
        KNOWLEDGE_EMBEDDING_PRECISION=args.precision,
        KNOWLEDGE_LOG_LEVEL="warning",
    )
    port = free_port()
    log = folder / "server.log"
    server = start_process(stack, serve_command(port), env, folder, log)
    url = f"http://{HOST}:{port}"
    wait_ready(server, url + "/readyz", log, 180.0)  # the model loaded
    return name, stack.enter_context(httpx.Client(base_url=url, timeout=60)), server.pid


def sequential(servers: list[Any], queries: list[str], tag: str) -> dict[str, dict[str, float]]:
    """Each query (made new by `tag`: a cold one, no cache tier knows it) to every
    server in turn."""
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in servers}
    cpu = dict.fromkeys(rows, 0.0)
    for i, query in enumerate(queries):
        for name, client, pid in servers if i % 2 == 0 else servers[::-1]:
            started = cpu_s(pid)
            body = {"query": f"{query} {tag}{i}", "synthesize": False}
            metrics = client.post(QUERY_PATH, json=body).json()["metrics"]
            assert not metrics["cache_hit"], body
            cpu[name] += cpu_s(pid) - started
            rows[name].append((metrics["total_ms"], metrics["embedding_ms"], metrics["search_ms"]))
    return {
        name: {
            "total_ms": statistics.median(r[0] for r in found),
            "embedding_ms": statistics.median(r[1] for r in found),
            "search_ms": statistics.median(r[2] for r in found),
            "cpu_ms_per_request": cpu[name] * 1000 / len(found),
        }
        for name, found in rows.items()
    }


def concurrent(server: Any, queries: list[str], args: argparse.Namespace) -> Any:
    _, client, pid = server
    before = client.get("/health").json()["embedder"]["query_batches"]
    cpu, loop_cpu = cpu_s(pid), cpu_s(pid, pid)
    url = str(client.base_url)
    done = cold_queries(args.generator, url, queries, args.clients, args.per_client)
    found, cpu, loop_cpu = done.latencies_ms, cpu_s(pid) - cpu, cpu_s(pid, pid) - loop_cpu
    after = client.get("/health").json()["embedder"]["query_batches"]
    batches = after["batches"] - before["batches"]
    return {
        "requests_per_s": len(found) / done.wall_s,
        "p50_ms": float(np.percentile(found, 50)),
        "p99_ms": float(np.percentile(found, 99)),
        "cpu_ms_per_request": cpu * 1000 / len(found),
        "loop_cpu_ms_per_request": loop_cpu * 1000 / len(found),
        "batches": batches,
        "mean_batch": (after["embedded"] - before["embedded"]) / batches if batches else 0.0,
        "not_2xx": args.clients * args.per_client - len(found),
    }, after


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def print_rows(title: str, figures: dict[str, dict[str, float]]) -> None:
    print(f"-- {title}   baseline  this  ratio")
    for key, base in figures["baseline"].items():
        this = figures["this"][key]
        ratio = f"{this / base:.3f}" if base else "-"
        print(f"  {key:22} {base:10.3f} {this:10.3f}  {ratio}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="an ingested SQLite store")
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--queries", type=Path, default=QUERIES)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--per-client", type=int, default=8)
    parser.add_argument(
        "--generator",
        choices=("lean", "httpx"),
        default="lean",
        help="the load generator of the concurrent rounds (bench_load.py)",
    )
    args = parser.parse_args()
    lines = args.queries.read_text().splitlines()
    queries = [json.loads(line)["text"] for line in lines if line.strip()]
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cold-path-")))
        servers = [
            serve(stack, "baseline", args.baseline.resolve(), args, work),
            serve(stack, "this", ROOT, args, work),
        ]
        sequential(servers, queries[:10], "warm")
        seq: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
        many: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
        batcher: dict[str, Any] = {}
        for round_ in range(args.rounds):
            for name, figures in sequential(servers, queries, f"s{round_}x").items():
                seq[name].append(figures)
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                figures, batcher[server[0]] = concurrent(server, queries, args)
                many[server[0]].append(figures)
        print(f"precision {args.precision}, {len(queries)} queries x {args.rounds} rounds")
        print_rows("sequential cold queries (medians)", {k: medians(v) for k, v in seq.items()})
        print_rows(
            f"{args.clients} clients x {args.per_client} distinct cold queries (median round)",
            {k: medians(v) for k, v in many.items()},
        )
        print(f"query batcher since start (this): {json.dumps(batcher.get('this'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
