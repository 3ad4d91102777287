"""Grounded answers (the retrieval-agent contract, POST /v1/knowledge/answer): passages
above a threshold, an answer written from them that cites them as [n], and the
confidence the answer deserves. An answer that cites nothing, or a question no passage
reaches the threshold for, is `insufficient_context`."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import takewhile
from operator import attrgetter
from typing import Any, NamedTuple

from knowledge_api import grounding
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import Outcome, SearchHit, SearchParams, SentenceSupport
from knowledge_api.service import COMPUTED, Event, KnowledgeService, Retrieval, Served
from knowledge_api.timing import elapsed_ms

INSUFFICIENT = (
    "I cannot find sufficient information in the knowledge base to answer this question. "
    "The most relevant passages found had similarity scores below the {threshold:g} "
    "threshold (best: {best:.2f}). Try rephrasing the question or lowering the threshold."
)
NOTHING_FOUND = (
    "I cannot find sufficient information in the knowledge base to answer this question: "
    "no passage matches it (check the sources and filters of the request)."
)
UNCITED = (
    "I cannot find sufficient information in the passages found to answer this question: "
    "the answer written by {model} cited none of them. Try rephrasing the question."
)
NO_CONFIDENCE = grounding.Confidence(0.0, 0.0, 0.0, 0.0)
SENTENCE_MARGIN = 0.1
"""How far below the threshold a passage may be and still ground an answer by its
sentence closest to the question: a long passage is diluted, not unrelated (a
changelog line on Thai dates, 0.45 from "what is the daily life of thai people" in
a passage 0.20 from it, is not an answer)."""
WORDS_MARGIN = 0.2
"""How far below the threshold a passage may be and still ground an answer that would
otherwise be refused, by its best sentence scored by meaning and words: the embedder
reads a question in a product's own terms ("How do I undo an adoption?") far from
the passage that answers it (0.29), whose sentence holds the words the question asks
with. A sentence merely close in meaning to a question far from its passage is on its
topic, not its answer: the words must back it."""
WORDS_NEEDED = 0.5
"""Share of the question's content words a passage (its title and section included)
holds to be read at WORDS_MARGIN at all: one holding fewer cannot be backed by them,
and its sentences are not embedded."""


class Tier(NamedTuple):
    """One way passages below the threshold ground an answer."""

    margin: float
    """How far below the threshold."""
    measure: Callable[[SentenceSupport], float]
    """What of its sentences must reach the threshold."""
    words: float
    """Share of the question's content words the passage must hold."""


GROUNDING = (
    Tier(SENTENCE_MARGIN, attrgetter("meaning"), 0.0),
    Tier(WORDS_MARGIN, attrgetter("answers"), WORDS_NEEDED),
)
"""How passages below the threshold ground an answer, tried in turn (`passages`): the
farther below, the more of the question they must hold."""
READ_PAST = 3
"""Passages found past the limit, at SENTENCE_MARGIN below the threshold, read for a
sentence that answers better than every sentence of the passages that fill the limit
(`closer_past`), in the search's order and in its order before the feedback round
(`past_limit`)."""


@dataclass(frozen=True, slots=True)
class AnswerParams(SearchParams):
    """The threshold is a passage's similarity to ground the answer."""

    context: str = ""
    """Words searched with the question that are not part of it (in a conversation,
    the documents an earlier answer cited): the answer is written to the question."""


@dataclass(frozen=True, slots=True)
class GroundedAnswer:
    """What tier 1 keeps of an answer: all but the request's own id and timings."""

    status: str
    """success, insufficient_context or error."""
    answer: str | None
    sources: tuple[tuple[int, SearchHit], ...]
    """The cited passages with their citation number."""
    confidence: grounding.Confidence
    error_message: str | None
    outcome: Outcome | None
    warnings: tuple[str, ...]
    results: tuple[SearchHit, ...]
    """Every passage the answer could cite: [n] is results[n - 1]."""
    retrieval_ms: float = 0.0
    generation_ms: float = 0.0
    query_id: str = ""
    """The id a rating of this answer refers to (POST /v1/knowledge/feedback)."""
    ranking: dict[str, Any] = field(default_factory=dict)
    """The ranking that found the passages (KnowledgeService.ranking_ran)."""


