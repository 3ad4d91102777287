"""Hybrid-ranking variants compared offline on a BEIR set already ingested by `eval`.

    KNOWLEDGE_DB_PATH=/tmp/msm.db .venv/bin/knowledge-api eval DIR --collection msm
    .venv/bin/python scripts/fusion_sweep.py DIR --db /tmp/msm.db --collection msm

Reads the collection's stored vectors and its FTS5 index straight from the SQLite
file, embeds the queries with the local model, and ranks in numpy, so one variant
costs well under a second: the place to try a fusion idea before it goes into
`stores/hybrid.py`.

Every variant is scored on the set as it is and on perturbed copies in which one
retriever is weak on purpose (keyword queries with words dropped and distractors
added; query vectors with noise), because a fusion must never rank below the better
of its two lists, whatever the corpus. Every variant is also cross-validated: k folds
of the judged queries, repeated with several seeds; a tunable family is set on k-1
folds by its worst margin over the sets and scored on the held-out fold.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowledge_api import text
from knowledge_api.embeddings.local import LocalEmbedder
from knowledge_api.ir_metrics import distinct, leaderboard_ndcg_at_k, ndcg_at_k
from knowledge_api.stores.fusion import (
    DEFAULT_TUNING,
    Candidate,
    convex_fusion,
    feedback_vector,
    reciprocal_rank_fusion,
)
from knowledge_api.stores.keyword import fts_query
from knowledge_api.usecases.evaluation import load_beir

DEPTH = 100
"""Candidates per list and ranks kept, as `eval` asks for the top 100."""
TUNING = DEFAULT_TUNING


@dataclass(frozen=True)
class Seen:
    """One query as the two retrievers see it in one test set."""

    vector: np.ndarray
    keyword: str


@dataclass
class Lists:
    """What fusion gets for one query: both candidate lists, the query vector, and
    a vector search for feedback."""

    query: np.ndarray
    by_vector: list[Candidate]
    by_keyword: list[Candidate]
    cosines: np.ndarray
    vectors: np.ndarray

    def search(self, query: np.ndarray) -> list[int]:
        return top(self.vectors @ query)

    def cosine(self, key: Hashable) -> float:
        return max(float(self.cosines[key]), 0.0)  # type: ignore[call-overload]

    def similarity(self) -> dict[Hashable, float]:
        """The clipped cosine of every candidate, as HybridSearch has it."""
        keys = [c.key for c in self.by_vector] + [c.key for c in self.by_keyword]
        return {key: self.cosine(key) for key in keys}


Ranker = Callable[[Lists], list[int]]
"""Both lists of one query -> chunk positions, best first."""
Seeds = Callable[[Lists, list[int]], list[int]]
"""Both lists and the first fused ranking -> the hits feedback moves the query toward."""


def top(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores)[:DEPTH]]


class Sweep:
    def __init__(self, folder: Path, db: Path, collection: str) -> None:
        self.data = load_beir(folder)
        self.db = sqlite3.connect(db)
        rows = self.db.execute(
            """SELECT c.rowid, d.source_id, c.embedding, c.content FROM chunks c
               JOIN documents d ON d.id = c.document_id
               WHERE c.collection = ? ORDER BY c.rowid""",
            (collection,),
        ).fetchall()
        if not rows:
            raise SystemExit(f"no chunks in collection {collection!r}: run eval --collection first")
        self.position = {rowid: i for i, (rowid, *_) in enumerate(rows)}
        self.source = [source for _, source, _, _ in rows]
        self.vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for _, _, blob, _ in rows])
        self.vocabulary = sorted({w for *_, body in rows for w in text.content_terms(body)})
        embedder = LocalEmbedder()
        embedder.load()
        self.qids = [qid for qid, _ in self.data.judged]
        self.texts = dict(self.data.judged)
        self.query_vectors = {qid: embedder.embed_query(t) for qid, t in self.data.judged}
        self.cache: dict[tuple[str, str], Lists] = {}

    # -- test sets: the queries as they are, and with one retriever made weak -------

    def sets(self, seed: int = 7) -> dict[str, dict[str, Seen]]:
        return {
            "clean": {q: Seen(self.query_vectors[q], self.texts[q]) for q in self.qids},
            "weak keyword": self.keyword_noise(seed, keep=0.7, distractors=1),
            "weaker keyword": self.keyword_noise(seed, keep=0.4, distractors=3),
            "weak vector": self.vector_noise(seed, 3.5),
            "weaker vector": self.vector_noise(seed, 5.0),
        }

    def keyword_noise(self, seed: int, keep: float, distractors: int) -> dict[str, Seen]:
        """Keyword queries keep each content word with probability `keep` (one at least)
        and gain random words of the corpus; the query vector is untouched."""
        rng = random.Random(seed)
        seen = {}
        for qid in self.qids:
            terms = text.content_terms(self.texts[qid])
            kept = [t for t in terms if rng.random() < keep] or [rng.choice(terms)]
            noise = rng.sample(self.vocabulary, distractors)
            seen[qid] = Seen(self.query_vectors[qid], " ".join(kept + noise))
        return seen

    def vector_noise(self, seed: int, scale: float) -> dict[str, Seen]:
        """Query vectors plus isotropic noise of norm `scale`, back to unit length;
        the keyword query is untouched."""
        rng = np.random.default_rng(seed)
        seen = {}
        for qid in self.qids:
            vector = self.query_vectors[qid]
            noise = np.asarray(rng.standard_normal(vector.shape[0]), dtype=np.float32)
            moved = vector + scale * noise / np.linalg.norm(noise)
            seen[qid] = Seen(moved / np.linalg.norm(moved), self.texts[qid])
        return seen

    # -- the two retrievers ----------------------------------------------------------

    def lists(self, name: str, qid: str, seen: Seen) -> Lists:
        if (name, qid) not in self.cache:
            cosines = self.vectors @ seen.vector
            by_vector = [Candidate(i, max(float(cosines[i]), 0.0)) for i in top(cosines)]
            by_keyword = self.keyword_hits(seen.keyword)
            self.cache[name, qid] = Lists(seen.vector, by_vector, by_keyword, cosines, self.vectors)
        return self.cache[name, qid]

    def keyword_hits(self, query: str) -> list[Candidate]:
        match = fts_query(query)
        if not match:
            return []
        rows = self.db.execute(
            "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY bm25(chunks_fts) LIMIT ?",
            (match, 3 * DEPTH),
        ).fetchall()
        hits = [Candidate(self.position[r], -float(s)) for r, s in rows if r in self.position]
        return hits[:DEPTH]

    # -- scoring ---------------------------------------------------------------------

    def per_query(self, ranker: Ranker, name: str, seen: dict[str, Seen]) -> np.ndarray:
        """Standard and leaderboard nDCG@10 of every judged query, shape (queries, 2)."""
        rows = []
        for qid in self.qids:
            ranked = distinct(self.source[i] for i in ranker(self.lists(name, qid, seen[qid])))
            grades = self.data.qrels[qid]
            rows.append((ndcg_at_k(ranked, grades, 10), leaderboard_ndcg_at_k(ranked, grades, 10)))
        return np.array(rows)


# -- the variants ------------------------------------------------------------------------


def keys(hits: Iterable[Candidate]) -> list[int]:
    return [int(h.key) for h in hits]  # type: ignore[call-overload]


def vector(lists: Lists) -> list[int]:
    return keys(lists.by_vector)


def keyword(lists: Lists) -> list[int]:
    return keys(lists.by_keyword)


def fuse(rankings: Sequence[Sequence[int]], weights: Sequence[float] | None = None) -> list[int]:
    return [key for key, _ in reciprocal_rank_fusion(rankings, TUNING.fusion_k, weights)]


def rrf(lists: Lists) -> list[int]:
    return fuse([vector(lists), keyword(lists)])


def weighted_rrf(keyword_weight: float) -> Ranker:
    return lambda lists: fuse([vector(lists), keyword(lists)], [1.0, keyword_weight])


def convex(vector_weight: float) -> Ranker:
    """Convex fusion as HybridSearch does it (stores/fusion.py)."""

    def rank(lists: Lists) -> list[int]:
        if not (lists.by_vector and lists.by_keyword):
            return rrf(lists)
        fused = convex_fusion(lists.by_vector, lists.by_keyword, lists.similarity(), vector_weight)
        return [int(key) for key, _ in fused]  # type: ignore[call-overload]

    return rank


def convex_feedback(vector_weight: float) -> Ranker:
    """Convex fusion, then convex fusion again with the query vector moved toward the
    first fusion's best hits in place of the query (the keyword list stays)."""

    def rank(lists: Lists) -> list[int]:
        first = convex(vector_weight)(lists)
        stored = [lists.vectors[i] for i in first[: TUNING.feedback_docs]]
        moved = feedback_vector(lists.query, stored, TUNING.feedback_weight)
        cosines = lists.vectors @ moved
        by_moved = [Candidate(i, max(float(cosines[i]), 0.0)) for i in top(cosines)]
        again = Lists(moved, by_moved, lists.by_keyword, cosines, lists.vectors)
        return convex(vector_weight)(again)

    return rank


