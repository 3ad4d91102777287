"""The response cache's hit rate while writes go on: concurrent clients on loopback,
a share of them writing documents, the others asking a fixed set of questions in
several collections.

A server (this checkout; with `--baseline DIR` also the package of another checkout,
run the same way right after it) starts on an empty store (`--store`: a SQLite file,
a local Chroma or Qdrant folder) with the fake embedder and every collection filled
alike. Then `--clients` clients send `--requests` requests in all: each a write (a
new document in a collection writes go to) with probability `--writes`, else a query
drawn from `--questions` per collection, in a random collection. The hit rate is the
share of queries answered with `metrics.cache_hit: true`. Writes go either to every
collection alike (`spread`) or to the first one only (`one`: one collection being
ingested while the others are read); both are run unless `--into` names one.

    .venv/bin/python scripts/bench_write_mix.py [--clients 200] [--requests 6000]
        [--writes 0.2] [--baseline DIR] [--into spread|one] [--store sqlite|chroma|qdrant]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import tempfile
from pathlib import Path

import httpx
from bench_http import serve_alone, service_env

TOPICS = [
    "login timeout with single sign-on",
    "duplicate assets when paging search results",
    "accepted audio formats for ingestion",
    "release date of version 4.2",
    "median search latency last week",
    "gateway timeout configuration",
    "password reset e-mail never arrives",
    "export of reports as spreadsheets",
    "rate limit of the public API",
    "backup schedule of the database",
    "dark mode in the settings page",
    "retention of deleted documents",
]


def document(collection: str, n: int) -> dict[str, object]:
    topic = TOPICS[n % len(TOPICS)]
    return {
        "source_type": "knowledge",
        "source_id": f"{collection}-{n}",
        "title": topic.capitalize(),
        "content": f"Note {n} of {collection}: about the {topic}, what to check and who owns it.",
        "collection": collection,
    }


def serve(checkout: Path | None, folder: Path, store: str) -> tuple[subprocess.Popen[bytes], str]:
    env = service_env(
        folder,
        seed_on_empty="false",
        log_level="warning",
        rate_limit="0",
        store=store,
        chroma_path=str(folder / "chroma"),
        qdrant_path=str(folder / "qdrant"),
    )
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout.resolve())
    return serve_alone(env, folder)


async def load(url: str, args: argparse.Namespace, into: str) -> dict[str, int]:
    """Hits, queries, writes and failed requests (a dropped connection) of one run."""
    collections = [f"c{i}" for i in range(args.collections)]
    writable = collections if into == "spread" else collections[:1]
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        for collection in collections:
            batch = [document(collection, n) for n in range(2 * len(TOPICS))]
            response = await client.post("/v1/knowledge/documents", json={"documents": batch})
            response.raise_for_status()
        randomness = random.Random(7)
        plan = [randomness.random() < args.writes for _ in range(args.requests)]
        counts = {"hits": 0, "queries": 0, "writes": 0, "failed": 0}
        written = iter(range(10_000, 10_000 + args.requests))

        async def one(write: bool) -> None:
            collection = randomness.choice(writable if write else collections)
            if write:
                doc = document(collection, next(written))
                (await client.post("/v1/knowledge/documents", json=doc)).raise_for_status()
                counts["writes"] += 1
                return
            question = TOPICS[randomness.randrange(args.questions)]
            body = {"query": question, "collection": collection, "synthesize": False}
            response = await client.post("/v1/knowledge/query", json=body)
            response.raise_for_status()
            counts["queries"] += 1
            counts["hits"] += bool(response.json()["metrics"]["cache_hit"])

        queue = iter(plan)

        async def worker() -> None:
            for write in queue:
                try:
                    await one(write)
                except httpx.TransportError:
                    counts["failed"] += 1

        await asyncio.gather(*(worker() for _ in range(args.clients)))
    return counts


def run(checkout: Path | None, args: argparse.Namespace, into: str) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as folder:
        process, url = serve(checkout, Path(folder), args.store)
        try:
            return asyncio.run(load(url, args, into))
        finally:
            process.terminate()
            process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=6000, help="requests in all")
    parser.add_argument("--writes", type=float, default=0.2, help="share of writes")
    parser.add_argument("--collections", type=int, default=4)
    parser.add_argument("--questions", type=int, default=6, help="distinct questions asked")
    parser.add_argument("--into", choices=["spread", "one"], help="where writes go (both)")
    parser.add_argument("--baseline", type=Path, help="another checkout, run the same way")
    parser.add_argument("--store", choices=["sqlite", "chroma", "qdrant"], default="sqlite")
    args = parser.parse_args()
    args.questions = min(args.questions, len(TOPICS))
    print(
        f"{args.clients} clients, {args.requests} requests, {args.writes:.0%} writes, "
        f"{args.collections} collections, {args.questions} questions each, {args.store} store"
    )
    servers: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline:
        servers.insert(0, (f"baseline {args.baseline}", args.baseline))
    for into in [args.into] if args.into else ["spread", "one"]:
        for name, checkout in servers:
            counts = run(checkout, args, into)
            rate = counts["hits"] / max(1, counts["queries"])
            print(
                f"  writes into {into:<6} {name:<40} hit rate {rate:6.1%}  ({counts['queries']} "
                f"queries, {counts['writes']} writes, {counts['failed']} connections dropped)"
            )


if __name__ == "__main__":
    main()
