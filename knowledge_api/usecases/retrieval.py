"""Retrieve and validate (the RAG contract): chunks of one collection with their
source metadata and the query's embedding, and validation runs of test queries.

Validation scores each test query on relevance (its best similarity), metadata (every
chunk complete and really from the collection), consistency across repeated runs and,
when expected sources are given, accuracy with nDCG@10, recall@k and MRR.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge_api import ir_metrics
from knowledge_api.errors import InvalidRequest
from knowledge_api.facets import Facets
from knowledge_api.filters import Node
from knowledge_api.models import SETTINGS_RANKING, OneOrSeveral, Ranking, SearchFilters, SearchHit
from knowledge_api.principals import scoped
from knowledge_api.ranking import next_offset
from knowledge_api.service import KnowledgeService, Retrieval
from knowledge_api.timing import elapsed_ms


@dataclass(frozen=True, slots=True)
class RetrieveParams(OneOrSeveral):
    query: str
    collection: str
    top_k: int = 5
    query_embedding_model: str = ""
    filters: Node | None = None
    offset: int = 0
    ranking: Ranking = SETTINGS_RANKING
    facets: tuple[str, ...] = ()
    collections: tuple[str, ...] = ()
    """Several collections searched as one (instead of `collection`)."""
    principals: frozenset[str] | None = None
    """What the caller may read (knowledge_api.principals); None: everything."""


@dataclass(frozen=True, slots=True)
class Retrieved:
    hits: list[SearchHit]
    vector: np.ndarray | None
    model: str
    response_ms: float
    warnings: list[str]
    next_offset: int | None = None
    """Where the next page starts (None: no page follows that may be asked for)."""
    ranking: dict[str, Any] = field(default_factory=dict)
    """The ranking that ran (KnowledgeService.ranking_ran)."""
    facets: Facets | None = None
    """The counts of the fields the request named, over every match."""


@dataclass(frozen=True, slots=True)
class ValidateParams:
    collection: str
    test_queries: tuple[str, ...]
    expected_sources: Mapping[str, frozenset[str]] = field(default_factory=dict)
    consistency_runs: int = 3
    top_k: int = 5
    principals: frozenset[str] | None = None
    """What the caller may read (knowledge_api.principals); None: everything."""


@dataclass(frozen=True, slots=True)
class QueryValidation:
    query: str
    hits: list[SearchHit]
    relevance_valid: bool
    metadata_correct: bool
    consistency_score: float
    relevance_score: float
    consistency_variance: float
    retrieval_metrics: dict[str, float] | None
    """nDCG@10, recall@k and MRR, when expected sources were given."""
    top_k: int

    @property
    def accuracy(self) -> float | None:
        metrics = self.retrieval_metrics
        return None if metrics is None else metrics[f"recall@{self.top_k}"]

    @property
    def score(self) -> float:
        """The mean of what was checked, each as reported (rounded to 4 places)."""
        parts = [self.relevance_valid, self.metadata_correct, round(self.consistency_score, 4)]
        if self.accuracy is not None:
            parts.append(round(self.accuracy, 4))
        return statistics.fmean(float(part) for part in parts)


@dataclass(frozen=True, slots=True)
class Validation:
    results: list[QueryValidation]
    passed: bool
    summary: str
    score: float


# -- retrieve --------------------------------------------------------------------------


async def retrieve(service: KnowledgeService, params: RetrieveParams) -> Retrieved:
    started = time.perf_counter()
    model = check_model(service, params.query_embedding_model)
    if params.collections:  # several: each checked before the search
        await service.require_collections(params.collections, params.principals)
    where = scoped(
        SearchFilters(
            where=params.filters, collection=params.collection, collections=params.collections
        ),
        params.principals,
    )
    found, counted = await asyncio.gather(
        service.retrieve(
            params.query, params.top_k, where, ranking=params.ranking, offset=params.offset
        ),
        service.facets(where, params.facets),
    )
    if not found.hits:
        await service.require_collections(params.searched, params.principals)
    return Retrieved(
        found.hits,
        found.vector,
        model,
        elapsed_ms(started),
        found.warnings,
        next_offset(params.offset, params.top_k, found.more),
        found.ranking,
        counted,
    )


def check_model(service: KnowledgeService, requested: str) -> str:
    """The embedder's name; a request for another model is refused, since its vectors
    would not live in the space the collection was embedded in."""
    name = service.embedder_name
    accepted = {name.casefold(), name.rpartition(":")[2].casefold()}
    if requested and requested.casefold() not in accepted:
        raise InvalidRequest(
            "query_embedding_model",
            f"must be the model the collections are embedded with ({name})",
            configured=name,
        )
    return name


async def search(
    service: KnowledgeService,
    query: str,
    collection: str,
    top_k: int,
    where: Node | None = None,
    principals: frozenset[str] | None = None,
) -> Retrieval:
    """The hits of `query` in `collection` that `principals` may read (None: any)."""
    filters = scoped(SearchFilters(where=where, collection=collection), principals)
    found = await service.retrieve(query, top_k, filters)
    if not found.hits:
        await service.require_collection(collection, principals)
    return found


def source_url(hit: SearchHit) -> str:
    url = hit.metadata.get("url")
    return url if isinstance(url, str) and url else hit.source_id


# -- validate --------------------------------------------------------------------------


async def validate(service: KnowledgeService, params: ValidateParams) -> Validation:
    await service.require_collection(params.collection, params.principals)
    settings = service.settings
    results = []
    for query in params.test_queries:
        runs = [
            (
                await search(
                    service, query, params.collection, params.top_k, None, params.principals
                )
            ).hits
            for _ in range(params.consistency_runs)
        ]
        results.append(
            validate_query(
                query,
                runs,
                await stored_in(service, runs[0], params.collection, params.principals),
                params.expected_sources.get(query),
                params.top_k,
                settings.validate_min_similarity,
            )
        )
    return overall(results, settings.validate_pass_score)


async def stored_in(
    service: KnowledgeService,
    hits: Sequence[SearchHit],
    collection: str,
    principals: frozenset[str] | None = None,
) -> set[str]:
    """The ids of the hits' documents that the store holds in `collection` (and
    `principals` may read)."""
    found = set()
    for doc_id in {hit.document_id for hit in hits}:
        doc = await service.document(doc_id, principals)
        if doc is not None and doc.collection == collection:
            found.add(doc_id)
    return found


def validate_query(
    query: str,
    runs: Sequence[Sequence[SearchHit]],
    in_collection: Container[str],
    expected: frozenset[str] | None,
    top_k: int,
    min_similarity: float,
) -> QueryValidation:
    hits = list(runs[0])
    similarities = [hit.similarity for hit in hits]
    metrics = None
    if expected:
        ranked = ranked_sources(hits, expected)
        grades = dict.fromkeys(expected, 1)
        metrics = {
            "ndcg@10": ir_metrics.ndcg_at_k(ranked, grades, 10),
            f"recall@{top_k}": ir_metrics.recall_at_k(ranked, grades, top_k),
            "mrr": ir_metrics.mrr_at_k(ranked, grades, top_k),
        }
    return QueryValidation(
        query=query,
        hits=hits,
        relevance_valid=bool(hits) and max(similarities) >= min_similarity,
        metadata_correct=bool(hits) and all(metadata_complete(h, in_collection) for h in hits),
        consistency_score=consistency(runs),
        relevance_score=statistics.fmean(similarities) if hits else 0.0,
        consistency_variance=score_variance(runs),
        retrieval_metrics=metrics,
        top_k=top_k,
    )


def metadata_complete(hit: SearchHit, in_collection: Container[str]) -> bool:
    """Every field of the chunk is there, and its document is really in the collection
    (among the ids `in_collection` holds: the stored documents of the collection)."""
    chunk = hit.chunk
    return (
        bool(chunk.content.strip() and chunk.id and source_url(hit))
        and chunk.chunk_index >= 0
        and 0.0 <= hit.similarity <= 1.0
        and hit.document_id in in_collection
    )


def consistency(runs: Sequence[Sequence[SearchHit]]) -> float:
    """Mean Jaccard overlap of each later run's chunks with the first run's (1 = same)."""
    first = {hit.chunk.id for hit in runs[0]}
    overlaps = [
        len(first & ids) / len(first | ids) if first | ids else 1.0
        for ids in ({hit.chunk.id for hit in run} for run in runs[1:])
    ]
    return statistics.fmean(overlaps) if overlaps else 1.0


def score_variance(runs: Sequence[Sequence[SearchHit]]) -> float:
    """Population variance, across runs, of each run's mean similarity."""
    means = [statistics.fmean(h.similarity for h in run) if run else 0.0 for run in runs]
    return statistics.pvariance(means) if len(means) > 1 else 0.0


