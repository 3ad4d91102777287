"""Retrieval quality: the IR metrics, and the evaluation of a BEIR-layout directory.

The metrics live here once, for `knowledge-api eval` and POST /v1/knowledge/validate.
Relevance grades are integers (0 = not relevant). Gains are linear in the grade and
rank r is discounted by 1/log2(r + 1), as trec_eval computes nDCG.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest.loaders import LoadOptions, jsonl_records, load_jsonl
from knowledge_api.models import SearchFilters, SearchHit, document_id
from knowledge_api.stores.base import SEARCH_MODES, SearchMode

if TYPE_CHECKING:
    from knowledge_api.service import KnowledgeService

Grades = Mapping[str, int]
"""Judged document id -> relevance grade, for one query."""

EVAL_METRICS = ("ndcg@10", "leaderboard_ndcg@10", "recall@10", "recall@100", "mrr@10")
EVAL_DEPTH = 100


# -- metrics ---------------------------------------------------------------------------


def dcg(gains: Iterable[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranked: Sequence[str], grades: Grades, k: int) -> float:
    """Standard nDCG@k: the ideal ranking orders every judged document."""
    ideal = dcg(sorted(grades.values(), reverse=True)[:k])
    return dcg(grades.get(d, 0) for d in ranked[:k]) / ideal if ideal > 0 else 0.0


def leaderboard_ndcg_at_k(ranked: Sequence[str], grades: Grades, k: int) -> float:
    """nDCG@k with the ideal ranking taken over the retrieved top k only (the formula
    of the public embedding leaderboard): it rewards ordering what was found well,
    not finding it, so it reads higher than standard nDCG."""
    gains = [grades.get(d, 0) for d in ranked[:k]]
    ideal = dcg(sorted(gains, reverse=True))
    return dcg(gains) / ideal if ideal > 0 else 0.0


def recall_at_k(ranked: Sequence[str], grades: Grades, k: int) -> float:
    relevant = {d for d, grade in grades.items() if grade > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at_k(ranked: Sequence[str], grades: Grades, k: int) -> float:
    """Reciprocal rank of the first relevant document in the top k (0 when none)."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if grades.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def distinct(ids: Iterable[str]) -> list[str]:
    """Ids in first-seen order without repeats: several chunks of a document are one hit."""
    return list(dict.fromkeys(ids))


def mean_metrics(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric averaged over the rows (every row has the same keys)."""
    if not rows:
        return {}
    return {name: round(sum(row[name] for row in rows) / len(rows), 4) for name in rows[0]}


def eval_metrics(ranked: Sequence[str], grades: Grades) -> dict[str, float]:
    """The metrics `knowledge-api eval` reports for one query."""
    return {
        "ndcg@10": ndcg_at_k(ranked, grades, 10),
        "leaderboard_ndcg@10": leaderboard_ndcg_at_k(ranked, grades, 10),
        "recall@10": recall_at_k(ranked, grades, 10),
        "recall@100": recall_at_k(ranked, grades, 100),
        "mrr@10": mrr_at_k(ranked, grades, 10),
    }


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    if not samples_ms:
        return {"p50": 0.0, "p95": 0.0}
    p50, p95 = np.percentile(np.asarray(samples_ms), [50, 95])
    return {"p50": round(float(p50), 2), "p95": round(float(p95), 2)}


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
                await service.store.delete(document_id(name, doc.source_type, doc.source_id))
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
    service.caches.embeddings.clear()
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
