"""Evaluation of a BEIR-layout directory (`knowledge-api eval`): ingest its corpus, run
every judged query in every search mode (and, when asked, hybrid with the service's
reranker), report the IR metrics and latency, and whether hybrid beat both single
rankings."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge_api.beir import jsonl_records
from knowledge_api.errors import InvalidRequest
from knowledge_api.ir_metrics import distinct, eval_metrics, mean_metrics, percentiles
from knowledge_api.models import (
    SEARCH_MODES,
    Progress,
    SearchFilters,
    SearchHit,
    SearchMode,
)
from knowledge_api.service import KnowledgeService

EVAL_METRICS = ("ndcg@10", "leaderboard_ndcg@10", "recall@10", "recall@100", "mrr@10")
EVAL_DEPTH = 100
VERDICT_METRICS = {"ndcg@10": "nDCG@10", "leaderboard_ndcg@10": "lb nDCG@10"}
"""The metrics hybrid must win on to have beaten both single rankings."""


# -- BEIR layout ---------------------------------------------------------------------


@dataclass(frozen=True)
class BeirSet:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv of one directory."""

    corpus: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def judged(self) -> list[tuple[str, str]]:
        """(query id, text) of the queries that have judgements, in file order."""
        return [(qid, text) for qid, text in self.queries.items() if self.qrels.get(qid)]


def load_beir(folder: Path, split: str = "test") -> BeirSet:
    corpus, queries, qrels = folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels"
    for required in (corpus, queries, qrels / f"{split}.tsv"):
        if not required.is_file():
            raise InvalidRequest(
                str(required),
                f"missing (a BEIR directory has corpus.jsonl, queries.jsonl and qrels/{split}.tsv)",
            )
    return BeirSet(corpus, read_queries(queries), read_qrels(qrels / f"{split}.tsv"))


def read_queries(path: Path) -> dict[str, str]:
    return {record["_id"]: record["text"] for record in jsonl_records(path, "query")}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query-id, corpus-id, score per tab-separated line; a header line is optional
    and a 4-column TREC line (query, iteration, doc, score) is read too."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) == 4:
                parts = [parts[0], parts[2], parts[3]]
            try:
                query, doc, grade = parts[0], parts[1], int(parts[2])
            except (IndexError, ValueError) as e:
                if number == 1:
                    continue  # the header
                rule = "must be query-id, corpus-id, score"
                raise InvalidRequest(f"{path}:{number}", rule) from e
            qrels.setdefault(query, {})[doc] = grade
    return qrels


# -- evaluation run ------------------------------------------------------------------


@dataclass(frozen=True)
class EvalReport:
    documents: int
    queries: int
    collection: str
    kept: bool
    embedded: int
    ingest_s: float
    modes: dict[str, dict[str, float]]
    """Metrics per row: each search mode, then hybrid+<reranker> when one was asked for."""
    latency_ms: dict[str, dict[str, float]]
    degraded: dict[str, int] = field(default_factory=dict)
    """Queries per row that came back with a warning (a reranking that failed, say)."""

    def hybrid_beats_single(self) -> dict[str, bool] | None:
        """Per verdict metric, whether hybrid scored above both vector and keyword (as
        printed, to 3 places); None when a mode was not run."""
        if not all(mode in self.modes for mode in SEARCH_MODES):
            return None
        return {
            metric: round(self.modes["hybrid"][metric], 3)
            > max(round(self.modes[mode][metric], 3) for mode in ("vector", "keyword"))
            for metric in VERDICT_METRICS
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "modes": self.modes,
            "latency_ms": self.latency_ms,
            "degraded": self.degraded,
            "hybrid_beats_single": self.hybrid_beats_single(),
            "queries": self.queries,
            "documents": self.documents,
            "collection": self.collection,
            "embedded": self.embedded,
            "ingest_s": round(self.ingest_s, 1),
        }

    def table(self) -> str:
        width = max(8, *(len(mode) for mode in self.modes))
        header = f"{'mode':<{width}} {'nDCG@10':>8} {'lb nDCG@10':>10} {'R@10':>6} {'R@100':>6} "
        header += f"{'MRR@10':>7} {'p50 ms':>7} {'p95 ms':>7}"
        kept = "kept" if self.kept else "removed"
        lines = [
            f"{self.documents} documents, {self.queries} judged queries, collection "
            f"{self.collection} ({kept}), {self.embedded} passages embedded in "
            f"{self.ingest_s:.1f}s",
            header,
        ]
        for mode, m in self.modes.items():
            latency = self.latency_ms[mode]
            lines.append(
                f"{mode:<{width}} {m['ndcg@10']:>8.3f} {m['leaderboard_ndcg@10']:>10.3f} "
                f"{m['recall@10']:>6.3f} {m['recall@100']:>6.3f} {m['mrr@10']:>7.3f} "
                f"{latency['p50']:>7.2f} {latency['p95']:>7.2f}"
            )
        lines.append("lb nDCG@10: the leaderboard formula (ideal ranking over the retrieved list)")
        if verdict := self.verdict_line():
            lines.append(verdict)
        for mode, count in self.degraded.items():
            lines.append(f"{mode}: {count} of {self.queries} queries came back with a warning")
        return "\n".join(lines)

    def verdict_line(self) -> str:
        beats = self.hybrid_beats_single()
        if beats is None:
            return ""
        parts = []
        for metric, label in VERDICT_METRICS.items():
            hybrid, vector, keyword = (self.modes[m][metric] for m in SEARCH_MODES)
            answer = "yes" if beats[metric] else "no"
            parts.append(
                f"{label} {answer} ({hybrid:.3f} vs vector {vector:.3f}, keyword {keyword:.3f})"
            )
        return "hybrid beat both single rankings: " + "; ".join(parts)