def ranked_sources(hits: Sequence[SearchHit], expected: frozenset[str]) -> list[str]:
    """Documents in rank order, each named by the expected source it matches (by URL
    or source id), otherwise by its URL."""
    names = []
    for hit in hits:
        matches = expected & {source_url(hit), hit.source_id}
        names.append(min(matches) if matches else source_url(hit))
    return ir_metrics.distinct(names)


def overall(results: list[QueryValidation], pass_score: float) -> Validation:
    score = statistics.fmean(r.score for r in results)
    relevant = sum(r.relevance_valid for r in results)
    complete = sum(r.metadata_correct for r in results)
    passed = score >= pass_score and complete == len(results)
    summary = (
        f"{relevant}/{len(results)} queries relevant, metadata correct for {complete}/"
        f"{len(results)}, mean consistency "
        f"{statistics.fmean(round(r.consistency_score, 4) for r in results):.2f}"
    )
    judged = [r.retrieval_metrics for r in results if r.retrieval_metrics is not None]
    if judged:
        ndcg = statistics.fmean(round(m["ndcg@10"], 4) for m in judged)
        summary += f", nDCG@10 {ndcg:.2f} over {len(judged)} queries with expected sources"
    summary += f"; score {score:.2f} (pass mark {pass_score:g})"
    if complete < len(results):
        summary += "; incomplete metadata fails the validation"
    return Validation(results, passed, summary, score)
