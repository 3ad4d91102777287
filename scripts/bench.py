"""Benchmark of knowledge_api: ingestion, query latency, throughput, memory, concurrency.

    .venv/bin/python scripts/bench.py --store sqlite \
        --corpus ../shared/datasets/msmarco-dev/corpus.jsonl [--json PATH] \
        [--no-env-size | --venv PATH] [--no-first-start] [--fresh-clone]

It starts with the CPU's flags and core count, and ends with the table of the budgets
(scripts/bench_targets.py): each figure beside its peer's, measured in the same run on
the same CPU (sentence-transformers at its fastest precision here, a bare Starlette
app), and the ratio.

Everything runs in subprocesses against a fresh store in a temporary directory; the
settings reach them only through their environment (Settings.from_env()). Only
127.0.0.1 is ever targeted. This measures and reports; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import bench_targets
import httpx
import numpy as np
from bench_http import (
    HOST,
    MSMARCO_DEV,
    QUERY_PATH,
    ROOT,
    free_port,
    start_process,
    uvicorn,
    wait_ready,
    write_bare_app,
    wrk_run,
)

DEFAULT_CORPUS = MSMARCO_DEV / "corpus.jsonl"
BUNDLED_DOCS = ROOT / "knowledge_api" / "docs"
SUMMARY = re.compile(
    r"(?P<documents>\d+) documents indexed \((?P<chunks>\d+) chunks, (?P<embedded>\d+) embedded\)"
    r", (?P<skipped>\d+) unchanged skipped, in (?P<seconds>[\d.]+)s"
    r" \((?P<chunks_per_s>[\d.]+) chunks/s\)"
)
BUILTIN_QUERIES = [
    "What does the Knowledge API do?",
    "How is a query answered?",
    "Is the query normalised before the cache lookup?",
    "What happens on a cache miss?",
    "Does the store search by meaning and by keyword?",
    "How are queries embedded?",
    "What is the response cache?",
    "Which sources does the knowledge API search?",
    "Can it answer from all of an organisation's knowledge?",
    "How does keyword search work?",
    "What is semantic search by meaning?",
    "How are results ranked?",
    "Where do answers come from?",
    "What is looked up first when a question arrives?",
    "How is the embedding of a query computed?",
    "knowledge api overview",
    "query normalisation",
    "response cache lookup",
    "embedding on a cache miss",
    "hybrid search meaning and keyword",
    "one question all knowledge",
    "organisation knowledge sources",
    "what is searched at once",
    "how fast is a cached answer",
    "which store is used by default",
    "how are documents indexed",
    "what model embeds the query",
    "how does the cache know the store changed",
    "what is returned in the results",
    "how to ask a question to the API",
]
SYNTHESIS_SUFFIX = "explained"
WARMUP_QUERIES = ["bench warm-up one", "bench warm-up two", "bench warm-up three"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default="sqlite", help="KNOWLEDGE_STORE (default: sqlite)")
    p.add_argument(
        "--corpus",
        type=Path,
        default=DEFAULT_CORPUS,
        help="BEIR corpus.jsonl (falls back to the bundled docs when absent)",
    )
    p.add_argument("--embedder", default="local", help="KNOWLEDGE_EMBEDDER (default: local)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--rounds", type=int, default=10, help="rounds of cache-hit queries")
    p.add_argument("--max-queries", type=int, default=200, help="most distinct queries used")
    p.add_argument("--wrk-duration", type=int, default=10, help="seconds of each wrk run")
    p.add_argument("--wrk-rounds", type=int, default=3, help="wrk runs of each server, alternated")
    p.add_argument("--wrk-connections", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=500, help="concurrent POSTs")
    p.add_argument(
        "--clients",
        type=int,
        default=10,
        help="AsyncClients sharing the concurrent connections (httpx's pool scans "
        "all its connections per request: one pool of 500 is client-bound)",
    )
    p.add_argument(
        "--cold-client",
        choices=("both", "lean", "httpx"),
        default="both",
        help="the load generator of the 64- and 500-client rounds of distinct cold queries: "
        "both (the lean one counted, httpx's rounds alternated beside it), or one alone",
    )
    p.add_argument(
        "--no-env-size",
        dest="env_size",
        action="store_false",
        help="skip building a `make install` virtualenv to measure its size",
    )
    p.add_argument(
        "--venv",
        type=Path,
        metavar="PATH",
        help="the size of this existing `make install` virtualenv instead of building one",
    )
    p.add_argument(
        "--no-first-start",
        dest="first_start",
        action="store_false",
        help="skip the first start (model built, bundled docs seeded) and its peak memory",
    )
    p.add_argument(
        "--fresh-clone",
        action="store_true",
        help="also time `make run` in a fresh clone to its first answer (slow)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds an ingest may take before it is stopped",
    )
    return p.parse_args(argv)


def bench_env(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "KNOWLEDGE_DB_PATH": str(workdir / "knowledge.db"),
            "KNOWLEDGE_POSTGRES_DATA_DIR": str(workdir / "postgres"),  # store=postgres, no URL
            "KNOWLEDGE_CHROMA_PATH": str(workdir / "chroma"),  # store=chroma, no host
            "KNOWLEDGE_QDRANT_PATH": str(workdir / "qdrant"),  # store=qdrant, no URL
            "KNOWLEDGE_SEED_ON_EMPTY": "false",
            "KNOWLEDGE_STORE": args.store,
            "KNOWLEDGE_EMBEDDER": args.embedder,
        }
    )
    return env


def knowledge_api_command() -> list[str]:
    script = Path(sys.executable).parent / "knowledge-api"
    return [str(script)] if script.exists() else [sys.executable, "-m", "knowledge_api"]


def raise_fd_limit(wanted: int) -> None:
    """Enough descriptors for `wanted` sockets on each side (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def load_average() -> list[float]:
    """1, 5 and 15 minute load: other work on the machine skews every figure here."""
    return [round(x, 2) for x in os.getloadavg()]


# -- corpus and queries ----------------------------------------------------------------


def corpus_path(requested: Path) -> Path:
    path = requested.expanduser().resolve()
    if path.is_file():
        return path
    print(f"corpus {requested} not found: falling back to the bundled docs {BUNDLED_DOCS}")
    return BUNDLED_DOCS


def load_queries(corpus: Path, limit: int) -> tuple[list[str], str]:
    """Distinct query texts (distinct once normalised) and where they came from."""
    path = corpus.with_name("queries.jsonl") if corpus.is_file() else None
    texts: list[str] = BUILTIN_QUERIES
    source = "built-in list"
    if path is not None and path.is_file():
        with path.open(encoding="utf-8") as lines:
            texts = [str(json.loads(line)["text"]) for line in lines if line.strip()]
        source = str(path)
    seen: dict[str, str] = {}
    for text in texts:
        seen.setdefault(" ".join(text.casefold().split()), text.strip())
    return list(seen.values())[:limit], source


# -- subprocesses ----------------------------------------------------------------------


def run_ingest(
    command: list[str], corpus: Path, env: dict[str, str], workdir: Path, timeout: float
) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "ingest", str(corpus)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}):\n{done.stderr[-3000:]}")
    match = SUMMARY.search(done.stdout)
    if match is None:
        raise RuntimeError(f"no summary line in the ingest output:\n{done.stdout[-2000:]}")
    figures: dict[str, Any] = {k: float(v) for k, v in match.groupdict().items()}
    for key in ("documents", "chunks", "embedded", "skipped"):
        figures[key] = int(figures[key])
    return {**figures, "wall_s": round(wall, 3), "summary": match.group(0)}


