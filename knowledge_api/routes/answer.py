"""POST /v1/knowledge/answer: a grounded answer with citations and confidence (the
retrieval agent's AgentResponse); with `stream: true` as Server-Sent Events."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import views
from knowledge_api.errors import InvalidQuery, KnowledgeAPIError
from knowledge_api.grounding import WEIGHTS
from knowledge_api.models import SearchHit
from knowledge_api.service import Served
from knowledge_api.spans import Unit
from knowledge_api.timing import utc_now
from knowledge_api.usecases import answers as use
from knowledge_api.web.access import access
from knowledge_api.web.fields import Number, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.observe import note_cache_hit
from knowledge_api.web.schema import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    SCALAR,
    STRING,
    array,
    enum,
    nullable,
    obj,
    unit,
)
from knowledge_api.web.sse import (
    UNEXPECTED,
    Event,
    event_stream,
    events_schema,
    log,
)

ANSWER = views.search_body(
    "AnswerRequest",
    Text("query", "The question.", max_length=500, error=InvalidQuery),
    "Most passages the answer is written from.",
    Number(
        "threshold",
        "Similarity a passage needs to ground the answer "
        "(default: KNOWLEDGE_ANSWER_THRESHOLD, or the embedder's own).",
        None,
    ),
    views.OFFSETS,
)


def parse(payload: Any, default_threshold: float) -> tuple[use.AnswerParams, bool, Unit]:
    values = ANSWER.parse(payload, defaults={"threshold": default_threshold})
    stream = values.pop("stream")
    unit = values.pop("offsets")
    return use.AnswerParams(**values), stream, unit


async def answer(request: Request) -> Response:
    knowledge = service(request)
    params, stream, unit = parse(await read_json(request), knowledge.answer_threshold)
    access(request).searches(params.searched)
    params = access(request).asking(params)
    if not stream:
        return JSONResponse(render(await use.answer(knowledge, params), unit))
    started = time.perf_counter()

    def failure(error: Exception) -> Event:
        """The stream had begun: it ends with an AgentResponse of status error."""
        if isinstance(error, KnowledgeAPIError):
            message = error.message
        else:
            log.error("unhandled error while streaming an answer", exc_info=error)
            message = UNEXPECTED
        return "done", render(Served(use.failed(message), False, started))

    events = use.events(knowledge, params)
    return await event_stream(
        events, views.translation("answer", partial(render, unit=unit)), failure
    )


CONFIDENCE = obj(
    {
        **{factor: unit() for factor in WEIGHTS},
        "overall": unit(),
        "level": enum("high", "medium", "low"),
        "entailment_method": STRING,
    }
)
SOURCE = obj(
    {
        "chunk_id": STRING,
        "citation_index": {**INTEGER, "minimum": 1},
        "relevance_score": NUMBER,
        "excerpt": STRING,
        "collection": {**STRING, "description": "The collection the passage is in."},
        "metadata": obj(
            {
                "title": STRING,
                "chunk_index": INTEGER,
                "document_id": STRING,
                "source_type": views.SOURCE_TYPE,
                "source_id": STRING,
            },
            {"section": STRING},
            extra=SCALAR,
        ),
    }
)
RESPONSE = obj(
    {
        "query_id": {**STRING, "format": "uuid"},
        "status": enum("success", "insufficient_context", "error"),
        "answer": nullable(STRING),
        "confidence": CONFIDENCE,
        "sources": array(SOURCE),
        "citations": views.CITATIONS,
        "metadata": obj(
            {
                "model": nullable(STRING),
                "temperature": nullable(NUMBER),
                "total_time_ms": NUMBER,
                "retrieval_time_ms": NUMBER,
                "generation_time_ms": NUMBER,
                "tokens_used": nullable(INTEGER),
                "timestamp": STRING,
                "cache_hit": BOOLEAN,
                "synthesizer": nullable(views.SYNTHESIZER),
            },
            {"ranking": views.RANKING_RAN},
        ),
        "error_message": nullable(STRING),
    },
    {"warnings": array(STRING)},
)
"""The AgentResponse `render` returns; also the data of the stream's `done` event."""


def render(served: Served[use.GroundedAnswer], unit: Unit = "codepoints") -> dict[str, Any]:
    """The AgentResponse: the answer, its sources and confidence, and metadata."""
    grounded, outcome = served.value, served.value.outcome
    note_cache_hit(served.cache_hit)
    timings = {
        "retrieval_time_ms": grounded.retrieval_ms,
        "generation_time_ms": grounded.generation_ms,
    }
    metadata = {
        "model": outcome.model if outcome else None,
        "temperature": outcome.temperature if outcome else None,
        "total_time_ms": served.total_ms,
        **views.zeroed_on_hit(timings, served.cache_hit),
        "tokens_used": outcome.tokens_used if outcome else 0,
        "timestamp": utc_now(),
        "cache_hit": served.cache_hit,
        "synthesizer": outcome.view() if outcome else None,
    }
    if grounded.ranking:
        metadata["ranking"] = grounded.ranking
    response: dict[str, Any] = {
        "query_id": grounded.query_id,
        "status": grounded.status,
        "answer": grounded.answer,
        "confidence": grounded.confidence.view(),
        "sources": [source_view(n, hit) for n, hit in grounded.sources],
        "citations": views.citations_view(outcome, unit) if grounded.answer else [],
        "metadata": metadata,
        "error_message": grounded.error_message,
    }
    if grounded.warnings:
        response["warnings"] = list(grounded.warnings)
    return response


def source_view(n: int, hit: SearchHit) -> dict[str, Any]:
    """A cited passage of a grounded answer: [n] in the answer is this source."""
    result = views.result_view(hit)
    metadata = {**result["metadata"], "source_type": hit.source_type, "source_id": hit.source_id}
    return {
        "chunk_id": result["id"],
        "citation_index": n,
        "relevance_score": result["similarity"],
        "excerpt": views.excerpt(hit.chunk.content),
        "collection": hit.collection,
        "metadata": metadata,
    }


sse_event = views.translation("answer", render)
"""`results` (the passages [n] refers to), `answer` deltas (and `reset`), then `done`
with the whole AgentResponse."""
EVENTS = events_schema("results", "answer", "reset", "done")
"""A stream's events; one that failed after it began ends with `done` of status error."""


ROUTE: dict[str, Any] = {
    "endpoint": answer,
    "summary": "A grounded answer with numbered sources and confidence.",
    "body": ANSWER,
    "response": RESPONSE,
    "events": EVENTS,
}
