"""Semantic routing on a mixed corpus: quality kept and search time saved.

    .venv/bin/python scripts/bench_routing.py [--db /tmp/routing.db] [--repeats 5]

Builds the mixed corpus of scripts/mixed_corpus.py (every source type, judged queries)
in a SQLite store with the local model, then for each routing margin: nDCG@10 with
routing on against routing off, how many queries lost the source of their answer
(a judged document, or the unrouted top result) and the p50/p95 of the retrieve step
(query embeddings already in tier 2, so the difference is routing and search).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from mixed_corpus import Mixed, build

from knowledge_api.compose import build_service
from knowledge_api.ir_metrics import distinct, ndcg_at_k, percentiles
from knowledge_api.models import SearchFilters
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings

MARGINS = (0.1, 0.2, 0.3, 0.4, 0.5)
FILTERS = SearchFilters()


async def run_all(service: KnowledgeService, mixed: Mixed, route: bool) -> dict[str, tuple]:
    """query id -> (ranked source ids, routed sources, source type of the top hit)."""
    found = {}
    for qid, text in mixed.queries.items():
        got = await service.retrieve(text, 10, FILTERS, 0.0, route=route)
        ranked = distinct(hit.source_id for hit in got.hits)
        top = got.hits[0].source_type if got.hits else ""
        found[qid] = (ranked, got.routed, top)
    return found


async def timings(service: KnowledgeService, mixed: Mixed, repeats: int) -> tuple[dict, dict]:
    """p50/p95 of the retrieve step with routing off and on, each query timed both ways
    back to back, so a busy machine slows both alike."""
    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for text in mixed.queries.values():
            for route in (False, True):
                started = time.perf_counter()
                await service.retrieve(text, 10, FILTERS, 0.0, route=route)
                samples[route].append((time.perf_counter() - started) * 1000)
    return percentiles(samples[False]), percentiles(samples[True])


def quality(mixed: Mixed, found: dict[str, tuple]) -> float:
    scores = [ndcg_at_k(found[qid][0], mixed.grades[qid], 10) for qid in mixed.queries]
    return sum(scores) / len(scores)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, default=Path("/tmp/routing-bench.db"))
    parser.add_argument("--msmarco", type=Path, default=Path("/work/shared/datasets/msmarco-dev"))
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    mixed = build(args.msmarco, args.repo)
    settings = Settings.from_env(environ={}, env_file=None).replace(
        db_path=args.db, seed_on_empty=False, routing="on"
    )
    service = build_service(settings)
    await service.start()
    try:
        started = time.perf_counter()
        summary = await service.ingest(mixed.documents)
        print(
            f"corpus: {summary.documents} documents, {summary.chunks} chunks "
            f"({summary.embedded} embedded in {time.perf_counter() - started:.0f} s); "
            f"{len(mixed.queries)} judged queries"
        )
        counts: dict[str, int] = {}
        for source in mixed.expected.values():
            counts[source] = counts.get(source, 0) + 1
        print("queries by the source of their answer:", counts)
        await service.learn_routes("default")
        base = await run_all(service, mixed, route=False)
        base_ndcg = quality(mixed, base)
        print(f"routing off: nDCG@10 {base_ndcg:.4f}")
        print(
            "margin | nDCG@10 on | lost judged | lost top source | sources searched (mean) | "
            "p50 off / on ms | p95 off / on ms | p50 ratio"
        )
        for margin in MARGINS:
            service.settings = settings.replace(routing_margin=margin)
            routed = await run_all(service, mixed, route=True)
            lost = [
                qid
                for qid in mixed.queries
                if {base[qid][2], mixed.expected[qid]} - set(routed[qid][1])
            ]
            lost_judged = sum(1 for q in mixed.queries if mixed.expected[q] not in routed[q][1])
            lost_top = sum(1 for q in mixed.queries if base[q][2] not in routed[q][1])
            searched = sum(len(r[1]) for r in routed.values()) / len(routed)
            off, on = await timings(service, mixed, args.repeats)
            print(
                f"{margin:.2f} | {quality(mixed, routed):.4f} | {lost_judged} | {lost_top} | "
                f"{searched:.2f} | {off['p50']:.2f} / {on['p50']:.2f} | "
                f"{off['p95']:.2f} / {on['p95']:.2f} | {on['p50'] / off['p50']:.2f}"
            )
            for qid in lost:
                print(
                    f"    lost: {mixed.queries[qid]!r} (answer in {mixed.expected[qid]}, "
                    f"unrouted top in {base[qid][2]}, searched {routed[qid][1]})"
                )
    finally:
        await service.stop()


if __name__ == "__main__":
    asyncio.run(main())
