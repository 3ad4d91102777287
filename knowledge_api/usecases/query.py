"""The query: search, and optionally an answer written from the results by the
synthesis chain, kept in tier 1 (POST /v1/knowledge/query)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.facets import Facets
from knowledge_api.models import SOURCE_TYPES as SOURCES
from knowledge_api.models import Outcome, SearchHit, SearchParams
from knowledge_api.ranking import next_offset
from knowledge_api.service import COMPUTED, Asked, Event, KnowledgeService, Plan, Retrieval, Served
from knowledge_api.timing import elapsed_ms

Filters = tuple[tuple[str, Any], ...]
log = logging.getLogger("knowledge_api")


@dataclass(frozen=True, slots=True)
class QueryParams(SearchParams):
    synthesize: bool = True
    """Write an answer from the results."""
    facets: tuple[str, ...] = ()
    """Fields whose values are counted over every match (knowledge_api.facets)."""


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
    routed: tuple[str, ...] | None = None
    """The sources searched, with semantic routing on."""
    query_id: str = ""
    """The id a rating of this result refers to (POST /v1/knowledge/feedback)."""
    next_offset: int | None = None
    """The offset of the next page; None when this page is the last one reachable."""
    ranking: dict[str, Any] = field(default_factory=dict)
    """The ranking that ran (KnowledgeService.ranking_ran)."""
    facets: Facets | None = None
    """The counts of the fields the request named, over every match."""


async def query(
    service: KnowledgeService, params: QueryParams, client: str = ""
) -> Served[QueryResult]:
    """The answer (from tier 1 or computed), then its likely follow-ups prefetched
    in the background when KNOWLEDGE_PREFETCH is on."""
    with service.answering():
        served = await service.served(
            params.cache_key(), lambda: compute(service, params), params.scope
        )
    prefetch(service, params, client, served.value.hits)
    return served


def prefetch(
    service: KnowledgeService, params: QueryParams, client: str, hits: tuple[SearchHit, ...]
) -> None:
    async def warm(followup: str) -> None:
        ahead = replace(params, query=followup)
        key = ahead.cache_key()
        if service.cached(key) is None:  # a lookup here is no hit or miss
            await service.served(key, lambda: compute(service, ahead), ahead.scope)

    service.follow_up(client, params.query, hits, warm)


async def compute(service: KnowledgeService, params: QueryParams) -> tuple[QueryResult, bool]:
    if params.facets:
        found, counted = await asyncio.gather(search(service, params), count(service, params))
    else:  # no tasks of their own for a search alone
        found, counted = await search(service, params), NOT_COUNTED
    if not found.hits:
        await service.require_collections(params.searched, params.principals)
    outcome, synthesis_ms = None, 0.0
    if params.synthesize:
        started = time.perf_counter()
        outcome = await service.synthesize(params.query, found.hits)
        synthesis_ms = elapsed_ms(started)
    return await finished(service, params, found, outcome, synthesis_ms, counted)


NOT_COUNTED: tuple[Facets | None, float] = (None, 0.0)
"""The facets of a request that asks for none."""


async def count(service: KnowledgeService, params: QueryParams) -> tuple[Facets | None, float]:
    """The request's facets, over the match set its filters define (not the routed
    sources: routing picks where to look for the best hits, not what matches), and the
    time they took."""
    if not params.facets:
        return NOT_COUNTED
    started = time.perf_counter()
    counted = await service.facets(params.search_filters(), params.facets)
    return counted, elapsed_ms(started)


def events(
    service: KnowledgeService, params: QueryParams, client: str = ""
) -> AsyncGenerator[Event, None]:
    """("source_results", (source, hits)) as each source answers, ("results", hits) in
    the fused order, the synthesis as the provider writes it (("delta", text); ("reset",
    why) when a link fails mid-answer), then ("done", Served[QueryResult]). A cache hit
    replays the fused results and the synthesis only."""

    def replay(value: QueryResult) -> list[Event]:
        replayed: list[Event] = [("results", value.hits)]
        if value.outcome is not None:
            replayed.append(("delta", value.outcome.text))
        return replayed

    return followed(
        service,
        params,
        client,
        service.served_events(params.cache_key(), streamed(service, params), replay, params.scope),
    )


async def followed(
    service: KnowledgeService,
    params: QueryParams,
    client: str,
    events: AsyncGenerator[Event, None],
) -> AsyncGenerator[Event, None]:
    """The stream's events; its follow-ups prefetched once it is done."""
    hits: tuple[SearchHit, ...] | None = None
    async with aclosing(events):
        with service.answering():
            async for name, data in events:
                yield name, data
                if name == "done":
                    hits = data.value.hits
    if hits is not None:
        prefetch(service, params, client, hits)


