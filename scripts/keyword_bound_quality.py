"""What bounding keyword search costs in ranking quality, simulated on a small BEIR set.

    KNOWLEDGE_DB_PATH=/tmp/msm.db .venv/bin/python scripts/keyword_bound_quality.py \
        ../shared/datasets/msmarco-dev --collection msm

A keyword query ranks at most KNOWLEDGE_KEYWORD_MATCHED_CHUNKS (5,000) chunks' worth of
terms (see knowledge_api/stores/fts_terms.py), so in a store of 5,000 chunks or fewer nothing
changes and every figure of `knowledge-api eval` is the exact one. In a larger store the
bound is a smaller share of it: 2.5 % at 200,000 chunks, 0.5 % at a million. This script
puts the same share of the set's own corpus as the bound (the set's terms are then
left out as often as a store of that size would leave out terms of the same commonness)
and reports nDCG@10 of keyword and hybrid queries for each share. It asserts nothing.
The first run embeds the corpus into `--collection`; later runs reuse it.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from knowledge_api import compose
from knowledge_api.settings import Settings
from knowledge_api.stores.sqlite.fts_terms import MATCHED_CHUNKS
from knowledge_api.usecases.evaluation import evaluate, load_beir

SHARES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.025, 0.005)
"""Bound as a share of the corpus: no bound, then the store sizes 10k, 25k, 50k, 100k,
200k and a million chunks would give."""


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--collection", default="bound")
    args = parser.parse_args()
    with load_beir(args.directory).corpus.open() as lines:
        corpus = sum(1 for _ in lines)
    print("bound / corpus | as a store of | keyword nDCG@10 | hybrid nDCG@10")
    for share in SHARES:
        bounded = share < 1
        bound = max(1, int(corpus * share)) if bounded else 10**12
        settings = Settings.from_env().replace(reranker="none", keyword_matched_chunks=bound)
        service = compose.build_service(settings)
        await service.start()
        try:
            report = await evaluate(
                service, args.directory, ("keyword", "hybrid"), collection=args.collection
            )
        finally:
            await service.stop()
        size = f"{MATCHED_CHUNKS / share:,.0f}" if bounded else "-"
        keyword, hybrid = (report.modes[mode]["ndcg@10"] for mode in ("keyword", "hybrid"))
        print(f"{share:14.3f} | {size:>13} | {keyword:15.3f} | {hybrid:14.3f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
