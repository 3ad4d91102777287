"""The service's trail: a record of every write (the audit trail), and of every query
or answer computed, so a reader's rating of it can be judged later."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from knowledge_api.engine import Engine
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.ledger import Actor, Answered, AuditEntry, AuditQuery, stamp

log = logging.getLogger("knowledge_api")


class Trail(Engine):
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
            await self.audit_log.append(entry)
            if self.settings.audit_days and time.monotonic() >= self._next_prune:
                self._next_prune = time.monotonic() + 3600
                cutoff = time.time() - self.settings.audit_days * 86400
                await self.audit_log.prune(stamp(datetime.fromtimestamp(cutoff, UTC)))
        except KnowledgeAPIError as e:
            log.error("audit record lost: %s %s by %s: %s", action, changed, actor.name, e.message)

    async def audit_page(self, query: AuditQuery) -> list[AuditEntry]:
        """A page of the trail, newest first."""
        return await self.audit_log.page(query)

    async def _record(self, answered: Answered) -> None:
        try:
            await self.feedback_log.answered(answered)
        except KnowledgeAPIError as e:
            log.error(
                "answer %s not recorded, its ratings will not resolve: %s",
                answered.query_id,
                e.message,
            )

    async def find_answered(self, query_id: str) -> Answered | None:
        """A computed query or answer by its query_id (once its record is written)."""
        if (recording := self._recording.get(query_id)) is not None:
            await asyncio.shield(recording)
        return await self.feedback_log.find(query_id)

    async def recorded(self) -> None:
        """Wait until every answer computed so far is recorded."""
        await asyncio.gather(*self._recording.values())
