"""Smart prefetching: answer a query's likely follow-ups before they are asked.

Follow-ups are predicted from two places: what users asked next after the same query
(a bounded in-memory log of query successions, per client), and the query's own
sources (the titles and sections of its best hits, the links a reader clicks next).
Warming runs in the background under a budget: at most `per_minute` prefetches a
minute and `concurrent` at once, and none starts while a live query is being
answered, so prefetching only ever uses idle time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from knowledge_api.models import SearchHit, normalize_query

log = logging.getLogger("knowledge_api.prefetch")
QUERIES_KEPT = 10_000
"""Queries whose followers the log remembers (least recently asked forgotten first)."""
FOLLOWERS_KEPT = 8
"""Followers remembered per query (the most frequent)."""
CLIENTS_KEPT = 10_000
"""Clients whose last query is remembered."""
SOURCE_HITS = 2
"""Best hits whose titles and sections are predicted as follow-ups."""
Warm = Callable[[str], Awaitable[object]]


class Successions:
    """What was asked after what: per query, a count of the queries that followed it
    from the same client. Bounded in queries, followers and clients."""

    def __init__(self) -> None:
        self.followers: OrderedDict[str, Counter[str]] = OrderedDict()
        self.last: OrderedDict[str, str] = OrderedDict()

    def record(self, client: str, query: str) -> None:
        before = self.last.pop(client, None)
        self.last[client] = query
        if len(self.last) > CLIENTS_KEPT:
            self.last.popitem(last=False)
        if before is None or before == query:
            return
        counts = self.followers.pop(before, None) or Counter()
        counts[query] += 1
        if len(counts) > FOLLOWERS_KEPT:
            counts = Counter(dict(counts.most_common(FOLLOWERS_KEPT)))
        self.followers[before] = counts
        if len(self.followers) > QUERIES_KEPT:
            self.followers.popitem(last=False)

    def next_of(self, query: str) -> list[str]:
        """The queries that followed `query`, most frequent first."""
        counts = self.followers.get(query)
        return [q for q, _ in counts.most_common()] if counts else []


def from_sources(hits: Sequence[SearchHit]) -> list[str]:
    """The titles and sections of the best hits, as follow-up queries."""
    found: list[str] = []
    for hit in hits[:SOURCE_HITS]:
        for text in (hit.chunk.section, hit.chunk.title):
            if text.strip():
                found.append(normalize_query(text))
    return found


@dataclass(eq=False)
class Prefetcher:
    enabled: bool
    per_minute: int
    concurrent: int
    followups: int
    clock: Callable[[], float] = time.monotonic
    log: Successions = field(default_factory=Successions, init=False)
    live: int = field(default=0, init=False)
    running: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    started_at: list[float] = field(default_factory=list, init=False)
    counts: Counter[str] = field(
        default_factory=lambda: Counter({"started": 0, "warmed": 0, "over_budget": 0, "busy": 0}),
        init=False,
    )

    @classmethod
    def from_settings(cls, settings: Any) -> Prefetcher:
        return cls(
            settings.prefetch == "on",
            settings.prefetch_per_minute,
            settings.prefetch_concurrent,
            settings.prefetch_followups,
        )

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Marks a live query: no prefetch starts while one is being answered."""
        self.live += 1
        try:
            yield
        finally:
            self.live -= 1

    def predict(self, query: str, hits: Sequence[SearchHit]) -> list[str]:
        """Likely follow-ups of `query`: what followed it before, then its sources'
        titles and sections; at most `followups`, never the query itself."""
        asked = normalize_query(query)
        ranked = dict.fromkeys(self.log.next_of(asked) + from_sources(hits))
        ranked.pop(asked, None)
        return list(ranked)[: self.followups]

    def after(self, client: str, query: str, hits: Sequence[SearchHit], warm: Warm) -> int:
        """Record the query, then warm its predicted follow-ups in the background, one
        after another, most likely first. How many were handed to the background:
        none while `concurrent` such runs are under way (dropped, not queued)."""
        if not self.enabled:
            return 0
        self.log.record(client, normalize_query(query))
        followups = self.predict(query, hits)
        if not followups:
            return 0
        if len(self.running) >= self.concurrent:
            self.counts["over_budget"] += len(followups)
            return 0
        task = asyncio.create_task(self._prefetch(followups, warm))
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return len(followups)

    def _within_minute(self) -> bool:
        now = self.clock()
        self.started_at = [t for t in self.started_at if t > now - 60.0]
        if len(self.started_at) >= self.per_minute:
            return False
        self.started_at.append(now)
        return True

    async def _prefetch(self, followups: Sequence[str], warm: Warm) -> None:
        await asyncio.sleep(0)  # let the live response go out first
        for query in followups:
            if self.live:
                self.counts["busy"] += 1
                continue
            if not self._within_minute():
                self.counts["over_budget"] += 1
                continue
            self.counts["started"] += 1
            try:
                await warm(query)
            except Exception as e:  # a failed prefetch only means a later miss
                log.warning("prefetching %r failed: %s", query, e)
                continue
            self.counts["warmed"] += 1

    async def drain(self) -> None:
        """Wait for the prefetches under way (tests, replays)."""
        while self.running:
            await asyncio.gather(*self.running, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)

    def report(self) -> dict[str, Any]:
        """The /health line."""
        return {"status": "ok", "queries_logged": len(self.log.followers), **self.counts}
