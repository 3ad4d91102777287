"""The query: search, and optionally an answer written from the results by the
synthesis chain, kept in tier 1 (POST /v1/knowledge/query)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from knowledge_api.models import SearchHit, SearchParams
from knowledge_api.service import COMPUTED, Event, KnowledgeService, Retrieval, Served
from knowledge_api.synthesis.chain import Outcome
from knowledge_api.timing import elapsed_ms

Filters = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class QueryParams(SearchParams):
    synthesize: bool = True
    """Write an answer from the results."""


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What tier 1 keeps of a query."""

    hits: tuple[SearchHit, ...]
    outcome: Outcome | None
    """The synthesis, when one was asked for."""
    warnings: tuple[str, ...]
    timings: dict[str, float]
    """embedding_ms, search_ms, rerank_ms when a reranker ran and, with a synthesis,
    synthesis_ms."""


async def query(service: KnowledgeService, params: QueryParams) -> Served[QueryResult]:
    return await service.tier1.served(params.cache_key(), lambda: compute(service, params))


async def compute(service: KnowledgeService, params: QueryParams) -> tuple[QueryResult, bool]:
    generation = await service.tier1.generation()
    found = await search(service, params)
    outcome, synthesis_ms = None, 0.0
    if params.synthesize:
        started = time.perf_counter()
        outcome = await service.synthesize(params.query, found.hits)
        synthesis_ms = elapsed_ms(started)
    return await finished(service, generation, found, outcome, synthesis_ms)


def events(service: KnowledgeService, params: QueryParams) -> AsyncGenerator[Event, None]:
    """("results", hits), the synthesis as the provider writes it (("delta", text);
    ("reset", why) when a link fails mid-answer), then ("done", Served[QueryResult])."""

    def replay(value: QueryResult) -> list[Event]:
        replayed: list[Event] = [("results", value.hits)]
        if value.outcome is not None:
            replayed.append(("delta", value.outcome.text))
        return replayed

    return service.tier1.served_events(params.cache_key(), streamed(service, params), replay)


async def streamed(service: KnowledgeService, params: QueryParams) -> AsyncGenerator[Event, None]:
    generation = await service.tier1.generation()
    found = await search(service, params)
    yield "results", tuple(found.hits)
    outcome, synthesis_ms = None, 0.0
    if params.synthesize:
        started = time.perf_counter()
        async for name, data in service.synthesis_events(params.query, found.hits):
            if name == "done":
                outcome = data
            else:
                yield name, data
        synthesis_ms = elapsed_ms(started)
    yield COMPUTED, await finished(service, generation, found, outcome, synthesis_ms)


async def search(service: KnowledgeService, params: QueryParams) -> Retrieval:
    return await service.retrieve(
        params.query, params.limit, params.search_filters(), params.threshold
    )


async def finished(
    service: KnowledgeService,
    generation: Any,
    found: Retrieval,
    outcome: Outcome | None,
    synthesis_ms: float,
) -> tuple[QueryResult, bool]:
    """The result and whether it may be cached: not when something degraded it, nor
    when the store changed while it was computed."""
    timings = found.timings()
    warnings = list(found.warnings)
    if outcome is not None:
        timings["synthesis_ms"] = synthesis_ms
        warnings += outcome.warnings()
    result = QueryResult(tuple(found.hits), outcome, tuple(warnings), timings)
    return result, not warnings and await service.tier1.generation() == generation
