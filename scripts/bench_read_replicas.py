"""Read replicas of the postgres store: what choosing one costs a search, and how many
of a read-heavy load's reads one replica takes.

A primary and its streaming standby are made from the embedded Postgres's binaries on
loopback (tests/pg_replication.py), the store filled with --documents documents (the
fake embedder: the store is measured, not a model).

- `search`: the p50 of a hybrid search through the store in process, with no replica
  (every read on the primary) and with the standby as KNOWLEDGE_DATABASE_READ_URLS
  (reads on the replica once it has replayed the collection's last write), the runs
  alternating --rounds times; and the p50 of the choice itself (`Replicas.route`).
  Budget: the replica check adds at most 0.3 ms to a search's p50.
- `load`: `knowledge-api serve` with the replica, --clients clients sending --requests
  requests, nine in ten a search (a question never asked before: the store answers,
  not the cache) and one in ten a new document, into --collections collections.
  Budget: no request lost, and at least 80 % of the searches' store reads served by
  the replica, counted by knowledge_store_reads_total.

    .venv/bin/python scripts/bench_read_replicas.py [--documents 2000] [--searches 300]
        [--rounds 3] [--clients 32] [--requests 3000] [--collections 4]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from knowledge_api.compose import build_embedder, build_store, embedder_identity  # noqa: E402
from knowledge_api.config.fields import Secret  # noqa: E402
from knowledge_api.ingest.pipeline import Ingestor  # noqa: E402
from knowledge_api.models import Document, SearchFilters  # noqa: E402
from knowledge_api.settings import Settings  # noqa: E402
from knowledge_api.stores.base import SearchRequest  # noqa: E402
from knowledge_api.stores.postgres.replicas import Reading, Replicas  # noqa: E402
from scripts.bench_http import serve_alone, service_env  # noqa: E402
from tests.pg_replication import Replicated  # noqa: E402

WARM_UP = 20
"""Searches of each run not counted: the server's caches fill."""
WORDS = [
    "login",
    "timeout",
    "gateway",
    "release",
    "audio",
    "latency",
    "backup",
    "export",
    "password",
    "schedule",
    "cluster",
    "replica",
    "index",
    "search",
    "report",
    "invoice",
    "sensor",
    "crossing",
    "upload",
    "retention",
]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def documents(count: int, collections: list[str], seed: int = 1) -> list[Document]:
    rng = random.Random(seed)
    return [
        Document(
            source_type="knowledge",
            source_id=f"doc-{n}",
            title=text(rng, 3),
            content=f"Note {n}: {text(rng, 60)}.",
            collection=collections[n % len(collections)],
        )
        for n in range(count)
    ]


def settings(cluster: Replicated, folder: Path, replica: bool) -> Settings:
    base = Settings.from_env(environ={}, env_file=None)
    return base.replace(
        store="postgres",
        embedder="fake",
        db_path=folder / "k.db",
        database_url=Secret(cluster.primary_url),
        database_read_urls=Secret(cluster.standby_url if replica else ""),
    )


async def search_p50(config: Settings, queries: list[str], held: bool = False) -> float:
    """Milliseconds at the median of one search per query (after a warm-up); `held`:
    with the replica configured, every read is kept on the primary (as after a write
    the replica has not replayed yet), so only the check is added."""
    embedder = build_embedder(config)
    store: Any = build_store(config, embedder_identity(embedder))
    await store.open()
    try:
        await asyncio.sleep(0.3)  # the replica's position read at least once
        if held:
            store.replicas.record(None, 2**62)
        times = []
        for n, query in enumerate(queries):
            vector = embedder.embed_query(query)
            started = time.perf_counter()
            await store.search(SearchRequest(query, vector, 10, SearchFilters()))
            if n >= WARM_UP:
                times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)
    finally:
        await store.close()


async def fill(config: Settings, docs: list[Document]) -> None:
    """`docs` chunked, embedded and written as the service ingests them."""
    embedder = build_embedder(config)
    store = build_store(config, embedder_identity(embedder))

    async def embed(texts: Sequence[str]) -> np.ndarray:
        return embedder.embed_documents(texts)

    await store.open()
    try:
        await store.check_embedder(embedder.name, embedder.dimension)
        await Ingestor(store, embedder, embed).ingest(docs)
    finally:
        await store.close()