def failed(message: str) -> GroundedAnswer:
    return GroundedAnswer("error", None, (), NO_CONFIDENCE, message, None, (), ())


async def answer(service: KnowledgeService, params: AnswerParams) -> Served[GroundedAnswer]:
    return await service.served(params.cache_key(), lambda: compute(service, params), params.scope)


async def compute(service: KnowledgeService, params: AnswerParams) -> tuple[GroundedAnswer, bool]:
    found = await passages(service, params)
    if not found.hits:
        await service.require_collections(params.searched, params.principals)
        grounded = await insufficient(service, params, found.warnings)
        return await finished(service, params, found, grounded)
    started = time.perf_counter()
    outcome = await service.synthesize(params.query, found.hits)
    grounded = await ground(service, params, outcome, elapsed_ms(started), found.warnings)
    return await finished(service, params, found, grounded)


def events(service: KnowledgeService, params: AnswerParams) -> AsyncGenerator[Event, None]:
    """("results", hits), ("delta", text) as the answer is written (("reset", why) when
    a link fails mid-answer), then ("done", Served[GroundedAnswer])."""

    def replay(value: GroundedAnswer) -> list[Event]:
        replayed: list[Event] = [("results", value.results)]
        if value.answer:
            replayed.append(("delta", value.answer))
        return replayed

    return service.served_events(
        params.cache_key(), streamed(service, params), replay, params.scope
    )


async def streamed(service: KnowledgeService, params: AnswerParams) -> AsyncGenerator[Event, None]:
    if params.collections:  # several: each checked before the search
        await service.require_collections(params.collections, params.principals)
    found = await passages(service, params)
    if not found.hits:
        await service.require_collections(params.searched, params.principals)
    yield "results", tuple(found.hits)
    if not found.hits:
        grounded = await insufficient(service, params, found.warnings)
    else:
        started = time.perf_counter()
        outcome: Outcome | None = None
        async for name, data in service.synthesis_events(params.query, found.hits):
            if name == "done":
                outcome = data
            else:
                yield name, data
        assert outcome is not None, "the synthesis chain always ends with an outcome"
        grounded = await ground(service, params, outcome, elapsed_ms(started), found.warnings)
    yield COMPUTED, await finished(service, params, found, grounded)


async def passages(service: KnowledgeService, params: AnswerParams) -> Retrieval:
    """The passages an answer may be written from: those whose similarity reaches the
    threshold, and, when they are fewer than the limit, those of the first `limit`
    found at SENTENCE_MARGIN below it whose sentence closest to the question reaches
    it. A passage of many bullets is far from a question in meaning that one of its
    sentences answers ("How do I add documents over HTTP?": the passage 0.39, "To index
    one document, send it as the body." 0.45). When none reaches the threshold: also
    those of the first `limit` found at WORDS_MARGIN below it whose best sentence,
    scored by meaning and words as the answer is chosen, reaches it - all of them when
    the nearer margin grounds nothing (rather than refuse), else those the search ranks
    above every passage it grounds (`grounded_below`, `ahead`). They keep the order
    they were found in. Passages that reach the threshold but hold no sentence the
    answer may quote (asked what posting a `source_id` again does, five passages that
    name no `source_id` or say nothing of posting) count as none: the answer would be
    refused, and the passage below them that says so is the answer. Passages that fill
    the limit make room for one just below whose sentence answers better
    (`closer_past`)."""
    found = await search(service, params, params.threshold)
    if params.threshold <= 0:
        return found
    quotable = service.quotable(params.query, found.hits)
    if len(found.hits) >= params.limit and quotable:
        return await closer_past(service, params, found)
    if quotable and found.hits:
        return await grounded_below(service, params, found, GROUNDING[0])
    grounded = replace(found, hits=[])
    for tier in GROUNDING:
        grounded = await grounded_below(service, params, grounded, tier, bool(grounded.hits))
    return grounded if grounded.hits else found