def rss_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of a process, in MB."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            figures[key] = round(int(value.split()[0]) / 1024, 1)
    return figures


# -- queries over HTTP -----------------------------------------------------------------


def payload(text: str, synthesize: bool) -> dict[str, Any]:
    return {"query": text, "synthesize": synthesize, "limit": 10}


def timed_queries(client: httpx.Client, payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Client latency and the server's metrics of each request, one after another."""
    rows: dict[str, list[float]] = {"client_ms": []}
    errors = hits = 0
    for body in payloads:
        started = time.perf_counter()
        response = client.post(QUERY_PATH, json=body)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            errors += 1
            continue
        metrics = response.json()["metrics"]
        hits += bool(metrics.get("cache_hit"))
        rows["client_ms"].append(elapsed)
        for name, value in metrics.items():
            if name.endswith("_ms"):
                rows.setdefault(name, []).append(float(value))
    return {
        "requests": len(payloads),
        "errors": errors,
        "cache_hits": hits,
        **{name: summarize(values) for name, values in rows.items()},
    }


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {
        "n": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
        "mean": round(float(a.mean()), 3),
        "max": round(float(a.max()), 3),
    }


def query_groups(base_url: str, queries: list[str], rounds: int) -> dict[str, Any]:
    cold = [payload(q, synthesize=False) for q in queries]
    synth = [payload(f"{q} {SYNTHESIS_SUFFIX}", synthesize=True) for q in queries]
    with httpx.Client(base_url=base_url, timeout=60.0) as client:
        timed_queries(client, [payload(q, False) for q in WARMUP_QUERIES])
        return {
            "cold": timed_queries(client, cold),
            "cache_hit": timed_queries(client, cold * rounds),
            "cold_synthesis": timed_queries(client, synth),
        }


# -- concurrency -----------------------------------------------------------------------


async def concurrent_posts(
    base_url: str, bodies: list[dict[str, Any]], clients: int, deadline_s: float
) -> dict[str, Any]:
    """All `bodies` POSTed at once, each on its own connection, spread over `clients`."""
    per_client = -(-len(bodies) // clients)
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    timeout = httpx.Timeout(deadline_s)
    async with AsyncExitStack() as stack:
        pool = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout)
            )
            for _ in range(clients)
        ]

        async def one(i: int, body: dict[str, Any]) -> tuple[int | str, float | None]:
            try:
                response = await pool[i % clients].post(QUERY_PATH, json=body)
            except httpx.HTTPError as e:
                return type(e).__name__, None
            metrics = response.json().get("metrics", {}) if response.status_code == 200 else {}
            return response.status_code, metrics.get("total_ms")

        started = time.perf_counter()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))), deadline_s + 30
        )
        wall = time.perf_counter() - started
    failures: dict[str, int] = {}
    for status, _ in outcomes:
        if status != 200:
            failures[str(status)] = failures.get(str(status), 0) + 1
    server_ms = [total for _, total in outcomes if total is not None]
    return {
        "requests": len(bodies),
        "errors": sum(failures.values()),
        "failures": failures,
        "wall_s": round(wall, 3),
        "total_ms": summarize(server_ms),
    }


