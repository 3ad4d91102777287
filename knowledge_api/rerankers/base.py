"""The Reranker protocol: a second look at the best fused hits, in one place for every
use case (the service's retrieval step).

A reranker orders the first `top` hits; the hits after them keep their fused order.
It never fails a request: when its backend cannot rank (no key, no model, an error, a
timeout, an answer that is not a ranking) the fused order stands and the result
carries a warning, which keeps it out of the response cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from knowledge_api.models import SearchHit
from knowledge_api.registry import FromSettings

log = logging.getLogger("knowledge_api.rerankers")


@dataclass(frozen=True, slots=True)
class Reranked:
    hits: list[SearchHit]
    warnings: list[str] = field(default_factory=list)
    ran: bool = True
    """False when the fused order stood because the reranker could not rank."""


class RerankError(Exception):
    """A backend could not rank these hits; the fused order stands."""


class Reranker(Protocol):
    name: str

    async def open(self) -> None:
        """Load the model or open the client, once, when the service starts."""

    async def close(self) -> None: ...

    async def rerank(self, query: str, hits: Sequence[SearchHit], top: int) -> Reranked:
        """The first `top` hits in the reranker's order, then the others as they came."""
        ...

    def health(self) -> dict[str, Any]: ...


class NoReranker(FromSettings):
    """KNOWLEDGE_RERANKER=none: the fused order is the final one."""

    name = "none"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def rerank(self, query: str, hits: Sequence[SearchHit], top: int) -> Reranked:
        return Reranked(list(hits))

    def health(self) -> dict[str, Any]:
        return {"name": self.name, "status": "ok"}


class OrderingReranker(FromSettings):
    """What the backends share: subclasses implement `order` (and may say why they are
    `unavailable`); this class cuts the head, applies the order, turns any failure into
    the fused order plus a warning, and remembers the last failure for /health."""

    name = "ordering"

    def __init__(self) -> None:
        self.error = ""
        self.failed_at = ""
        self.failures = 0
        """In a row; a ranking that succeeds starts again from 0."""

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def unavailable(self) -> str | None:
        """Why this reranker cannot rank now (no key, model not loaded), or None."""
        return None

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        """0-based positions in `hits`, best first, each at most once. Positions left
        out follow the listed ones in their fused order. Raises on failure."""
        raise NotImplementedError

    async def rerank(self, query: str, hits: Sequence[SearchHit], top: int) -> Reranked:
        hits = list(hits)
        head, tail = hits[:top], hits[top:]
        if len(head) < 2:
            return Reranked(hits)
        if reason := self.unavailable():
            warning = f"reranker {self.name} unavailable ({reason}): fused order"
            return Reranked(hits, [warning], ran=False)
        try:
            order = checked_order(await self.order(query, head), len(head))
        except Exception as e:
            why = describe(e)
            self.failed(why)
            warning = f"reranking by {self.name} failed ({why}): fused order"
            return Reranked(hits, [warning], ran=False)
        self.error, self.failures = "", 0
        return Reranked(reordered(head, order) + tail)

    def failed(self, why: str) -> None:
        log.warning("reranking by %s failed: %s", self.name, why)
        self.error = why
        self.failed_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.failures += 1

    def health(self) -> dict[str, Any]:
        reason = self.unavailable()
        report: dict[str, Any] = {"name": self.name, **self.details()}
        if reason:
            report.update(status="unavailable", error=reason)
        elif self.error:
            report.update(status="failing", error=self.error, failed_at=self.failed_at)
            report["consecutive_failures"] = self.failures
        else:
            report["status"] = "ok"
        return report

    def details(self) -> dict[str, Any]:
        """What /health says of this backend besides its status (its model, say)."""
        return {}


def checked_order(order: Sequence[int], count: int) -> list[int]:
    """`order` when it is positions 0..count-1, each at most once, and not empty."""
    if not order:
        raise RerankError("the ranking was empty")
    if any(type(i) is not int or not 0 <= i < count for i in order):
        raise RerankError(f"the ranking names a passage that does not exist: {list(order)}")
    if len(set(order)) != len(order):
        raise RerankError(f"the ranking names a passage twice: {list(order)}")
    return list(order)


def reordered(hits: Sequence[SearchHit], order: Sequence[int]) -> list[SearchHit]:
    listed = set(order)
    return [hits[i] for i in order] + [hit for i, hit in enumerate(hits) if i not in listed]


def by_score(scores: Sequence[float]) -> list[int]:
    """Positions by descending score; equal scores keep the fused order."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def passage_text(hit: SearchHit) -> str:
    """What a reranker reads of a hit: its heading path and its content."""
    return hit.chunk.embedded_text


def describe(error: Exception) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, RerankError):
        return str(error)[:300]
    return f"{type(error).__name__}: {error}"[:300]