async def streamed(service: KnowledgeService, params: QueryParams) -> AsyncGenerator[Event, None]:
    """Each source's results go out as they come, before the fused ones: the collection
    is checked first, so a mistyped one is a 404 rather than a stream of empty results."""
    await service.require_collections(params.searched, params.principals)
    plan = await service.plan(params.query, params.search_filters(), route=True)
    found: Retrieval | None = None
    async for name, data in progressive(service, params, plan):
        if name == "fused":
            found = data
            yield "results", tuple(data.hits)
        else:
            yield name, data
    assert found is not None
    counted = await count(service, params)
    outcome, synthesis_ms = None, 0.0
    if params.synthesize:
        started = time.perf_counter()
        async for name, data in service.synthesis_events(params.query, found.hits):
            if name == "done":
                outcome = data
            else:
                yield name, data
        synthesis_ms = elapsed_ms(started)
    yield COMPUTED, await finished(service, params, found, outcome, synthesis_ms, counted)


async def progressive(
    service: KnowledgeService, params: QueryParams, plan: Plan
) -> AsyncGenerator[Event, None]:
    """Each source searched on its own beside the fused search: ("source_results",
    (source, hits)) as each answers, then ("fused", Retrieval). A slow source delays
    only its own event and the fused order; a source still searching when the fused
    order is ready is not waited for, and a source whose own search fails is left out
    (the fused search reports a failing store)."""
    sources = plan.routed or plan.filters.source_types or SOURCES
    alone = {
        asyncio.create_task(search_alone(service, params, plan, source)): source
        for source in sources
    }
    fused = asyncio.create_task(search_planned(service, params, plan))
    try:
        pending: set[asyncio.Task[Any]] = {*alone, fused}
        while pending and not fused.done():
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in [t for t in alone if t.done()]:
                source = alone.pop(task)
                error = task.exception()
                if error is None:
                    yield "source_results", (source, tuple(task.result().hits))
                elif not isinstance(error, KnowledgeAPIError):  # a store's, the fused reports
                    log.warning("searching %s alone failed: %s", source, error)
        yield "fused", await fused
    finally:
        for task in (fused, *alone):
            task.cancel()


async def search(service: KnowledgeService, params: QueryParams) -> Retrieval:
    return await service.retrieve_asked(asked(params), params.search_filters(), route=True)


async def search_alone(
    service: KnowledgeService, params: QueryParams, plan: Plan, source: str
) -> Retrieval:
    """One source's own best hits, in fused order (not reranked: the fused order is)."""
    return await search_planned(service, params, plan.only(source), rerank=False)


async def search_planned(
    service: KnowledgeService, params: QueryParams, plan: Plan, rerank: bool = True
) -> Retrieval:
    return await service.search(plan, asked(params, rerank))


def asked(params: QueryParams, rerank: bool = True) -> Asked:
    """What the query's search asks, fused or of one source (`rerank=False`)."""
    return Asked(
        params.query,
        params.limit,
        params.threshold,
        rerank=rerank,
        ranking=params.ranking,
        offset=params.offset,
    )


async def finished(
    service: KnowledgeService,
    params: QueryParams,
    found: Retrieval,
    outcome: Outcome | None,
    synthesis_ms: float,
    counted: tuple[Facets | None, float] = NOT_COUNTED,
) -> tuple[QueryResult, bool]:
    """The result, recorded under a new query_id, and whether it may be cached: not
    when something degraded it (tier 1 keeps it under the generation its collection had
    before it was computed)."""
    timings = found.timings()
    facets, facets_ms = counted
    if facets is not None:
        timings["facets_ms"] = facets_ms
    warnings = list(found.warnings)
    if outcome is not None:
        timings["synthesis_ms"] = synthesis_ms
        warnings += outcome.warnings()
    cited = outcome.citations if outcome is not None else ()
    query_id = await service.answered("query", params, found.hits, cited)
    result = QueryResult(
        tuple(found.hits),
        outcome,
        tuple(warnings),
        timings,
        found.routed,
        query_id,
        next_offset(params.offset, params.limit, found.more),
        found.ranking,
        facets,
    )
    return result, not warnings
