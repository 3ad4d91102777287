"""Support retrieval speed, server side: p50/p95 of retrieve_knowledge, cold (a new
message: its embedding is computed) and warm (a repeated message: tier-2 cache hit).

    .venv/bin/python scripts/bench_support.py [--articles 200] [--messages 200]

Uses the configured embedder (the local model by default) and a temporary store
holding synthetic KB articles in the support collection.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from knowledge_api.compose import build_service
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from knowledge_api.usecases import support

DEVICES = ["Apollo", "Apollo II", "Apollo III", "Compac F", "Node Box"]
TOPICS = {
    "not_hashing": "shows 0 H/s, the hashrate stays at zero and the pool sees no shares",
    "firmware_update": "the firmware update fails, the dashboard upload stops halfway",
    "connectivity": "the miner drops off Wi-Fi and the dashboard cannot be reached",
    "overheating": "the fan is loud, the board is hot and the miner throttles",
    "refund": "the unit arrived damaged and the customer asks for a refund",
    "node_sync": "the Bitcoin node is stuck syncing at the same block height",
}


def articles(count: int, rng: random.Random) -> list[Document]:
    docs = []
    for i in range(count):
        intent = rng.choice(list(TOPICS))
        devices = rng.sample(DEVICES, rng.randint(0, 2))
        text = (
            f"When {TOPICS[intent]}, check the cables, restart the device and read the log. "
            f"Step {i}: compare the settings with the defaults of {', '.join(devices) or 'any'}."
        )
        docs.append(
            Document(
                "knowledge",
                f"kb-{i}",
                text,
                f"{intent.replace('_', ' ').title()} guide {i}",
                {
                    "intent": [intent],
                    "device": devices,
                    "url": f"https://docs.example.com/kb-{i}",
                    "last_updated": "2024-12-15T10:00:00Z",
                },
                collection="support",
            )
        )
    return docs


def percentiles(samples: list[float]) -> str:
    p50, p95 = np.percentile(samples, [50, 95])
    return f"p50 {p50:.2f} ms, p95 {p95:.2f} ms (n={len(samples)})"


async def run(article_count: int, message_count: int) -> None:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as folder:
        env_settings = Settings.from_env()
        settings = env_settings.replace(db_path=Path(folder) / "k.db", seed_on_empty=False)
        service = build_service(settings)
        await service.start()
        await service.ingest(articles(article_count, rng))
        messages = [
            (
                intent,
                f"Customer {i}: my {rng.choice(DEVICES)} {TOPICS[intent]}",
                rng.choice(DEVICES),
            )
            for i, intent in enumerate(rng.choice(list(TOPICS)) for _ in range(message_count))
        ]
        await support.retrieve(service, "warmup", "warm the model up", {})
        timings: dict[str, list[float]] = {"cold": [], "warm": []}
        outcomes: dict[str, int] = {}
        for kind in ("cold", "warm"):
            for intent, message, product in messages:
                started = time.perf_counter()
                body = await support.retrieve(service, intent, message, {"product": product})
                timings[kind].append((time.perf_counter() - started) * 1000)
                outcomes[body["coverage"]] = outcomes.get(body["coverage"], 0) + 1
        await service.stop()
    print(f"{article_count} articles, {message_count} messages, embedder {settings.embedder}")
    for kind, samples in timings.items():
        print(f"{kind:>5}: {percentiles(samples)}")
    print("coverage:", dict(sorted(outcomes.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--articles", type=int, default=200)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.articles, args.messages))


if __name__ == "__main__":
    main()