def route_p50_us(rounds: int = 100_000) -> float:
    replicas = Replicas(["postgresql://replica:5432/db"])
    replicas.replicas[0].state, replicas.replicas[0].replayed = "up", 10
    replicas.record(["a"], 5)
    reading = Reading("default")
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        for _ in range(rounds // 20):
            replicas.route(reading)
        samples.append((time.perf_counter() - started) / (rounds // 20) * 1e6)
    return statistics.median(samples)


def bench_search(cluster: Replicated, folder: Path, args: argparse.Namespace) -> None:
    """The three ways a search may run, alternating, the median of the rounds' p50s."""
    rng = random.Random(3)
    runs: dict[str, list[float]] = {"primary": [], "checked": [], "replica": []}
    for _ in range(args.rounds):
        queries = [text(rng, 4) for _ in range(args.searches + WARM_UP)]
        primary, replica = settings(cluster, folder, False), settings(cluster, folder, True)
        runs["primary"].append(asyncio.run(search_p50(primary, queries)))
        runs["checked"].append(asyncio.run(search_p50(replica, queries, held=True)))
        runs["replica"].append(asyncio.run(search_p50(replica, queries)))
    p50 = {name: statistics.median(values) for name, values in runs.items()}
    print(f"search p50 ({args.searches} searches x {args.rounds} rounds, median of the rounds):")
    print(f"  no replica configured                {p50['primary']:7.2f} ms")
    print(
        f"  replica checked, read on the primary {p50['checked']:7.2f} ms "
        f"(the check adds {p50['checked'] - p50['primary']:+.2f} ms)"
    )
    print(f"  read on the replica                  {p50['replica']:7.2f} ms")
    print(f"  choosing a replica (Replicas.route) alone: p50 {route_p50_us():.2f} us")


def serve(cluster: Replicated, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = service_env(
        folder,
        store="postgres",
        database_url=cluster.primary_url,
        database_read_urls=cluster.standby_url,
        seed_on_empty="false",
        log_level="warning",
        rate_limit="0",
    )
    return serve_alone({**env, "PYTHONPATH": str(ROOT)}, folder)


async def store_reads(client: httpx.AsyncClient) -> dict[str, float]:
    exposition = (await client.get("/metrics")).text
    sample = r'knowledge_store_reads_total\{replica="([^"]*)",target="(\w+)"\} (\S+)'
    counts: dict[str, float] = {}
    for _, target, value in re.findall(sample, exposition):
        counts[target] = counts.get(target, 0.0) + float(value)
    return counts


async def load(url: str, args: argparse.Namespace, collections: list[str]) -> None:
    rng = random.Random(11)
    plan = [rng.random() < 0.1 for _ in range(args.requests)]
    counts = {"searches": 0, "writes": 0, "failed": 0}
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        before = await store_reads(client)
        queue = iter(enumerate(plan))

        async def worker() -> None:
            for n, write in queue:
                collection = rng.choice(collections)
                if write:
                    body = {
                        "collection": collection,
                        "source_type": "knowledge",
                        "source_id": f"load-{n}",
                        "content": f"Load note {n}: {text(rng, 40)}.",
                    }
                    path, kind = "/v1/knowledge/documents", "writes"
                else:
                    query = f"{text(rng, 4)} {n}"
                    body = {"query": query, "collection": collection, "synthesize": False}
                    path, kind = "/v1/knowledge/query", "searches"
                try:
                    response = await client.post(path, json=body)
                    ok = response.status_code < 400
                except httpx.HTTPError:
                    ok = False
                counts[kind if ok else "failed"] += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(args.clients)))
        seconds = time.monotonic() - started
        after = await store_reads(client)
    replica = after.get("replica", 0) - before.get("replica", 0)
    primary = after.get("primary", 0) - before.get("primary", 0)
    share = replica / max(1.0, replica + primary)
    print(
        f"read-heavy load, {args.clients} clients: {counts['searches']} searches, "
        f"{counts['writes']} writes, {counts['failed']} failed in {seconds:.1f} s "
        f"({args.requests / seconds:.0f} requests/s); store reads: {replica:.0f} on the "
        f"replica, {primary:.0f} on the primary ({share:.1%} on the replica)"
    )


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # each figure as soon as it is measured
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--searches", type=int, default=300, help="searches per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--collections", type=int, default=4)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="knowledge-bench-replicas-"))
    cluster = Replicated(home)
    collections = [f"c{i}" for i in range(args.collections)]
    try:
        cluster.start()
        folder = home / "service"
        folder.mkdir()
        asyncio.run(fill(settings(cluster, folder, False), documents(args.documents, ["default"])))
        bench_search(cluster, folder, args)
        asyncio.run(fill(settings(cluster, folder, False), documents(400, collections, 2)))
        process, url = serve(cluster, folder)
        try:
            asyncio.run(load(url, args, collections))
        finally:
            process.terminate()
            process.wait(10)
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
