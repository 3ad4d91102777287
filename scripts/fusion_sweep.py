"""Hybrid-ranking variants compared offline on a BEIR set already ingested by `eval`.

    KNOWLEDGE_DB_PATH=/tmp/msm.db .venv/bin/knowledge-api eval DIR --collection msm
    .venv/bin/python scripts/fusion_sweep.py DIR --db /tmp/msm.db --collection msm

Reads the collection's stored vectors and its FTS5 index straight from the SQLite
file, embeds the queries with the local model, and ranks in numpy, so one variant
costs well under a second: the place to try a fusion idea before it goes into
`stores/base.py`. Prints standard and leaderboard nDCG@10 and recall@100 per
variant, then the spread of the feedback grid, since 43 judged queries make
differences under about 0.005 noise.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from knowledge_api.embeddings.local import LocalEmbedder
from knowledge_api.ir_metrics import distinct, eval_metrics, mean_metrics
from knowledge_api.stores.fusion import DEFAULT_TUNING, feedback_vector, reciprocal_rank_fusion
from knowledge_api.stores.keyword import fts_query
from knowledge_api.usecases.evaluation import load_beir

DEPTH = 100
FEEDBACK_DOCS = DEFAULT_TUNING.feedback_docs
FEEDBACK_WEIGHT = DEFAULT_TUNING.feedback_weight
FEEDBACK_RANK_WEIGHT = DEFAULT_TUNING.feedback_rank_weight
Ranker = Callable[[str], list[int]]
"""Query id -> chunk positions, best first."""


class Sweep:
    def __init__(self, folder: Path, db: Path, collection: str) -> None:
        self.data = load_beir(folder)
        self.db = sqlite3.connect(db)
        rows = self.db.execute(
            """SELECT c.rowid, d.source_id, c.embedding FROM chunks c
               JOIN documents d ON d.id = c.document_id
               WHERE c.collection = ? ORDER BY c.rowid""",
            (collection,),
        ).fetchall()
        if not rows:
            raise SystemExit(f"no chunks in collection {collection!r}: run eval --collection first")
        self.position = {rowid: i for i, (rowid, _, _) in enumerate(rows)}
        self.source = [source for _, source, _ in rows]
        self.vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in rows])
        embedder = LocalEmbedder()
        embedder.load()
        self.queries = dict(self.data.judged)
        self.query_vectors = {qid: embedder.embed_query(text) for qid, text in self.data.judged}
        self.keyword_cache = {qid: self._keyword(text) for qid, text in self.data.judged}

    def _keyword(self, text: str) -> list[int]:
        rows = self.db.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts)",
            (fts_query(text),),
        ).fetchall()
        return [self.position[r] for (r,) in rows if r in self.position][:DEPTH]

    def evaluate(self, ranker: Ranker) -> dict[str, float]:
        rows = []
        for qid, _ in self.data.judged:
            ranked = distinct(self.source[i] for i in ranker(qid)[:DEPTH])
            rows.append(eval_metrics(ranked, self.data.qrels[qid]))
        return mean_metrics(rows)

    # -- the primitives every variant is built from ----------------------------------

    def vector(self, qid: str, query: np.ndarray | None = None) -> list[int]:
        scores = self.vectors @ (self.query_vectors[qid] if query is None else query)
        return [int(i) for i in np.argsort(-scores)[:DEPTH]]

    def keyword(self, qid: str) -> list[int]:
        return self.keyword_cache[qid]

    def rrf(self, qid: str) -> list[int]:
        return fuse([self.vector(qid), self.keyword(qid)])

    def moved(self, qid: str, seeds: Sequence[int], weight: float = FEEDBACK_WEIGHT) -> np.ndarray:
        stored = [self.vectors[i] for i in seeds]
        return feedback_vector(self.query_vectors[qid], stored, weight)

    def feedback(self, docs: int = FEEDBACK_DOCS, weight: float = FEEDBACK_WEIGHT) -> Ranker:
        """What HybridSearch does: RRF, then RRF again with the moved query's ranking."""

        def rank(qid: str) -> list[int]:
            fused = self.rrf(qid)
            by_feedback = self.vector(qid, self.moved(qid, fused[:docs], weight))
            return fuse([by_feedback, fused], [FEEDBACK_RANK_WEIGHT, 1.0])

        return rank

    def feedback_only(self, rounds: int) -> Ranker:
        """The moved query's own ranking, the seeds re-taken from it `rounds` times."""

        def rank(qid: str) -> list[int]:
            ranked = self.rrf(qid)
            for _ in range(rounds):
                ranked = self.vector(qid, self.moved(qid, ranked[:FEEDBACK_DOCS]))
            return ranked

        return rank

    def oracle_seeds(self, pool: int) -> Ranker:
        """Upper bound, not a method: seeds are the best-judged of the top `pool`."""

        def rank(qid: str) -> list[int]:
            grades = self.data.qrels[qid]
            best = sorted(self.rrf(qid)[:pool], key=lambda i: -grades.get(self.source[i], 0))
            return self.vector(qid, self.moved(qid, best[:FEEDBACK_DOCS]))

        return rank


def fuse(rankings: Sequence[Sequence[int]], weights: Sequence[float] | None = None) -> list[int]:
    return [key for key, _ in reciprocal_rank_fusion(rankings, weights=weights)]


def line(name: str, m: dict[str, float]) -> str:
    return (
        f"{name:<44} {m['ndcg@10']:>8.4f} {m['leaderboard_ndcg@10']:>8.4f} {m['recall@100']:>7.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--collection", required=True)
    args = parser.parse_args()
    sweep = Sweep(args.folder, args.db, args.collection)
    variants: dict[str, Ranker] = {
        "vector": sweep.vector,
        "keyword (FTS5 bm25)": sweep.keyword,
        "rrf k=60": sweep.rrf,
        "rrf + feedback (the service)": sweep.feedback(),
        "feedback ranking alone": sweep.feedback_only(1),
        "feedback ranking alone, seeds re-taken once": sweep.feedback_only(2),
        "oracle seeds from the top 5 (upper bound)": sweep.oracle_seeds(5),
        "oracle seeds from the top 10 (upper bound)": sweep.oracle_seeds(10),
    }
    print(f"{'variant':<44} {'nDCG@10':>8} {'lb':>8} {'R@100':>7}")
    for name, ranker in variants.items():
        print(line(name, sweep.evaluate(ranker)))
    grid = {
        (docs, weight): sweep.evaluate(sweep.feedback(docs, weight))["leaderboard_ndcg@10"]
        for docs in (2, 3, 4, 5, 8)
        for weight in (1.0, 2.0, 3.0, 5.0)
    }
    best = max(grid, key=lambda key: grid[key])
    print(
        f"feedback grid (docs 2-8 x weight 1-5): leaderboard nDCG@10 "
        f"{min(grid.values()):.4f} to {grid[best]:.4f} (best: {best[0]} docs, weight {best[1]})"
    )


if __name__ == "__main__":
    main()