def concurrency_bodies(queries: list[str], count: int) -> list[dict[str, Any]]:
    """Half cached (the cold set, answered before), half new: each new text is sent
    several times at once, so the single-flight path is exercised too."""
    bodies = []
    for i in range(count):
        text = queries[(i // 2) % len(queries)]
        bodies.append(payload(text if i % 2 == 0 else f"{text} concurrently", synthesize=False))
    return bodies


# -- throughput (wrk) ------------------------------------------------------------------


def start_bare_app(stack: ExitStack, workdir: Path, env: dict[str, str], body: bytes) -> str:
    """A bare Starlette endpoint under the service's uvicorn options, answering every
    request with `body` (the service's answer to the throughput's query, so both send
    the same bytes); its base URL."""
    port = free_port()
    log = workdir / "bare.log"
    bare_env = {k: v for k, v in env.items() if not k.startswith("KNOWLEDGE_")}
    command = uvicorn(write_bare_app(workdir, body), port)
    proc = start_process(stack, command, bare_env, workdir, log)
    url = f"http://{HOST}:{port}"
    wait_ready(proc, url + "/", log, 30.0)
    return url


def throughput(
    service_url: str, bare_url: str, body: dict[str, Any], workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Each server under wrk in turn, `--wrk-rounds` times: the ratio is the median of
    the rounds' service / bare (a host's swings move a whole round, both alike), each
    server's figures its median run."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk not found (`apt-get install wrk` enables it)"}
    servers = (("service", service_url), ("bare_starlette", bare_url))
    rounds: list[dict[str, dict[str, Any]]] = [
        {
            name: wrk_run(url + QUERY_PATH, body, workdir, args.wrk_duration, args.wrk_connections)
            for name, url in servers
        }
        for _ in range(args.wrk_rounds)
    ]
    rates = [
        (r["service"]["requests_per_s"], r["bare_starlette"]["requests_per_s"]) for r in rounds
    ]
    ratios = [service / bare for service, bare in rates if service and bare]
    runs = {
        name: sorted((r[name] for r in rounds), key=lambda run: run["requests_per_s"] or 0)[
            len(rounds) // 2
        ]
        for name, _ in servers
    }
    return {
        **runs,
        "ratio": round(float(np.median(ratios)), 3) if ratios else None,
        "ratios": [round(r, 3) for r in ratios],
        "wrk": f"-t2 -c{args.wrk_connections} -d{args.wrk_duration}s POST, "
        f"{args.wrk_rounds} rounds alternated",
    }


def concurrency(
    service_url: str, bare_url: str, queries: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    bodies = concurrency_bodies(queries, args.concurrency)
    return {
        name: asyncio.run(concurrent_posts(url, bodies, args.clients, 120.0))
        for name, url in (("service", service_url), ("bare_starlette", bare_url))
    }


# -- the run ---------------------------------------------------------------------------


def bench(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="knowledge-bench-")))
    env = bench_env(args, workdir)
    command = knowledge_api_command()
    corpus = corpus_path(args.corpus)
    queries, query_source = load_queries(corpus, args.max_queries)
    report: dict[str, Any] = {
        "settings": {
            "store": args.store,
            "embedder": args.embedder,
            "corpus": str(corpus),
            "queries": query_source,
            "distinct_queries": len(queries),
            "cpus": os.cpu_count(),
            "cpu": bench_targets.cpu(),
        },
        "load_average": {"start": load_average()},
    }
    print(bench_targets.cpu_line(report["settings"]["cpu"]), flush=True)
    print(f"ingesting {corpus} ({args.store} store, {args.embedder} embedder) ...", flush=True)
    report["ingest"] = run_ingest(command, corpus, env, workdir, args.timeout)
    print("re-ingesting the same corpus ...", flush=True)
    report["reingest"] = run_ingest(command, corpus, env, workdir, args.timeout)
    if args.embedder == "local":  # the same ingest on the fp32 path, into a store of its own
        print("ingesting it again with KNOWLEDGE_EMBEDDING_PRECISION=fp32 ...", flush=True)
        fp32 = {**env, "KNOWLEDGE_EMBEDDING_PRECISION": "fp32"}
        fp32["KNOWLEDGE_DB_PATH"] = str(workdir / "fp32.db")
        report["ingest_fp32"] = run_ingest(command, corpus, fp32, workdir, args.timeout)
        print("the chosen precision against fp32: cosines, nDCG@10 ...", flush=True)
        report["parity"] = bench_targets.precision_parity(corpus, command, env, workdir)
    print("sentence-transformers, fp32 and bf16, on the same passages and queries ...", flush=True)
    report["peer"] = bench_targets.sentence_transformers(corpus, queries)

    port = free_port()
    log = workdir / "serve.log"
    base_url = f"http://{HOST}:{port}"
    print(f"starting the service on {base_url} ...", flush=True)
    spawned = time.perf_counter()  # ready counts from the process start, model loaded
    server = start_process(
        stack, [*command, "serve", "--host", HOST, "--port", str(port)], env, workdir, log
    )
    ready = wait_ready(server, base_url + "/readyz", log, 180.0, spawned)
    report["startup_s"] = round(ready, 3)
    report["rss_mb"] = {"after_start": rss_mb(server.pid)}
    report["health"] = httpx.get(base_url + "/health", timeout=10.0).json()

    print(
        f"querying ({len(queries)} distinct queries, {args.rounds} cache-hit rounds) ...",
        flush=True,
    )
    report["queries"] = query_groups(base_url, queries, args.rounds)
    cached_body = payload(queries[0], synthesize=False)
    cached = httpx.post(base_url + QUERY_PATH, json=cached_body, timeout=60.0).content
    bare_url = start_bare_app(stack, workdir, env, cached)
    print("throughput ...", flush=True)
    report["throughput"] = throughput(base_url, bare_url, cached_body, workdir, args)
    report["rss_mb"]["after_queries"] = rss_mb(server.pid)
    print(f"{args.concurrency} concurrent requests ...", flush=True)
    report["concurrency"] = concurrency(base_url, bare_url, queries, args)
    report["libtorch"] = bench_targets.mapped_libtorch(server.pid)
    options = {
        "env_size": args.env_size,
        "venv": args.venv,
        "first_start": args.first_start,
        "fresh_clone": args.fresh_clone,
        "port": free_port(),
        "server_pid": server.pid,
        "generators": ["lean", "httpx"] if args.cold_client == "both" else [args.cold_client],
    }
    bench_targets.measure(report, base_url, queries, command, env, workdir, options)
    report["cache"] = httpx.get(base_url + "/health", timeout=10.0).json().get("cache", {})
    report["rss_mb"]["at_end"] = rss_mb(server.pid)
    report["load_average"]["end"] = load_average()
    if server.poll() is not None:
        report["server_exit"] = server.returncode
    return report


# -- the report ------------------------------------------------------------------------


def stat_line(label: str, stats: dict[str, float]) -> str:
    if not stats:
        return f"  {label:<22} -"
    return (
        f"  {label:<22} p50 {stats['p50']:9.3f}  p95 {stats['p95']:9.3f}  "
        f"mean {stats['mean']:9.3f}  max {stats['max']:9.3f}  (n={stats['n']})"
    )


def print_report(report: dict[str, Any]) -> None:
    s = report["settings"]
    print("\n=== knowledge_api benchmark ===")
    print(bench_targets.cpu_line(s["cpu"]))
    load = report["load_average"]
    print(
        f"store {s['store']}, embedder {s['embedder']}, {s['cpus']} CPUs; load average "
        f"(1/5/15 min) {load['start']} at start, {load['end']} at the end"
    )
    print(f"corpus  {s['corpus']}")
    print(f"queries {s['queries']} ({s['distinct_queries']} distinct)")
    embedder = report["health"].get("embedder", {})
    print(f"health  {report['health'].get('status')}, embedder {json.dumps(embedder)}")

    ing, re_ing = report["ingest"], report["reingest"]
    print("\n-- ingestion")
    print(f"  {ing['summary']}")
    print(
        f"  ingest: {ing['chunks_per_s']:.0f} chunks/s ({ing['documents']} documents, "
        f"{ing['chunks']} chunks, {ing['embedded']} embedded) in {ing['seconds']:.1f}s; "
        f"process wall {ing['wall_s']:.1f}s incl. model load"
    )
    print(
        f"  re-ingest: {re_ing['seconds']:.2f}s ({re_ing['skipped']} unchanged skipped, "
        f"{re_ing['embedded']} embedded); process wall {re_ing['wall_s']:.1f}s"
    )

    titles = {
        "cold": "cold queries (synthesize=false)",
        "cache_hit": "cache hits",
        "cold_synthesis": "cold queries with synthesis",
    }
    for name, group in report["queries"].items():
        print(
            f"\n-- {titles[name]}: {group['requests']} requests, {group['errors']} errors, "
            f"{group['cache_hits']} served from cache  [ms]"
        )
        for metric in ("client_ms", "total_ms", "embedding_ms", "search_ms", "synthesis_ms"):
            if metric in group and (name != "cache_hit" or metric in ("client_ms", "total_ms")):
                print(stat_line(metric, group[metric]))

    print("\n-- throughput of a cache hit")
    tp = report["throughput"]
    if "skipped" in tp:
        print(f"  skipped: {tp['skipped']}")
    else:
        print(f"  wrk {tp['wrk']}")
        for label, key in (("service", "service"), ("bare Starlette", "bare_starlette")):
            run = tp[key]
            errors = f"; {run['socket_errors']}" if run["socket_errors"] else ""
            print(
                f"  {label:<15} {run['requests_per_s'] or 0:10.0f} req/s  "
                f"(non-2xx {run['non_2xx']}{errors})"
            )
        print(f"  ratio service / bare: {tp['ratio']} (median of the rounds: {tp['ratios']})")

    c = report["concurrency"]
    print(
        f"\n-- concurrency: {c['service']['requests']} concurrent POSTs "
        "(half cached, half new; one connection each)"
    )
    for label, key in (("service", "service"), ("bare Starlette", "bare_starlette")):
        run = c[key]
        print(
            f"  {label:<15} errors/non-200 {run['errors']} {run['failures'] or ''}  "
            f"wall {run['wall_s']:.2f}s"
        )
        if run["total_ms"]:
            print(stat_line("  server total_ms", run["total_ms"]))
    print("  (the bare app's wall time is the client's own floor)")

    rss = report["rss_mb"]
    print("\n-- memory of the service (MB)")
    print(f"  after start: RSS {rss['after_start'].get('VmRSS')}")
    print(f"  after the cold queries and hits: RSS {rss['after_queries'].get('VmRSS')}")
    print(f"  at the end:  RSS {rss['at_end'].get('VmRSS')} (peak {rss['at_end'].get('VmHWM')})")
    print(f"  process start to /readyz 200: {report['startup_s']:.2f}s")
    print(f"  cache stats at the end: {json.dumps(report['cache'])}")
    if "server_exit" in report:
        print(f"  the service exited early with {report['server_exit']}")
    bench_targets.print_table(report)


def on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds the ExitStack: every child is stopped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    raise_fd_limit(4 * args.concurrency + 256)
    try:
        with ExitStack() as stack:
            report = bench(args, stack)
    except KeyboardInterrupt:
        print("interrupted: subprocesses stopped", file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.TimeoutExpired, httpx.HTTPError) as e:
        print(f"bench failed: {e}", file=sys.stderr)
        return 1
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
