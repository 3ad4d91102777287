"""Prefetching on a replayed query log: the tier-1 hit rate it adds, and what it costs.

    .venv/bin/python scripts/bench_prefetch.py [--visits 300] [--hours 8]

The store holds the bundled docs (local model). The log is made of visits: each user
follows one of a few hand-written chains of related questions (popular chains more
often, a step sometimes skipped), visits arrive at random over `--hours` simulated
hours, and a KB sync changes the store every `--sync-minutes`, which empties tier 1 as
it does in production. The same log is replayed with prefetching off and on (a
simulated clock drives the caches and the prefetch budget; each query's prefetches
finish before the next query, as they would in the user's reading time), and the
hit rates of the live queries are printed: all of them, and the follow-ups (every
question but a visit's first).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from knowledge_api import prefetch as prefetch_module
from knowledge_api.compose import build_service
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ir_metrics import percentiles
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from knowledge_api.usecases import query as use
from knowledge_api.usecases.query import QueryParams

CHAINS = [
    ["how do I run the service", "which settings does the server read", "how does pm2 restart it"],
    [
        "how does hybrid search rank results",
        "what is convex fusion",
        "what does the feedback step do",
    ],
    [
        "how do I ingest markdown files",
        "which file formats are supported",
        "how is a document chunked",
    ],
    [
        "how are answers grounded",
        "how is the confidence score computed",
        "what happens when gemini fails",
    ],
    ["how do I use postgres", "how do I create the schema", "which sql functions exist"],
    ["how do api keys work", "which scopes does a key have", "what does a 401 mean"],
    [
        "what does the cache keep",
        "when is the response cache emptied",
        "how big is the embedding cache",
    ],
    ["how do I use qdrant", "how are collections laid out in qdrant", "how fast is qdrant search"],
    [
        "what does the health route report",
        "what are livez and readyz",
        "which metrics are exported",
    ],
    [
        "how do I stream a query",
        "what events does the stream send",
        "what happens when a client leaves",
    ],
    [
        "how is git history ingested",
        "how is a commit stored",
        "how does re-ingestion skip unchanged",
    ],
    [
        "what does the mcp server offer",
        "how do I configure an mcp client",
        "which tools does mcp expose",
    ],
]


@dataclass(order=True)
class Asked:
    at: float
    visit: int
    step: int
    text: str


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_log(visits: int, hours: float, seed: int) -> list[Asked]:
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(CHAINS))]  # a few chains are popular
    log = []
    for visit in range(visits):
        chain = rng.choices(CHAINS, weights)[0]
        start = rng.uniform(0, hours * 3600)
        steps = [q for i, q in enumerate(chain) if i == 0 or rng.random() > 0.15]
        steps = steps[: rng.choice([2, 3, 3])]
        for step, text in enumerate(steps):
            log.append(Asked(start + 40.0 * step, visit, step, text))
    return sorted(log)


def only(predictors: str) -> None:
    """Leave one predictor out, to see what the other adds alone."""
    if predictors == "log":
        prefetch_module.from_sources = lambda hits: []
    elif predictors == "sources":
        prefetch_module.Successions.next_of = lambda self, query: []


async def replay(log: list[Asked], prefetch: bool, sync_minutes: float, db: Path) -> dict:
    settings = Settings.from_env(environ={}, env_file=None).replace(
        db_path=db, seed_on_empty=False, prefetch="on" if prefetch else "off"
    )
    service = build_service(settings)
    await service.start()
    clock = Clock()
    for cache in (service.caches.responses, service.caches.embeddings):
        cache.clock = clock
    service.prefetcher.clock = clock
    try:
        docs = Path(__file__).resolve().parents[1] / "knowledge_api" / "docs"
        await service.ingest(load_paths([docs], LoadOptions(source_type="knowledge")))
        hits = {"all": [0, 0], "follow-ups": [0, 0]}
        next_sync, syncs = sync_minutes * 60, 0
        live_ms: list[float] = []
        for asked in log:
            clock.now = asked.at
            while asked.at >= next_sync:
                note = Document("knowledge", f"sync-{syncs}", f"KB sync note number {syncs}.")
                await service.ingest([note])
                next_sync, syncs = next_sync + sync_minutes * 60, syncs + 1
            params = QueryParams(asked.text, synthesize=True)
            started = time.perf_counter()
            served = await use.query(service, params, f"user-{asked.visit}")
            live_ms.append((time.perf_counter() - started) * 1000)
            await service.prefetcher.drain()
            for kind in ("all", "follow-ups") if asked.step else ("all",):
                hits[kind][0] += served.cache_hit
                hits[kind][1] += 1
        return {
            "hit_rate": {k: round(h / n, 3) for k, (h, n) in hits.items()},
            "queries": hits["all"][1],
            "syncs": syncs,
            "prefetch": dict(service.prefetcher.counts),
            "live_ms": percentiles(live_ms),
        }
    finally:
        await service.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--visits", type=int, default=300)
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--sync-minutes", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--predictors",
        choices=("both", "log", "sources"),
        default="both",
        help="log: what users asked next only; sources: the results' titles only",
    )
    parser.add_argument("--skip-off", action="store_true", help="replay with prefetch on only")
    args = parser.parse_args()
    only(args.predictors)
    log = replay_log(args.visits, args.hours, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        for prefetch in (True,) if args.skip_off else (False, True):
            db = Path(folder) / f"kb-{prefetch}.db"
            result = await replay(log, prefetch, args.sync_minutes, db)
            print(f"prefetch {'on ' if prefetch else 'off'}: {result}")


if __name__ == "__main__":
    asyncio.run(main())
