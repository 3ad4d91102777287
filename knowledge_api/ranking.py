"""A request's own ranking (`ranking` of the search routes) and paging (`offset`):
parsed once into `models.Ranking`, which the service and the stores' shared hybrid search
read, each unset choice left to the settings.

`{"fusion": "convex"|"rrf", "vector_weight": 0-1, "prf": bool, "recency": {"field":
"created_at", "half_life_days": N}, "rerank": bool}`, every key optional. Recency
multiplies a hit's relevance (on the scale of similarities, see `by_recency`) by 0.5
for every half-life of age of its date: the stored document's `created_at` or
`updated_at`, or a metadata key holding an ISO 8601 date.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.filters import millis_of
from knowledge_api.models import Ranking, Recency, SearchHit

FUSIONS = ("convex", "rrf")
MAX_OFFSET = 200
"""Results a request may skip (`offset`)."""
MAX_PAGE = 100
"""The longest page of any route (retrieve's top_k)."""
DEEPEST = MAX_OFFSET + MAX_PAGE + 1
"""Candidates of the search deeper pages are cut from: the last place a page may reach,
and one more to say whether another page follows."""
MAX_HALF_LIFE_DAYS = 36500.0
DAY_MS = 86_400_000
OWN_DATES = ("created_at", "updated_at")


def parse(value: Any, path: str = "ranking") -> Ranking:
    """The ranking an object asks for; a 400 naming the key inside it (`ranking.fusion`)
    and the rule otherwise. A key present is a choice: null is no value."""
    body = validation.require_object(value, path)
    unknown = sorted(set(body) - {"fusion", "vector_weight", "prf", "recency", "rerank"})
    if unknown:
        raise InvalidRequest(
            f"{path}.{unknown[0]}",
            "is not a ranking choice: fusion, vector_weight, prf, recency or rerank",
        )
    fusion = body.get("fusion")
    if "fusion" in body and fusion not in FUSIONS:
        raise InvalidRequest(f"{path}.fusion", "must be convex or rrf")
    weight = body.get("vector_weight")
    if "vector_weight" in body and not is_number(weight, 0, 1):
        raise InvalidRequest(f"{path}.vector_weight", "must be a number from 0 to 1")
    return Ranking(
        fusion,
        None if weight is None else float(weight),
        switch(body, "prf", path),
        recency(body["recency"], f"{path}.recency") if "recency" in body else None,
        switch(body, "rerank", path),
    )


def is_number(value: Any, low: float, high: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and low <= value <= high


def switch(body: dict[str, Any], name: str, path: str) -> bool | None:
    value = body.get(name)
    if name in body and not isinstance(value, bool):
        raise InvalidRequest(f"{path}.{name}", "must be true or false")
    return value


def recency(value: Any, path: str) -> Recency:
    body = validation.require_object(value, path)
    unknown = sorted(set(body) - {"field", "half_life_days"})
    if unknown:
        raise InvalidRequest(f"{path}.{unknown[0]}", "is not known: field or half_life_days")
    field = body.get("field", "created_at")
    if not validation.plain_key(field):
        raise InvalidRequest(
            f"{path}.field", "must be created_at, updated_at or a metadata key holding dates"
        )
    half_life = body.get("half_life_days")
    if (
        not isinstance(half_life, int | float)
        or not is_number(half_life, 0, MAX_HALF_LIFE_DAYS)
        or half_life == 0
    ):
        raise InvalidRequest(
            f"{path}.half_life_days",
            f"must be a number of days above 0 and at most {MAX_HALF_LIFE_DAYS:g}",
        )
    return Recency(field, float(half_life))


def schema() -> dict[str, Any]:
    """The JSON Schema of `ranking`, with the limits `parse` checks."""
    return {
        "type": "object",
        "description": "This request's own ranking; an absent choice takes the service's "
        "setting, and no recency unless asked.",
        "properties": {
            "fusion": {"type": "string", "enum": list(FUSIONS)},
            "vector_weight": {"type": "number", "minimum": 0, "maximum": 1},
            "prf": {"type": "boolean", "description": "The pseudo-relevance feedback round."},
            "recency": {
                "type": "object",
                "properties": {
                    "field": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": validation.KEY_MAX_LENGTH,
                        "pattern": validation.KEY_PATTERN,
                        "default": "created_at",
                        "description": "created_at, updated_at or a metadata key of dates.",
                    },
                    "half_life_days": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": MAX_HALF_LIFE_DAYS,
                    },
                },
                "required": ["half_life_days"],
                "additionalProperties": False,
            },
            "rerank": {
                "type": "boolean",
                "description": "Rerank (true needs KNOWLEDGE_RERANKER).",
            },
        },
        "additionalProperties": False,
    }


def next_offset(offset: int, limit: int, more: bool) -> int | None:
    """Where the next page starts, when results follow and a request may skip to them."""
    end = offset + limit
    return end if more and end <= MAX_OFFSET else None


def as_json(ranking: Ranking) -> dict[str, Any]:
    """The choices a request made (a record of what it asked)."""
    asked: dict[str, Any] = {
        name: getattr(ranking, name)
        for name in ("fusion", "vector_weight", "prf", "rerank")
        if getattr(ranking, name) is not None
    }
    if ranking.recency is not None:
        asked["recency"] = recency_json(ranking.recency)
    return asked


def recency_json(chosen: Recency) -> dict[str, Any]:
    return {"field": chosen.field, "half_life_days": chosen.half_life_days}


def dated_millis(hit: SearchHit, field: str) -> int | None:
    """The instant of `hit`'s date `field`, or None when it has none."""
    if field in OWN_DATES:
        value: Any = getattr(hit, field)
    else:
        value = hit.metadata.get(field)
    return millis_of(value) if isinstance(value, str) and value else None


def by_recency(
    hits: Sequence[SearchHit], chosen: Recency, now_ms: int | None = None
) -> tuple[list[SearchHit], int]:
    """`hits` in the order of their relevance times 0.5 ** (age / half-life), and how
    many have no such date. Relevance is on the scale of similarities (the cosine, or
    the keyword score relative to the best without a vector), whatever ranked the hits:
    the hit in place i takes the i-th best similarity, so the order fusion, the
    feedback round or a reranker decided stands, and a half-life weighs the same
    against it. (Rank fusion's scores lie a few percent apart: multiplied, any age
    would outweigh them.) A hit without the date counts as old as the oldest dated one;
    a date in the future as now. Equal scores keep the ranked order."""
    if not hits:
        return [], 0
    now = int(time.time() * 1000) if now_ms is None else now_ms
    relevance = sorted((hit.similarity for hit in hits), reverse=True)
    dates = [dated_millis(hit, chosen.field) for hit in hits]
    known = [at for at in dates if at is not None]
    oldest = min(known, default=now)
    half_life = chosen.half_life_days * DAY_MS
    weighted = [
        (score * 0.5 ** (max(now - (oldest if at is None else at), 0) / half_life), i)
        for i, (score, at) in enumerate(zip(relevance, dates, strict=True))
    ]
    order = sorted(weighted, key=lambda pair: (-pair[0], pair[1]))
    return [replace(hits[i], score=score) for score, i in order], len(hits) - len(known)