def support(lists: Lists, hits: Sequence[Candidate], depth: int) -> float:
    """Mean cosine with the query of the first `depth` hits."""
    return float(np.mean([lists.cosine(h.key) for h in hits[:depth]])) if hits else 0.0


def keyword_trust(lists: Lists, depth: int = 10) -> float:
    """How far the vector side endorses the keyword list's best hits: their mean
    cosine over that of the vector list's own best hits (0-1)."""
    best = support(lists, lists.by_vector, depth)
    return min(support(lists, lists.by_keyword, depth) / best, 1.0) if best > 0 else 1.0


def vector_trust(lists: Lists, depth: int = 10) -> float:
    """How far the keyword side endorses the vector list's best hits: their mean BM25
    (over the best BM25; 0 outside the keyword list) over that of the keyword list's."""
    best = max((h.score for h in lists.by_keyword), default=0.0)
    if best <= 0:
        return 1.0
    relative = {h.key: h.score / best for h in lists.by_keyword}
    own = float(np.mean([relative[h.key] for h in lists.by_keyword[:depth]]))
    endorsed = float(np.mean([relative.get(h.key, 0.0) for h in lists.by_vector[:depth]]))
    return min(endorsed / own, 1.0)


def mutual_rrf(power: float) -> Ranker:
    """RRF, each list weighted by the other side's endorsement ** power, the larger 1."""

    def rank(lists: Lists) -> list[int]:
        v, k = vector_trust(lists) ** power, keyword_trust(lists) ** power
        top_ = max(v, k, 1e-9)
        return fuse([vector(lists), keyword(lists)], [v / top_, k / top_])

    return rank


