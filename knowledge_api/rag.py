"""Retrieve and validate (the RAG contract): chunks of one collection with their
source metadata and the query's embedding, and validation runs of test queries.

Validation scores each test query on relevance (its best similarity), metadata (every
chunk complete and really from the collection), consistency across repeated runs and,
when expected sources are given, accuracy with nDCG@10, recall@k and MRR from
`evaluation`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_api import evaluation, validation
from knowledge_api.errors import CollectionNotFound, InvalidQuery, InvalidRequest
from knowledge_api.models import SearchFilters, SearchHit, document_id
from knowledge_api.service import KnowledgeService, Retrieval

Body = dict[str, Any]
QUERY_MAX_LENGTH = 999  # "less than 1000 characters"
MAX_TEST_QUERIES = 50


def query_text(payload: Body, field: str) -> str:
    return validation.text(payload, field, max_length=QUERY_MAX_LENGTH, error=InvalidQuery).strip()


def collection_field(payload: Body) -> str:
    return validation.collection_name(validation.text(payload, "collection", max_length=64))


@dataclass(frozen=True, slots=True)
class RetrieveRequest:
    query: str
    collection: str
    top_k: int = 5
    query_embedding_model: str = ""

    FIELDS = ("query", "collection", "top_k", "query_embedding_model")

    @classmethod
    def from_payload(cls, payload: Any) -> RetrieveRequest:
        body = validation.require_object(payload)
        validation.reject_unknown(body, cls.FIELDS)
        return cls(
            query=query_text(body, "query"),
            collection=collection_field(body),
            top_k=validation.integer(body, "top_k", low=1, high=100, default=5),
            query_embedding_model=validation.text(
                body, "query_embedding_model", max_length=200, default=""
            ).strip(),
        )


@dataclass(frozen=True, slots=True)
class ValidateRequest:
    collection: str
    test_queries: tuple[str, ...]
    expected_sources: dict[str, frozenset[str]]
    consistency_runs: int = 3
    top_k: int = 5

    FIELDS = ("collection", "test_queries", "expected_sources", "consistency_runs", "top_k")

    @classmethod
    def from_payload(cls, payload: Any) -> ValidateRequest:
        body = validation.require_object(payload)
        validation.reject_unknown(body, cls.FIELDS)
        queries = body.get("test_queries")
        if not isinstance(queries, list) or not 1 <= len(queries) <= MAX_TEST_QUERIES:
            raise InvalidRequest(
                "test_queries", f"must be a list of 1 to {MAX_TEST_QUERIES} queries"
            )
        texts = tuple(
            query_text({f"test_queries[{i}]": q}, f"test_queries[{i}]")
            for i, q in enumerate(queries)
        )
        return cls(
            collection=collection_field(body),
            test_queries=texts,
            expected_sources=expected_sources(body.get("expected_sources", []), texts),
            consistency_runs=validation.integer(
                body, "consistency_runs", low=1, high=10, default=3
            ),
            top_k=validation.integer(body, "top_k", low=1, high=100, default=5),
        )


def expected_sources(value: Any, queries: Sequence[str]) -> dict[str, frozenset[str]]:
    """[{"query": one of test_queries, "sources": [source URL or id, ...]}] -> by query."""
    if not isinstance(value, list):
        raise InvalidRequest("expected_sources", "must be a list of {query, sources} objects")
    mapping: dict[str, frozenset[str]] = {}
    for i, item in enumerate(value):
        where = f"expected_sources[{i}]"
        body = validation.require_object(item, where)
        validation.reject_unknown(body, ("query", "sources"))
        query = body.get("query")
        if not isinstance(query, str) or query.strip() not in queries:
            raise InvalidRequest(f"{where}.query", "must be one of test_queries")
        sources = body.get("sources")
        if (
            not isinstance(sources, list)
            or not sources
            or not all(isinstance(s, str) and s.strip() for s in sources)
        ):
            raise InvalidRequest(
                f"{where}.sources", "must be a non-empty list of source URLs or ids"
            )
        mapping[query.strip()] = frozenset(s.strip() for s in sources)
    return mapping


# -- retrieve --------------------------------------------------------------------------


async def retrieve(service: KnowledgeService, request: RetrieveRequest) -> Body:
    started = time.perf_counter()
    model = check_model(service, request.query_embedding_model)
    found = await search(service, request.query, request.collection, request.top_k)
    body: Body = {
        "success": True,
        "retrieved_chunks": [chunk_view(hit) for hit in found.hits],
        "query_embedding": None
        if found.vector is None
        else {"vector": [round(float(x), 6) for x in found.vector], "model": model},
        "metrics": {
            "response_time_ms": round((time.perf_counter() - started) * 1000, 3),
            "retrieval_count": len(found.hits),
        },
    }
    if found.warnings:
        body["warnings"] = found.warnings
    return body


def check_model(service: KnowledgeService, requested: str) -> str:
    """The embedder's name; a request for another model is refused, since its vectors
    would not live in the space the collection was embedded in."""
    name: str = service.embedder.name
    accepted = {name.casefold(), name.rpartition(":")[2].casefold()}
    if requested and requested.casefold() not in accepted:
        raise InvalidRequest(
            "query_embedding_model",
            f"must be the model the collections are embedded with ({name})",
            configured=name,
        )
    return name


async def search(service: KnowledgeService, query: str, collection: str, top_k: int) -> Retrieval:
    found = await service.retrieve(query, top_k, SearchFilters(collection=collection))
    if not found.hits:
        await require_collection(service, collection)
    return found


async def require_collection(service: KnowledgeService, collection: str) -> None:
    existing = await service.store.collections()
    if collection not in existing:
        raise CollectionNotFound(
            f"no collection {collection!r}", collection=collection, available=sorted(existing)
        )


def chunk_view(hit: SearchHit) -> Body:
    chunk = hit.chunk
    return {
        "content": chunk.content,
        "source_url": source_url(hit),
        "page_title": chunk.title,
        "section_hierarchy": chunk.section,
        "chunk_index": chunk.chunk_index,
        "similarity_score": round(hit.similarity, 4),
        "vector_id": chunk.id,
    }


def source_url(hit: SearchHit) -> str:
    url = hit.metadata.get("url")
    return url if isinstance(url, str) and url else hit.source_id


# -- validate --------------------------------------------------------------------------


async def validate(service: KnowledgeService, request: ValidateRequest) -> Body:
    await require_collection(service, request.collection)
    settings = service.settings
    results = []
    for query in request.test_queries:
        runs = [
            await search(service, query, request.collection, request.top_k)
            for _ in range(request.consistency_runs)
        ]
        results.append(
            validate_query(
                query,
                [run.hits for run in runs],
                request.collection,
                request.expected_sources.get(query),
                request.top_k,
                settings.validate_min_similarity,
            )
        )
    return {
        "success": True,
        "validation_results": results,
        "overall_validation": overall(results, settings.validate_pass_score),
    }


def validate_query(
    query: str,
    runs: Sequence[Sequence[SearchHit]],
    collection: str,
    expected: frozenset[str] | None,
    top_k: int,
    min_similarity: float,
) -> Body:
    hits = runs[0]
    similarities = [hit.similarity for hit in hits]
    result: Body = {
        "query": query,
        "retrieved_chunks": [chunk_view(hit) for hit in hits],
        "relevance_valid": bool(hits) and max(similarities) >= min_similarity,
        "metadata_correct": bool(hits) and all(metadata_complete(h, collection) for h in hits),
        "consistency_score": round(consistency(runs), 4),
        "validation_metrics": {
            "accuracy": None,
            "relevance_score": round(statistics.fmean(similarities), 4) if hits else 0.0,
            "consistency_variance": round(score_variance(runs), 6),
        },
    }
    if expected:
        ranked = ranked_sources(hits, expected)
        grades = dict.fromkeys(expected, 1)
        metrics = {
            "ndcg@10": evaluation.ndcg_at_k(ranked, grades, 10),
            f"recall@{top_k}": evaluation.recall_at_k(ranked, grades, top_k),
            "mrr": evaluation.mrr_at_k(ranked, grades, top_k),
        }
        result["validation_metrics"]["accuracy"] = round(metrics[f"recall@{top_k}"], 4)
        result["retrieval_metrics"] = {name: round(value, 4) for name, value in metrics.items()}
    return result


def metadata_complete(hit: SearchHit, collection: str) -> bool:
    """Every field of the chunk is there, and its document is really in `collection`."""
    chunk = hit.chunk
    return (
        bool(chunk.content.strip() and chunk.id and source_url(hit))
        and chunk.chunk_index >= 0
        and 0.0 <= hit.similarity <= 1.0
        and document_id(collection, hit.source_type, hit.source_id) == hit.document_id
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
    return evaluation.distinct(names)


def query_score(result: Body) -> float:
    parts = [
        float(result["relevance_valid"]),
        float(result["metadata_correct"]),
        float(result["consistency_score"]),
    ]
    accuracy = result["validation_metrics"]["accuracy"]
    if accuracy is not None:
        parts.append(float(accuracy))
    return statistics.fmean(parts)


def overall(results: Sequence[Body], pass_score: float) -> Body:
    score = statistics.fmean(query_score(r) for r in results)
    relevant = sum(r["relevance_valid"] for r in results)
    complete = sum(r["metadata_correct"] for r in results)
    passed = score >= pass_score and complete == len(results)
    summary = (
        f"{relevant}/{len(results)} queries relevant, metadata correct for {complete}/"
        f"{len(results)}, mean consistency "
        f"{statistics.fmean(r['consistency_score'] for r in results):.2f}"
    )
    judged = [r["retrieval_metrics"] for r in results if "retrieval_metrics" in r]
    if judged:
        ndcg = statistics.fmean(m["ndcg@10"] for m in judged)
        summary += f", nDCG@10 {ndcg:.2f} over {len(judged)} queries with expected sources"
    summary += f"; score {score:.2f} (pass mark {pass_score:g})"
    if complete < len(results):
        summary += "; incomplete metadata fails the validation"
    return {"passed": passed, "summary": summary, "score": round(score, 4)}