async def evaluate(
    service: KnowledgeService,
    folder: Path,
    modes: Sequence[SearchMode] = SEARCH_MODES,
    collection: str = "",
    progress: Progress | None = None,
    rerank: bool = False,
) -> EvalReport:
    """Ingest the corpus into a collection, run every judged query in every mode.

    Modes are measured without the reranker, so they stay the same baselines whatever
    the deployment reranks with; `rerank` adds a row, hybrid+<reranker>, with the
    service's reranker (when it has one).

    Without `collection` a temporary one is used and removed afterwards; a named
    collection is kept, so a later run re-uses its vectors instead of re-embedding.
    """
    data = load_beir(folder)
    async with ingested(service, data, collection, progress) as corpus:
        results: dict[str, Run] = {
            mode: await run_queries(service, data, corpus.name, mode) for mode in modes
        }
        if rerank and service.reranker_name != "none":
            row = f"hybrid+{service.reranker_name}"
            results[row] = await run_queries(service, data, corpus.name, "hybrid", rerank=True)
    return EvalReport(
        documents=corpus.documents,
        queries=len(data.judged),
        collection=corpus.name,
        kept=bool(collection),
        embedded=corpus.embedded,
        ingest_s=corpus.ingest_s,
        modes={mode: run.metrics for mode, run in results.items()},
        latency_ms={mode: percentiles(run.latencies) for mode, run in results.items()},
        degraded={mode: run.degraded for mode, run in results.items() if run.degraded},
    )


@dataclass
class Corpus:
    name: str
    """The collection it was ingested into."""
    documents: int = 0
    embedded: int = 0
    ingest_s: float = 0.0


@asynccontextmanager
async def ingested(
    service: KnowledgeService,
    data: BeirSet,
    collection: str = "",
    progress: Progress | None = None,
) -> AsyncIterator[Corpus]:
    """The corpus of `data` ingested into `collection`; without one, into a temporary
    collection removed afterwards (a named one is kept, so a later run re-uses its
    vectors instead of re-embedding)."""
    corpus = Corpus(collection or f"eval-{uuid.uuid4().hex[:12]}")
    documents = service.catalog.corpus(data.corpus, corpus.name)
    started = time.perf_counter()
    try:
        summary = await service.ingest(documents, progress=progress)
        corpus.documents, corpus.embedded = len(documents), summary.embedded
        corpus.ingest_s = time.perf_counter() - started
        yield corpus
    finally:
        if not collection:
            for doc in documents:
                await service.delete_document(doc.id)


@dataclass(frozen=True)
class Run:
    metrics: dict[str, float]
    latencies: list[float]
    """Milliseconds per query."""
    degraded: int
    """Queries that came back with a warning."""


async def run_queries(
    service: KnowledgeService,
    data: BeirSet,
    collection: str,
    mode: SearchMode,
    rerank: bool = False,
) -> Run:
    """Mean metrics and per-query latency of one row; each row starts with an empty
    query-embedding cache, so every latency includes embedding the query."""
    service.forget_query_embeddings()
    filters = SearchFilters(collection=collection)
    rows, latencies, degraded = [], [], 0
    for qid, text in data.judged:
        started = time.perf_counter()
        found = await service.retrieve(text, EVAL_DEPTH, filters, 0.0, mode, rerank=rerank)
        latencies.append((time.perf_counter() - started) * 1000)
        rows.append(eval_metrics(ranked_sources(found.hits), data.qrels[qid]))
        degraded += bool(found.warnings)
    return Run(mean_metrics(rows), latencies, degraded)


def ranked_sources(hits: Sequence[SearchHit]) -> list[str]:
    return distinct(hit.source_id for hit in hits)
