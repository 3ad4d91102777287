"""Evaluation of a BEIR-layout directory (`knowledge-api eval`): ingest its corpus, run
every judged query in every search mode, report the IR metrics and latency."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest.loaders import LoadOptions, jsonl_records, load_jsonl
from knowledge_api.ir_metrics import distinct, eval_metrics, mean_metrics, percentiles
from knowledge_api.models import SEARCH_MODES, SearchFilters, SearchHit, SearchMode, document_id
from knowledge_api.service import KnowledgeService

EVAL_METRICS = ("ndcg@10", "leaderboard_ndcg@10", "recall@10", "recall@100", "mrr@10")
EVAL_DEPTH = 100


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
    latency_ms: dict[str, dict[str, float]]

    def as_json(self) -> dict[str, Any]:
        return {
            "modes": self.modes,
            "latency_ms": self.latency_ms,
            "queries": self.queries,
            "documents": self.documents,
            "collection": self.collection,
            "embedded": self.embedded,
            "ingest_s": round(self.ingest_s, 1),
        }

    def table(self) -> str:
        header = f"{'mode':<8} {'nDCG@10':>8} {'lb nDCG@10':>10} {'R@10':>6} {'R@100':>6} "
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
                f"{mode:<8} {m['ndcg@10']:>8.3f} {m['leaderboard_ndcg@10']:>10.3f} "
                f"{m['recall@10']:>6.3f} {m['recall@100']:>6.3f} {m['mrr@10']:>7.3f} "
                f"{latency['p50']:>7.2f} {latency['p95']:>7.2f}"
            )
        lines.append("lb nDCG@10: the leaderboard formula (ideal ranking over the retrieved list)")
        return "\n".join(lines)


async def evaluate(
    service: KnowledgeService,
    folder: Path,
    modes: Sequence[SearchMode] = SEARCH_MODES,
    collection: str = "",
    progress: Callable[[int], object] | None = None,
) -> EvalReport:
    """Ingest the corpus into a collection, run every judged query in every mode.

    Without `collection` a temporary one is used and removed afterwards; a named
    collection is kept, so a later run re-uses its vectors instead of re-embedding.
    """
    data = load_beir(folder)
    name = collection or f"eval-{uuid.uuid4().hex[:12]}"
    documents = list(load_jsonl(data.corpus, LoadOptions(collection=name)))
    started = time.perf_counter()
    try:
        summary = await service.ingest(documents, progress=progress)
        ingest_s = time.perf_counter() - started
        results = {mode: await run_queries(service, data, name, mode) for mode in modes}
    finally:
        if not collection:
            for doc in documents:
                await service.delete_document(document_id(name, doc.source_type, doc.source_id))
    return EvalReport(
        documents=len(documents),
        queries=len(data.judged),
        collection=name,
        kept=bool(collection),
        embedded=summary.embedded,
        ingest_s=ingest_s,
        modes={mode: metrics for mode, (metrics, _) in results.items()},
        latency_ms={mode: percentiles(samples) for mode, (_, samples) in results.items()},
    )


async def run_queries(
    service: KnowledgeService, data: BeirSet, collection: str, mode: SearchMode
) -> tuple[dict[str, float], list[float]]:
    """Mean metrics and per-query latency (ms) of one mode; each mode starts with an
    empty query-embedding cache, so every latency includes embedding the query."""
    service.forget_query_embeddings()
    filters = SearchFilters(collection=collection)
    rows, latencies = [], []
    for qid, text in data.judged:
        started = time.perf_counter()
        found = await service.retrieve(text, EVAL_DEPTH, filters, 0.0, mode)
        latencies.append((time.perf_counter() - started) * 1000)
        rows.append(eval_metrics(ranked_sources(found.hits), data.qrels[qid]))
    return mean_metrics(rows), latencies


def ranked_sources(hits: Sequence[SearchHit]) -> list[str]:
    return distinct(hit.source_id for hit in hits)