async def grounded_below(
    service: KnowledgeService,
    params: AnswerParams,
    found: Retrieval,
    tier: Tier,
    ahead: bool = False,
) -> Retrieval:
    """`found` with the passages of the first `limit` found at the tier's margin below
    the threshold, holding its share of the question's words, whose sentences' measure
    reaches the threshold; in the order they were found. With `ahead` (`found` holds
    passages a nearer tier grounded), only those found before all of `found`: the
    search's order weighs the question's words, which the similarity does not ("Which
    table holds one row per passage?": the table's line found first at 0.28, above
    four passages at 0.32-0.34 on tables in general), while a farther passage ranked
    below them is the evidence of last resort, as when nothing nearer grounds the
    answer (asked when a file is binary, a line of another page listing it among many
    conditions, found second, outscored the line that says it, found third)."""
    nearest = await search(service, params, max(params.threshold - tier.margin, 0.0))
    below = [hit for hit in nearest.hits if hit.similarity < params.threshold]
    if ahead:
        held = {hit.chunk.id for hit in found.hits}
        below = list(takewhile(lambda hit: hit.chunk.id not in held, below))
    support = await service.sentence_support(params.query, below, tier.words) if below else None
    admitted = {
        hit.chunk.id
        for hit, s in zip(below, support or (), strict=False)
        if tier.measure(s) >= params.threshold
    }
    if not admitted:
        return found
    kept = admitted | {hit.chunk.id for hit in found.hits}
    hits = [hit for hit in nearest.hits if hit.chunk.id in kept]
    hits += [hit for hit in found.hits if hit not in hits]
    return replace(found, hits=hits[: params.limit])


async def closer_past(
    service: KnowledgeService, params: AnswerParams, found: Retrieval
) -> Retrieval:
    """`found` (the limit filled at the threshold) with the passages of the first
    `limit + READ_PAST` found at SENTENCE_MARGIN below the threshold, holding
    WORDS_NEEDED of the question's words, whose best sentence, scored by meaning and
    words as the answer is chosen, outscores every sentence of `found`: in place of its
    last ones. A passage of a long reference list (settings, fields, errors) is the
    mean of many unrelated lines, so it is found just below the passages that talk
    around the question while its one line answers it: asked for the default API
    host, `KNOWLEDGE_API_HOST`'s line (0.84) was found eighth at 0.397, under five
    passages on allowed hosts and origins whose best line scored 0.74. A passage past
    the limit that reaches the threshold is not read so: the limit kept it out, not a
    diluted similarity (asked how a query is answered, the seventh step of the steps
    listed, found sixth at 0.45, outscored the first step that answers). The answer is
    the best sentence by the same score, among more passages; their support is read
    apart from `found`'s, whose sentences' vectors the answer then finds kept."""
    past = await past_limit(service, params, found)
    above = await service.sentence_support(params.query, found.hits) if past else None
    support = await service.sentence_support(params.query, past, WORDS_NEEDED) if above else None
    if not above or not support:
        return found
    best = max(s.answers for s in above)
    closer = [hit for hit, s in zip(past, support, strict=True) if s.answers > best]
    if not closer:
        return found
    closer = closer[: params.limit]
    return replace(found, hits=[*found.hits[: params.limit - len(closer)], *closer])


async def past_limit(
    service: KnowledgeService, params: AnswerParams, found: Retrieval
) -> list[SearchHit]:
    """The passages of the first `limit + READ_PAST` found at SENTENCE_MARGIN below the
    threshold that `found` does not hold and that do not reach it, in the search's
    order, then those of the same window of its order before the feedback round, when
    that round ran. The round moves the question toward the mean of its best passages,
    which fill the limit: toward what is already read, and away from a passage whose
    one line answers while the rest of it is about something else, which is what
    reading past the limit looks for (asked which table counts the passages per facet
    value, the table's line, found 7th before the round among passages on facets in
    the API, was 16th after it, under more of them). One more search (the question's
    vector is kept; no feedback round, and no reranker: the reranked order is read
    already), and the support of the passages it adds."""
    wider = replace(params, limit=params.limit + READ_PAST)
    floor = max(params.threshold - SENTENCE_MARGIN, 0.0)
    orders = [await search(service, wider, floor)]
    if found.ranking.get("prf"):
        own = replace(wider, ranking=replace(params.ranking, prf=False))
        orders.append(await search(service, own, floor, rerank=False))
    held = {hit.chunk.id for hit in found.hits}
    past: dict[str, SearchHit] = {}
    for hit in (hit for order in orders for hit in order.hits):
        if hit.chunk.id not in held and hit.similarity < params.threshold:
            past.setdefault(hit.chunk.id, hit)
    return list(past.values())


