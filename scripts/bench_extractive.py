"""What choosing offline answers by meaning costs: milliseconds per answer of the
extractive synthesizer with the local model (sentence vectors not cached yet, and
cached) against words alone, on the same passages.

    KNOWLEDGE_DB_PATH=store.db python scripts/bench_extractive.py [--rounds 5]

The questions are those of scripts/answers_on_readmes.py; run that script with
`--work DIR` first and point KNOWLEDGE_DB_PATH at DIR/readmes.db.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from answers_on_readmes import QUESTIONS

from knowledge_api import compose
from knowledge_api.models import SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer, extract


def summary(name: str, samples: list[float]) -> str:
    p50, p95 = np.percentile(samples, [50, 95])
    return f"{name:<28} p50 {p50:8.1f} ms   p95 {p95:8.1f} ms   ({len(samples)} answers)"


async def bench(rounds: int) -> None:
    settings = Settings.from_env().replace(synthesizer="extractive", seed_on_empty=False)
    service = compose.build_service(settings)
    await service.start()
    try:
        passages = [
            (q, (await service.retrieve(q, 5, SearchFilters(), 0.2)).hits) for q in QUESTIONS
        ]
        words, cold, warm = [], [], []
        for _ in range(rounds):
            link = ExtractiveSynthesizer()
            link.use_embedder(service.embed_sentences)
            for question, hits in passages:
                started = time.perf_counter()
                extract(question, hits)
                words.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await link.extract(question, hits)
                cold.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await link.extract(question, hits)
                warm.append((time.perf_counter() - started) * 1000)
        print(summary("words only", words))
        print(summary("by meaning, not cached", cold))
        print(summary("by meaning, cached", warm))
        added = np.median(np.array(cold) - np.array(words))
        print(f"added by meaning, not cached: {added:.1f} ms per answer (median)")
    finally:
        await service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(bench(parser.parse_args().rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
