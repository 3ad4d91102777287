"""What the words behind citations cost: the time finding them adds to an answer, and
what recording each chunk's offsets adds to ingestion.

    .venv/bin/python scripts/bench_citations.py [--embedder local|fake] [--rounds 5]

Ingests the bundled docs (knowledge_api/docs) into a SQLite store in a temporary
directory, then:

- span finding: for each question of tests/answers.json asked of the docs, 5 passages
  are retrieved and the answer written (the extractive synthesizer, as /answer
  answers), and, apart, an answer of 5 sources: a sentence of each passage, its words
  reordered as a writer would (the fuzzy step, the slowest), each cited. Reported: the
  p50 (and p95) of the answer without spans, and of what finding its spans adds (the
  service's `evidence` step: reading the cited documents and finding every quote);
- ingestion: the docs chunked and written to a fresh store `--rounds` times with the
  offsets recorded and as many without (the chunker's offsets replaced by none),
  alternately; the median seconds of each, and of chunking alone, and what finding the
  offsets (chunking with them less chunking without) is of the ingest with them.

This measures and reports; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api import text
from knowledge_api.compose import build_service
from knowledge_api.ingest import chunker
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.pipeline import chunked
from knowledge_api.models import Document, Outcome
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import answers

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "knowledge_api" / "docs"
QUESTIONS = ROOT / "tests" / "answers.json"
SOURCES = 5
T = TypeVar("T")


def settings(folder: Path, embedder: str) -> Settings:
    return Settings.from_env(environ={}, env_file=None).replace(
        db_path=folder / "bench.db",
        embedder=embedder,
        seed_on_empty=False,
        synthesizer="extractive",
    )


def documents() -> list[Document]:
    return load_paths([DOCS], LoadOptions()).documents


def percentiles(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(float(np.percentile(values, 50)), 3),
        "p95": round(float(np.percentile(values, 95)), 3),
        "n": len(values),
    }


def reworded(sentence: str) -> str:
    """A sentence as a writer might restate it: its words, the last half first."""
    words = sentence.rstrip(".").split()
    half = len(words) // 2
    return " ".join(words[half:] + words[:half])


async def timed(work: Awaitable[T]) -> tuple[T, float]:
    """The value of `work` and the milliseconds it took."""
    started = time.perf_counter()
    value = await work
    return value, (time.perf_counter() - started) * 1000


async def written(service: KnowledgeService, question: str, hits: list[Any]) -> Outcome:
    """The synthesis chain's answer, without the spans of its citations."""
    async with aclosing(service.synthesizer.stream(question, hits)) as events:
        async for name, data in events:
            if name == "done":
                outcome: Outcome = data
                return outcome
    raise RuntimeError("the chain ended without an answer")


async def span_finding(service: KnowledgeService) -> dict[str, Any]:
    asked = [
        q["ask"] for q in json.loads(QUESTIONS.read_text())["questions"] if q["corpus"] == "docs"
    ]
    answer_ms: list[float] = []
    extractive_ms: list[float] = []
    five_ms: list[float] = []
    for question in asked:
        params = answers.AnswerParams(query=question, threshold=0.0, limit=SOURCES)
        found = await answers.search(service, params, 0.0)
        hits = found.hits[:SOURCES]
        if len(hits) < SOURCES:
            continue
        outcome, took = await timed(written(service, question, hits))
        answer_ms.append(took)
        if outcome.citations:
            _, spent = await timed(service.evidence(outcome))
            extractive_ms.append(spent)
        restated = " ".join(
            f"{reworded(text.sentences(hit.chunk.content)[0])} [{n}]."
            for n, hit in enumerate(hits, 1)
        )
        five = Outcome(restated, "bench", "", 0.0, None, tuple(hits), list(range(1, 6)), [])
        _, spent = await timed(service.evidence(five))
        five_ms.append(spent)
    return {
        "answer_without_spans_ms": percentiles(answer_ms),
        "spans_of_the_extractive_answer_ms": percentiles(extractive_ms),
        "spans_of_a_5_source_written_answer_ms": percentiles(five_ms),
    }


@contextmanager
def without_offsets() -> Iterator[None]:
    """The chunker as it was before chunks recorded offsets."""
    recorded = chunker.offsets
    chunker.offsets = lambda content, pieces: [None] * len(pieces)  # type: ignore[assignment]
    try:
        yield
    finally:
        chunker.offsets = recorded  # type: ignore[assignment]


async def ingested(folder: Path, embedder: str, docs: list[Document]) -> float:
    service = build_service(settings(folder, embedder))
    await service.start()
    try:
        _, took = await timed(service.ingest(docs))
    finally:
        await service.stop()
    return took / 1000


def chunking_seconds(docs: list[Document]) -> float:
    started = time.perf_counter()
    chunked(docs)
    return time.perf_counter() - started


async def ingestion(embedder: str, rounds: int) -> dict[str, Any]:
    docs = documents()
    runs: dict[str, list[float]] = {"with": [], "without": []}
    chunking: dict[str, list[float]] = {"with": [], "without": []}
    for round_ in range(rounds):
        for kind in ("with", "without") if round_ % 2 == 0 else ("without", "with"):
            with tempfile.TemporaryDirectory() as folder:
                if kind == "without":
                    with without_offsets():
                        chunking[kind].append(chunking_seconds(documents()))
                        runs[kind].append(await ingested(Path(folder), embedder, documents()))
                else:
                    chunking[kind].append(chunking_seconds(documents()))
                    runs[kind].append(await ingested(Path(folder), embedder, documents()))
    with_s, without_s = statistics.median(runs["with"]), statistics.median(runs["without"])
    return {
        "documents": len(docs),
        "ingest_with_offsets_s": round(with_s, 3),
        "ingest_without_offsets_s": round(without_s, 3),
        "ingest_added_percent": round(100 * (with_s - without_s) / without_s, 2),
        "chunking_with_offsets_ms": round(1000 * statistics.median(chunking["with"]), 2),
        "chunking_without_offsets_ms": round(1000 * statistics.median(chunking["without"]), 2),
        "offsets_share_of_ingest_percent": round(
            100
            * (statistics.median(chunking["with"]) - statistics.median(chunking["without"]))
            / with_s,
            3,
        ),
    }


async def run(embedder: str, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        service = build_service(settings(Path(folder), embedder))
        await service.start()
        try:
            await service.ingest(documents())
            spans = await span_finding(service)
        finally:
            await service.stop()
    return {
        "embedder": embedder,
        "span_finding": spans,
        "ingestion": await ingestion(embedder, rounds),
    }


def print_report(report: dict[str, Any]) -> None:
    spans, ingest = report["span_finding"], report["ingestion"]
    print(f"\n=== citations' spans ({report['embedder']} embedder) ===")
    for name, stats in spans.items():
        print(f"  {name:<40} p50 {stats['p50']:>8.3f}  p95 {stats['p95']:>8.3f}  (n={stats['n']})")
    print(
        f"  ingestion of {ingest['documents']} documents: {ingest['ingest_with_offsets_s']} s "
        f"with offsets, {ingest['ingest_without_offsets_s']} s without "
        f"({ingest['ingest_added_percent']:+.2f} %); chunking "
        f"{ingest['chunking_with_offsets_ms']} ms with, "
        f"{ingest['chunking_without_offsets_ms']} ms without: finding the offsets is "
        f"{ingest['offsets_share_of_ingest_percent']} % of the ingest (the two ingests' "
        "difference is mostly noise on a shared machine)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", default="local", choices=("local", "fake"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    report = asyncio.run(run(args.embedder, args.rounds))
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