def trusted_rrf(power: float) -> Ranker:
    """RRF with the keyword list weighted by keyword_trust ** power."""

    def rank(lists: Lists) -> list[int]:
        return fuse([vector(lists), keyword(lists)], [1.0, keyword_trust(lists) ** power])

    return rank


def feedback(first: Ranker, seeds: Seeds | None = None) -> Ranker:
    """The first ranking fused again with the ranking of the query moved toward its
    seeds (by default its own best hits), as HybridSearch.with_feedback does."""

    def rank(lists: Lists) -> list[int]:
        fused = first(lists)
        chosen = seeds(lists, fused) if seeds else fused[: TUNING.feedback_docs]
        if not chosen:
            return fused
        stored = [lists.vectors[i] for i in chosen]
        moved = feedback_vector(lists.query, stored, TUNING.feedback_weight)
        return fuse([lists.search(moved), fused], [TUNING.feedback_rank_weight, 1.0])

    return rank


def agreed_seeds(depth: int = 10) -> Seeds:
    """The best fused hits that both lists hold in their first `depth`; the best fused
    hits when they share none."""

    def seeds(lists: Lists, fused: list[int]) -> list[int]:
        both = set(vector(lists)[:depth]) & set(keyword(lists)[:depth])
        agreed = [key for key in fused if key in both][: TUNING.feedback_docs]
        return agreed or fused[: TUNING.feedback_docs]

    return seeds


def vector_seeds(lists: Lists, fused: list[int]) -> list[int]:
    return vector(lists)[: TUNING.feedback_docs]


# -- cross-validation and the report ------------------------------------------------


Scores = dict[str, np.ndarray]
"""Set name -> per-query (standard, leaderboard) nDCG@10."""


@dataclass
class Variant:
    name: str
    grid: dict[float, Ranker]
    """One ranker, or a family keyed by its parameter (chosen by cross-validation)."""