async def search(
    service: KnowledgeService, params: AnswerParams, threshold: float, rerank: bool = True
) -> Retrieval:
    searched = f"{params.query} {params.context}" if params.context else params.query
    return await service.retrieve(
        searched,
        params.limit,
        params.search_filters(),
        threshold,
        rerank=rerank,
        ranking=params.ranking,
    )


async def finished(
    service: KnowledgeService,
    params: AnswerParams,
    found: Retrieval,
    grounded: GroundedAnswer,
) -> tuple[GroundedAnswer, bool]:
    """The answer, recorded under a new query_id, and whether it may be cached: not when
    something degraded it (tier 1 keeps it under the generation its collection had
    before it was computed)."""
    retrieval_ms = round(sum(found.timings().values()), 3)
    cited = [n for n, _ in grounded.sources]
    query_id = await service.answered("answer", params, found.hits, cited)
    grounded = replace(
        grounded,
        results=tuple(found.hits),
        retrieval_ms=retrieval_ms,
        query_id=query_id,
        ranking=found.ranking,
    )
    return grounded, not grounded.warnings


async def insufficient(
    service: KnowledgeService, params: AnswerParams, warnings: Sequence[str]
) -> GroundedAnswer:
    """No passage reaches the threshold: say how close the nearest came."""
    nearest = await search(service, params, 0.0, rerank=False)  # only its best similarity
    best = grounding.retrieval_quality(nearest.hits)
    if nearest.hits:
        message = INSUFFICIENT.format(threshold=params.threshold, best=best)
    else:
        message = NOTHING_FOUND
    confidence = grounding.Confidence(best, 0.0, 0.0, 0.0)
    return GroundedAnswer(
        "insufficient_context", None, (), confidence, message, None, tuple(warnings), ()
    )


async def ground(
    service: KnowledgeService,
    params: AnswerParams,
    outcome: Outcome,
    generation_ms: float,
    retrieval_warnings: Sequence[str],
) -> GroundedAnswer:
    """The answer's sources and confidence; an answer citing nothing is not grounded."""
    passages = outcome.passages
    cited = [passages[n - 1] for n in outcome.citations]
    warnings = [*retrieval_warnings, *outcome.warnings()]
    entailment, method = await entailment_of(service, outcome, warnings)
    confidence = grounding.Confidence(
        retrieval_quality=grounding.retrieval_quality(passages),
        coverage_score=grounding.coverage(params.query, cited),
        entailment_score=entailment,
        lexical_overlap=grounding.lexical_overlap(outcome.text, cited),
        entailment_method=method,
    )
    if not cited:
        return GroundedAnswer(
            "insufficient_context",
            None,
            (),
            grounding.Confidence(confidence.retrieval_quality, 0, 0, 0),
            UNCITED.format(model=outcome.model),
            outcome,
            tuple(warnings),
            (),
            generation_ms=generation_ms,
        )
    sources = tuple((n, passages[n - 1]) for n in outcome.citations)
    return GroundedAnswer(
        "success",
        outcome.text,
        sources,
        confidence,
        None,
        outcome,
        tuple(warnings),
        (),
        generation_ms=generation_ms,
    )


async def entailment_of(
    service: KnowledgeService, outcome: Outcome, warnings: list[str]
) -> tuple[float, str]:
    """Sentence-level support by embeddings, or by term overlap without the model."""
    claims = grounding.claims(outcome.text)
    embed = service.embed_documents if service.embedder_ready else None
    try:
        return await grounding.entailment(claims, outcome.passages, embed)
    except EmbeddingError as e:
        warnings.append(f"entailment by term overlap: {e.message}")
        return await grounding.entailment(claims, outcome.passages, None)
