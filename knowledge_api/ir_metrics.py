"""IR metrics: nDCG, recall and MRR over a ranked list of document ids.

Used by `knowledge-api eval` and POST /v1/knowledge/validate. Relevance grades are
integers (0 = not relevant). Gains are linear in the grade and rank r is discounted by
1/log2(r + 1), as trec_eval computes nDCG.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

Grades = Mapping[str, int]
"""Judged document id -> relevance grade, for one query."""


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
