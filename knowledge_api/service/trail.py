"""The service's trail: a record of every write (the audit trail), and of every query
or answer computed with the ranking that ran, so a reader's rating of it can be judged
later."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.filters import as_json
from knowledge_api.ledger import Actor, Answered, AuditEntry, AuditQuery, stamp
from knowledge_api.models import Ranking, SearchHit, SearchParams
from knowledge_api.principals import fingerprint
from knowledge_api.ranking import recency_json
from knowledge_api.service.engine import Engine

log = logging.getLogger("knowledge_api")

LINGER_S = 0.05
"""How long the answers computed after the first one of a batch join it before it is
written: one write for the ones of a twentieth of a second, rather than one a request
(a rating of one waits for it; so does shutdown)."""


class Trail:
    """The audit trail and the record of answers, over the engine's logs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._recording: dict[str, asyncio.Task[None]] = {}
        """Answers whose record is being written, by query_id."""
        self._pending: list[Answered] = []
        """Answers computed since the last batch of records was sent off."""
        self._batch: asyncio.Task[None] | None = None
        """The task that will write the pending answers (not begun yet)."""
        self._next_prune = 0.0

    async def audit(
        self, actor: Actor, action: str, collection: str | None, changed: dict[str, Any]
    ) -> None:
        """Append one record of a write to the audit trail: what every door (a route, an
        MCP tool, a command, the KB sync) calls once it wrote, with what changed (ids
        and counts, see `changes`). A trail that cannot be written is logged as an
        error; the write it records stands. Records older than KNOWLEDGE_AUDIT_DAYS are
        forgotten, checked at most hourly."""
        entry = AuditEntry(actor.name, action, collection, changed, actor.request_id, stamp())
        try:
            await self.engine.audit_log.append(entry)
            if self.engine.settings.audit_days and time.monotonic() >= self._next_prune:
                self._next_prune = time.monotonic() + 3600
                cutoff = time.time() - self.engine.settings.audit_days * 86400
                await self.engine.audit_log.prune(stamp(datetime.fromtimestamp(cutoff, UTC)))
        except KnowledgeAPIError as e:
            log.error("audit record lost: %s %s by %s: %s", action, changed, actor.name, e.message)

    async def audit_page(self, query: AuditQuery) -> list[AuditEntry]:
        """A page of the trail, newest first."""
        return await self.engine.audit_log.page(query)

    async def answered(
        self,
        kind: str,
        params: SearchParams,
        hits: Sequence[SearchHit],
        cited: Sequence[int] = (),
    ) -> str:
        """A new query_id for a query or answer just computed, recorded with the query,
        the ranking that ran and its results, so a rating of it can be judged later
        (`knowledge-api eval --feedback`). A record that cannot be written is logged;
        the answer is served all the same."""
        query_id = str(uuid.uuid4())
        answered = Answered(
            query_id,
            kind,
            ",".join(params.searched),  # several searched as one: "a,b"
            params.query,
            self.ranking(params),
            [
                {
                    "id": hit.chunk.id,
                    "document_id": hit.document_id,
                    "source_type": hit.source_type,
                    "source_id": hit.source_id,
                }
                for hit in hits
            ],
            list(cited),
            stamp(),  # the answer's moment, not its batch's write, up to LINGER_S later
        )
        # written beside the answer, not before it: a miss does not wait for the write;
        # the answers computed within LINGER_S of each other are written together
        batch = self._batch
        if batch is None or batch.done() or batch.get_loop() is not asyncio.get_running_loop():
            # (done: cancelled before it began; another loop's: that loop was closed)
            self._batch = batch = asyncio.create_task(self._record())
        self._pending.append(answered)
        self._recording[query_id] = batch
        return query_id

    def ranking(self, params: SearchParams) -> dict[str, Any]:
        """What ranked a query: the request's own choices and the settings that order
        results, so a rating says which ranking it judged."""
        reranking = self.engine.reranker.name != "none" and params.ranking.rerank is not False
        ran = self.ranking_ran(params.ranking, reranking, params.query)
        return {
            "embedder": self.engine.embedder.name,
            **ran,
            "feedback_docs": self.engine.tuning.adjusted(params.ranking).feedback_docs,
            "limit": params.limit,
            "offset": params.offset,
            "threshold": params.threshold,
            "sources": list(params.sources) if params.sources else None,
            "filters": as_json(params.filters),
            "principals": fingerprint(params.principals),
        }

    def ranking_ran(self, ranking: Ranking, reranking: bool, query: str = "") -> dict[str, Any]:
        """The ranking a request's choices and the settings make, as responses report
        it: fusion, vector_weight, prf (whether the feedback round runs), recency (or
        None) and the reranker that ran ("none": no reranking)."""
        tuning = self.engine.tuning.adjusted(ranking, query)
        return {
            "fusion": tuning.fusion,
            "vector_weight": tuning.vector_weight,
            "prf": tuning.feedback_docs > 0,
            "recency": None if ranking.recency is None else recency_json(ranking.recency),
            "reranker": self.engine.reranker.name if reranking else "none",
        }

    async def _record(self) -> None:
        """Write the answers pending LINGER_S after the first, in one statement where
        the log can."""
        await asyncio.sleep(LINGER_S)
        batch, self._pending, self._batch = self._pending, [], None
        try:
            await self.engine.feedback_log.answered_many(batch)
        except KnowledgeAPIError as e:
            for answered in batch:
                log.error(
                    "answer %s not recorded, its ratings will not resolve: %s",
                    answered.query_id,
                    e.message,
                )
        finally:
            for answered in batch:
                self._recording.pop(answered.query_id, None)

    async def find_answered(self, query_id: str) -> Answered | None:
        """A computed query or answer by its query_id (once its record is written)."""
        if (recording := self._recording.get(query_id)) is not None:
            await asyncio.shield(recording)
        return await self.engine.feedback_log.find(query_id)

    async def recorded(self) -> None:
        """Wait until every answer computed so far is recorded."""
        await asyncio.gather(*self._recording.values())
