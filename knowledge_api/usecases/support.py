"""Support retrieval: `retrieve_knowledge(intent, message, metadata)` for the support
sidecar, over the KB articles synced into the support collection.

It never raises and never waits past its budget (KNOWLEDGE_SUPPORT_TIMEOUT_MS): bad
input, a failing store or model and a timeout all give the fallback answer, with the
reason in `gaps`.

Scoring. The message (with the intent and product in front, so both retrievers see
them) is searched in hybrid mode; each article counts once, by its best passage. Its
`relevance_score` is that passage's cosine similarity plus KNOWLEDGE_SUPPORT_INTENT_BOOST
when the article is tagged with the intent, plus KNOWLEDGE_SUPPORT_DEVICE_BOOST when it
is tagged with the product (capped at 1). An article tagged only with other devices
than the product is left out. At most 3 sources scoring >= KNOWLEDGE_SUPPORT_MIN_SCORE
are consulted.

Coverage:
- high: a source is tagged with the intent and the product (each when given) and
  scores >= KNOWLEDGE_SUPPORT_HIGH_SCORE;
- medium: there are sources, but none of them is that specific and strong;
- low: no source, but the best article scores >= KNOWLEDGE_SUPPORT_RELATED_SCORE;
- none: nothing related, or retrieval failed.
Gaps name what is missing: no article for the product, none for the intent, none
relevant enough.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import EmbeddingError, InvalidRequest, KnowledgeAPIError
from knowledge_api.filters import Node
from knowledge_api.filters import parse as parse_filter
from knowledge_api.models import SearchFilters, SearchHit
from knowledge_api.principals import scoped
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings

log = logging.getLogger("knowledge_api.support")
Body = dict[str, Any]

UNAVAILABLE = "Knowledge retrieval unavailable"
MAX_SOURCES = 3
TITLE_MAX, URL_MAX, EXCERPT_MAX = 200, 500, 150
MESSAGE_MAX = 2000
CANDIDATE_PASSAGES = 20


def fallback(reason: str) -> Body:
    """The answer when retrieval cannot run: no sources, coverage none, the reason."""
    return {"sources_consulted": [], "coverage": "none", "gaps": [reason], "retrieval_time_ms": 0}


@dataclass(frozen=True, slots=True)
class SupportRequest:
    intent: str
    message: str
    product: str = ""
    where: Node | None = None
    principals: frozenset[str] | None = None
    """What the caller may read (knowledge_api.principals); None: everything."""

    @classmethod
    def from_values(
        cls, intent: Any, message: Any, metadata: Any, where: Any = None
    ) -> SupportRequest:
        given = {"intent": intent, "message": message}
        values = {name: value for name, value in given.items() if value is not None}
        meta = validation.require_object({} if metadata is None else metadata, "metadata")
        product = meta.get("product") or ""
        if not isinstance(product, str) or len(product) > 200:
            raise InvalidRequest("metadata.product", "must be a string of at most 200 characters")
        return cls(
            intent=validation.text(values, "intent", max_length=200, default="").strip(),
            message=validation.text(values, "message", max_length=MESSAGE_MAX).strip(),
            product=product.strip(),
            where=None if where is None else parse_filter(where),
        )

    @property
    def query(self) -> str:
        topic = " ".join(part for part in (self.product, label(self.intent)) if part)
        return f"{topic}: {self.message}" if topic else self.message


@dataclass(frozen=True, slots=True)
class Scored:
    hit: SearchHit
    score: float
    intent_match: bool
    device_match: bool


# -- the answer -------------------------------------------------------------------------


async def retrieve(
    service: KnowledgeService,
    intent: Any,
    message: Any,
    metadata: Any,
    where: Any = None,
    principals: frozenset[str] | None = None,
) -> Body:
    """retrieve_knowledge on a running service (`where`: a filter of the filter
    language, knowledge_api.filters), of the articles `principals` may read (None:
    all); never raises."""
    try:
        request = SupportRequest.from_values(intent, message, metadata, where)
    except KnowledgeAPIError as e:
        return invalid(e)
    request = replace(request, principals=principals)
    return await answer(service, request)


def invalid(error: KnowledgeAPIError) -> Body:
    return fallback(f"Invalid request: {error.message}")


async def answer(service: KnowledgeService, request: SupportRequest) -> Body:
    started = time.perf_counter()
    budget_ms = service.settings.support_timeout_ms
    try:
        body = await asyncio.wait_for(consult(service, request), budget_ms / 1000)
    except TimeoutError:
        return fallback(f"{UNAVAILABLE}: timed out after {budget_ms:g} ms")
    except KnowledgeAPIError as e:
        return fallback(f"{UNAVAILABLE}: {e.message}")
    except Exception:
        log.exception("support retrieval failed unexpectedly")
        return fallback(f"{UNAVAILABLE}: unexpected error (logged)")
    body["retrieval_time_ms"] = max(1, math.ceil((time.perf_counter() - started) * 1000))
    return body


async def consult(service: KnowledgeService, request: SupportRequest) -> Body:
    settings = service.settings
    # not reranked: articles are ranked below by their own relevance score (similarity
    # and tag boosts), so a reranker's order would be dropped, and its latency would
    # eat the KNOWLEDGE_SUPPORT_TIMEOUT_MS budget
    found = await service.retrieve(
        request.query,
        CANDIDATE_PASSAGES,
        scoped(
            SearchFilters(where=request.where, collection=settings.support_collection),
            request.principals,
        ),
        rerank=False,
    )
    if found.vector is None:
        raise EmbeddingError("the embedding model is not available")
    ranked = rank_articles(found.hits, request, settings)
    sources = [c for c in ranked if c.score >= settings.support_min_score][:MAX_SOURCES]
    coverage = coverage_of(request, sources, ranked, settings)
    gaps = gaps_of(request, sources, ranked, settings)
    known = await service.collections(request.principals) if not found.hits else {}
    if not found.hits and settings.support_collection not in known:
        gaps = ["No KB articles are indexed yet (run `knowledge-api sync`)"]
    return {
        "sources_consulted": [await source_view(service, c) for c in sources],
        "coverage": coverage,
        "gaps": gaps,
    }


def rank_articles(
    hits: Sequence[SearchHit], request: SupportRequest, settings: Settings
) -> list[Scored]:
    """One entry per article (its best passage), boosted, other devices left out."""
    best: dict[str, SearchHit] = {}
    for hit in hits:
        if hit.document_id not in best or hit.similarity > best[hit.document_id].similarity:
            best[hit.document_id] = hit
    scored = []
    for hit in best.values():
        devices = tags(hit.metadata.get("device"))
        device_match = bool(request.product) and same(request.product) in devices
        if request.product and devices and not device_match:
            continue
        intent_match = bool(request.intent) and same(request.intent) in tags(
            hit.metadata.get("intent")
        )
        score = hit.similarity
        score += settings.support_intent_boost if intent_match else 0.0
        score += settings.support_device_boost if device_match else 0.0
        scored.append(Scored(hit, min(score, 1.0), intent_match, device_match))
    return sorted(scored, key=lambda c: c.score, reverse=True)


def specific(candidate: Scored, request: SupportRequest) -> bool:
    """Tagged with the intent and the product (each one only when given)."""
    return (candidate.intent_match or not request.intent) and (
        candidate.device_match or not request.product
    )


def coverage_of(
    request: SupportRequest, sources: list[Scored], ranked: list[Scored], settings: Settings
) -> str:
    if any(specific(c, request) and c.score >= settings.support_high_score for c in sources):
        return "high"
    if sources:
        return "medium"
    if ranked and ranked[0].score >= settings.support_related_score:
        return "low"
    return "none"


def gaps_of(
    request: SupportRequest, sources: list[Scored], ranked: list[Scored], settings: Settings
) -> list[str]:
    topic = label(request.intent) or "this issue"
    gaps = []
    if not sources:
        best = f" (best {ranked[0].score:.2f})" if ranked else ""
        gaps.append(
            f"No article relevant enough to this message{best}: none scores "
            f">= {settings.support_min_score:g}"
        )
    if request.product and not any(specific(c, request) for c in ranked):
        gaps.append(f"No {request.product} specific article for {topic}")
    if request.intent and not any(c.intent_match for c in ranked):
        gaps.append(f"No article tagged for the intent {request.intent!r}")
    return gaps


async def source_view(service: KnowledgeService, candidate: Scored) -> Body:
    hit = candidate.hit
    url = hit.metadata.get("url")
    return {
        "title": clip(hit.chunk.title or hit.source_id, TITLE_MAX),
        "url": clip(url if isinstance(url, str) and url else hit.source_id, URL_MAX),
        "relevance_score": round(candidate.score, 4),
        "excerpt": clip(" ".join(hit.chunk.content.split()), EXCERPT_MAX),
        "last_updated": await last_updated(service, hit),
    }


async def last_updated(service: KnowledgeService, hit: SearchHit) -> str:
    """The article's own timestamp; a document not synced from the host has its
    update time in the store."""
    stamp = hit.metadata.get("last_updated")
    if isinstance(stamp, str) and stamp:
        return stamp
    doc = await service.document(hit.document_id)
    return doc.updated_at.replace("+00:00", "Z") if doc is not None else ""


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word with an ellipsis when too long."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


def label(intent: str) -> str:
    return " ".join(intent.replace("_", " ").replace("-", " ").split())


def same(value: str) -> str:
    return " ".join(value.casefold().split())


def tags(value: Any) -> set[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return {same(item) for item in items if isinstance(item, str)}
