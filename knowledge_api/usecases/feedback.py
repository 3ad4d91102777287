"""Readers' ratings of answers (POST /v1/knowledge/feedback), and the judged set they
make (`knowledge-api eval --feedback`).

A rating refers to the query_id of a query or answer the service returned; it is
resolved in the store, where the query, its ranking and its results were recorded
when it was computed. A key rates a query once (a later rating replaces its earlier
one). The judged set: a rating up makes the cited sources (those the reader named, else
those the answer cited, else the first result) relevant; a rating down with an
expected source makes that source relevant; each key's rating of a query counts once,
and the query's relevant sources are those any of them names. Each judged query is then
searched again with today's ranking and scored (nDCG@10, recall, MRR), so a change of
ranking can be checked against what readers said.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.ir_metrics import distinct, eval_metrics, mean_metrics
from knowledge_api.ledger import Answered, Rating
from knowledge_api.models import SearchFilters
from knowledge_api.principals import fingerprint
from knowledge_api.service import KnowledgeService

CHAT_PREFIX = "chatcmpl-"
EVAL_DEPTH = 100


def query_id_of(value: str) -> str:
    """The query_id of an answer's `query_id`, or of an OpenAI completion id."""
    return value.removeprefix(CHAT_PREFIX)


async def rate(
    service: KnowledgeService,
    rating: Rating,
    may_reach: Any,
    principals: frozenset[str] | None = None,
) -> tuple[int, Answered]:
    """Store `rating` of an answer the caller may reach (`may_reach(collection)` raises
    when it may not) and could see (asked with the same principals; None: any); its
    id. 404 for a query_id the service never returned, or one the caller could not see."""
    answered = await service.find_answered(rating.query_id)
    if answered is None or not seen_by(answered, principals):
        raise NotFound(
            f"no query or answer with query_id {rating.query_id!r}: rate the query_id of a "
            "response this service returned",
            query_id=rating.query_id,
        )
    for name in answered.collection.split(","):  # an answer of several: each of them
        may_reach(name)
    if rating.cited and max(rating.cited) > len(answered.results):
        raise InvalidRequest(
            "cited", f"must be citation numbers of the answer, 1 to {len(answered.results)}"
        )
    return await service.records.rate(rating), answered


def seen_by(answered: Answered, principals: frozenset[str] | None) -> bool:
    """Whether a caller reading with `principals` could see the answer: it was asked
    with the same ones (an answer recorded before principals were kept: by anyone)."""
    asked = answered.ranking.get("principals")
    return principals is None or asked is None or asked == fingerprint(principals)


@dataclass(frozen=True)
class Judged:
    query_id: str
    query: str
    collection: str
    relevant: dict[str, int]
    """Source id (or document id) -> grade 1."""


def judged(answered: Answered, rating: Rating) -> Judged | None:
    """The judgement a rating makes of its query, or None when it says nothing usable
    (a rating down without an expected source)."""
    if rating.rating == "down":
        if not rating.expected_source:
            return None
        relevant = [rating.expected_source]
    else:
        cited = rating.cited or answered.cited or [1]
        results = answered.results
        relevant = [results[n - 1]["source_id"] for n in cited if 0 < n <= len(results)]
    if not relevant:
        return None
    return Judged(
        answered.query_id, answered.query, answered.collection, dict.fromkeys(relevant, 1)
    )


async def judged_set(service: KnowledgeService, since: str | None = None) -> list[Judged]:
    """The judgement of every query rated since `since`, newest rated first: one rating
    per key (its newest), the sources any of them makes relevant."""
    found: dict[str, Judged] = {}
    counted: set[tuple[str, str]] = set()
    answers: dict[str, Answered | None] = {}
    before: int | None = None
    while page := await service.records.ratings(500, before, since):
        for rating in page:
            if (rating.query_id, rating.key) in counted:
                continue
            counted.add((rating.query_id, rating.key))
            if rating.query_id not in answers:
                answers[rating.query_id] = await service.find_answered(rating.query_id)
            answered = answers[rating.query_id]
            if answered is None or (judgement := judged(answered, rating)) is None:
                continue
            if (earlier := found.get(rating.query_id)) is not None:
                judgement = Judged(
                    judgement.query_id,
                    judgement.query,
                    judgement.collection,
                    {**earlier.relevant, **judgement.relevant},
                )
            found[rating.query_id] = judgement
        before = page[-1].id
    return list(found.values())


@dataclass
class FeedbackReport:
    queries: int
    metrics: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "metrics": self.metrics, "per_query": self.rows}

    def table(self) -> str:
        if not self.queries:
            return "no rated answer to judge (rate answers with POST /v1/knowledge/feedback)"
        lines = [f"{self.queries} rated queries, searched again with today's ranking:"]
        lines += [f"  {name:<22} {value:.4f}" for name, value in self.metrics.items()]
        return "\n".join(lines)


async def evaluate(service: KnowledgeService, judgements: Sequence[Judged]) -> FeedbackReport:
    """Each judged query searched as today's ranking does, and scored."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    scores: list[dict[str, float]] = []
    for judgement in judgements:
        names = tuple(judgement.collection.split(","))  # as the answer recorded them
        filters = SearchFilters(collection=names[0], collections=names[1:] and names)
        found = await service.retrieve(judgement.query, EVAL_DEPTH, filters, 0.0)
        ranked = distinct(key for hit in found.hits for key in (hit.source_id, hit.document_id))
        metrics = eval_metrics(ranked, judgement.relevant)
        scores.append(metrics)
        rows.append({"query_id": judgement.query_id, "query": judgement.query, **metrics})
    return FeedbackReport(len(rows), mean_metrics(scores), rows, time.perf_counter() - started)