def folds(qids: int, k: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(qids)
    return [np.sort(part) for part in np.array_split(order, k)]


def worst_margin(scores: Scores, singles: dict[str, Scores], rows: np.ndarray) -> float:
    """Over the sets: mean standard nDCG@10 on `rows` minus that of the better list."""
    margins = []
    for name, per_query in scores.items():
        better = max(singles[s][name][rows, 0].mean() for s in singles)
        margins.append(per_query[rows, 0].mean() - better)
    return float(min(margins))


@dataclass
class Held:
    """What cross-validation found on the held-out folds."""

    scores: dict[str, list[tuple[float, float]]]
    """Set name -> standard and leaderboard nDCG@10 of each held-out fold."""
    margins: list[float]
    """Per held-out fold: the worst margin over the sets against the better list."""
    chosen: list[float]
    """The parameter set on the other folds, per fold."""


def cross_validate(
    grid: dict[float, Scores], singles: dict[str, Scores], k: int, seeds: Sequence[int]
) -> Held:
    n = len(next(iter(next(iter(grid.values())).values())))
    held = Held({name: [] for name in next(iter(grid.values()))}, [], [])
    for seed in seeds:
        for fold in folds(n, k, seed):
            train = np.setdiff1d(np.arange(n), fold)
            best = max(grid, key=lambda p: worst_margin(grid[p], singles, train))
            held.chosen.append(best)
            held.margins.append(worst_margin(grid[best], singles, fold))
            for name, per_query in grid[best].items():
                mean = per_query[fold].mean(axis=0)
                held.scores[name].append((float(mean[0]), float(mean[1])))
    return held


def spread(folds: np.ndarray) -> str:
    return f"{folds.mean():.3f}±{folds.std():.3f}, {folds.min():.3f}"


def verdict(fused: np.ndarray, singles: Sequence[np.ndarray]) -> str:
    """Whether the fused mean reaches the better single list's, in standard and in
    leaderboard nDCG@10."""
    reached = [fused[:, m].mean() >= max(s[:, m].mean() for s in singles) - 1e-9 for m in (0, 1)]
    return {(True, True): "yes", (True, False): "std", (False, True): "lb"}.get(
        (reached[0], reached[1]), "NO"
    )


def report(
    sweep: Sweep, variants: list[Variant], k: int, seeds: Sequence[int], noise_seed: int
) -> None:
    sets = sweep.sets(noise_seed)
    scored = {
        v.name: {p: {s: sweep.per_query(r, s, sets[s]) for s in sets} for p, r in v.grid.items()}
        for v in variants
    }
    singles = {name: scored[name][0.0] for name in ("vector", "keyword")}
    print(f"{k}-fold cross-validation x {len(seeds)} seeds; standard nDCG@10 (leaderboard)")
    print(">=best: the full-set mean reaches the better single list's in both metrics (yes),")
    print("in standard (std) or leaderboard (lb) nDCG@10 only, or in neither (NO)")
    print(
        f"{'variant':<36} {'set':<15} {'full: std (lb)':>14} "
        f"{'CV std mean±sd, worst':>22} {'CV lb mean±sd, worst':>22} {'>=best':>6}"
    )
    for v in variants:
        held = cross_validate(scored[v.name], singles, k, seeds)
        common = max(set(held.chosen), key=held.chosen.count)
        for name in sets:
            full = scored[v.name][common][name]
            ok = verdict(full, [singles[s][name] for s in singles])
            cv = np.array(held.scores[name])
            print(
                f"{v.name:<36} {name:<15} {full[:, 0].mean():.3f} ({full[:, 1].mean():.3f}) "
                f"{spread(cv[:, 0]):>22} {spread(cv[:, 1]):>22} {ok:>6}"
            )
        margins = np.array(held.margins)
        counts = {p: held.chosen.count(p) for p in sorted(set(held.chosen))}
        print(
            f"{'':<34} worst margin over the sets vs the better list, per held-out fold: "
            f"mean {margins.mean():+.3f}, worst {margins.min():+.3f}; full set "
            f"{worst_margin(scored[v.name][common], singles, np.arange(len(sweep.qids))):+.3f}"
            + (f"; chosen {counts}" if len(v.grid) > 1 else "")
        )
        if len(v.grid) > 1:
            every = ", ".join(
                f"{p}: {worst_margin(scores, singles, np.arange(len(sweep.qids))):+.3f}"
                for p, scores in scored[v.name].items()
            )
            print(f"{'':<34} full-set worst margin by parameter: {every}")


def variants() -> list[Variant]:
    powers = (0.0, 1.0, 2.0, 4.0, 8.0)
    weights = (0.5, 0.6, 0.7, 0.8, 0.9)
    return [
        Variant("vector", {0.0: vector}),
        Variant("keyword", {0.0: keyword}),
        Variant("rrf", {0.0: rrf}),
        Variant("rrf + feedback (old default)", {0.0: feedback(rrf)}),
        Variant("rrf + agreed-seed feedback", {0.0: feedback(rrf, agreed_seeds())}),
        Variant("rrf + vector-seed feedback", {0.0: feedback(rrf, vector_seeds)}),
        Variant("weighted rrf (keyword weight)", {w: weighted_rrf(w) for w in (0.25, 0.5, 0.75)}),
        Variant("trusted rrf + feedback (power)", {p: feedback(trusted_rrf(p)) for p in powers}),
        Variant("mutual rrf + feedback (power)", {p: feedback(mutual_rrf(p)) for p in powers}),
        Variant("convex (vector weight)", {a: convex(a) for a in weights}),
        Variant("convex + convex feedback", {a: convex_feedback(a) for a in weights}),
        Variant(
            "convex + agreed-seed feedback",
            {a: feedback(convex(a), agreed_seeds()) for a in weights},
        ),
        Variant("convex + feedback (vector weight)", {a: feedback(convex(a)) for a in weights}),
        Variant(
            f"convex {TUNING.vector_weight} + feedback (new default)",
            {0.0: feedback(convex(TUNING.vector_weight))},
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3, help="repetitions of the k folds")
    parser.add_argument("--noise-seed", type=int, default=7, help="seed of the perturbed sets")
    args = parser.parse_args()
    sweep = Sweep(args.folder, args.db, args.collection)
    report(sweep, variants(), args.folds, range(args.seeds), args.noise_seed)


if __name__ == "__main__":
    main()
