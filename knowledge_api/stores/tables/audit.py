"""The audit trail as the stores keep it: one record per write, through any door.

A record says when, who (an API key's name, `cli:<user>` on the command line, `kb-sync`
for the periodic sync), what (the route's method and template, the MCP tool or the
command), the collection, what changed (ids and counts) and the request id. Records
live beside the API keys (stores/tables/keys.py): a table of the SQLite file (the sqlite store's
own, and beside Chroma and Qdrant, or a database other pipelines fill), or of the
Postgres schema (postgres and supabase stores), so every replica appends to one trail
and it survives restarts. Pages are read newest first.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from knowledge_api.errors import BackendConnectionError
from knowledge_api.ledger import AuditEntry, AuditQuery, stamp
from knowledge_api.stores.tables.database import SQLiteTables
from knowledge_api.stores.tables.schema import SchemaTables


class AuditLog(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def append(self, entry: AuditEntry) -> None: ...

    async def page(self, query: AuditQuery) -> list[AuditEntry]: ...

    async def prune(self, older_than: str) -> int:
        """Forget the entries before `older_than`; how many."""


class SQLiteAudit(SQLiteTables):
    """The trail in a table of a SQLite file."""

    SCHEMA = (
        """CREATE TABLE IF NOT EXISTS audit_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            collection TEXT,
            changes TEXT NOT NULL,
            request_id TEXT)""",
        "CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at)",
    )

    WHAT = "audit trail"

    async def append(self, entry: AuditEntry) -> None:
        await self._run(
            "INSERT INTO audit_log (at, actor, action, collection, changes, request_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                entry.at or stamp(),
                entry.actor,
                entry.action,
                entry.collection,
                json.dumps(entry.changes),
                entry.request_id,
            ),
        )

    async def page(self, query: AuditQuery) -> list[AuditEntry]:
        conditions = []
        params: list[Any] = []
        for sql, value in (
            ("id < ?", query.before),
            ("actor = ?", query.actor),
            ("collection = ?", query.collection),
            ("at >= ?", query.since),
            ("at < ?", query.until),
        ):
            if value is not None:
                conditions.append(sql)
                params.append(value)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = await self._run(
            "SELECT id, at, actor, action, collection, changes, request_id FROM audit_log"
            f"{where} ORDER BY id DESC LIMIT ?",
            (*params, query.limit),
        )
        return [
            AuditEntry(actor, action, collection, json.loads(changes), request_id, at, id_)
            for id_, at, actor, action, collection, changes, request_id in rows
        ]

    async def prune(self, older_than: str) -> int:
        return len(await self._run("DELETE FROM audit_log WHERE at < ? RETURNING 1", (older_than,)))


class SiamAudit(SchemaTables):
    """The trail in the Postgres schema, through the store's own primitives (a direct
    connection for postgres, PostgREST for supabase)."""

    async def append(self, entry: AuditEntry) -> None:
        await self.store.call(
            "knowledge_audit_append",
            {
                "entry_actor": entry.actor,
                "entry_action": entry.action,
                "entry_collection": entry.collection,
                "entry_changes": entry.changes,
                "entry_request_id": entry.request_id,
            },
            BackendConnectionError,
        )

    async def page(self, query: AuditQuery) -> list[AuditEntry]:
        rows = await self.store.call(
            "knowledge_audit_page",
            {
                "page_size": query.limit,
                "before_id": query.before,
                "by_actor": query.actor,
                "in_collection": query.collection,
                "since": query.since,
                "until": query.until,
            },
            BackendConnectionError,
        )
        return [
            AuditEntry(
                row["actor"],
                row["action"],
                row["collection"],
                row["changes"] if isinstance(row["changes"], dict) else json.loads(row["changes"]),
                row["request_id"],
                stamp(moment(row["at"]) if isinstance(row["at"], str) else row["at"]),
                int(row["id"]),
            )
            for row in rows
        ]

    async def prune(self, older_than: str) -> int:
        rows = await self.store.call(
            "knowledge_audit_prune", {"older_than": older_than}, BackendConnectionError
        )
        first = rows[0] if rows else 0
        return int(first["pruned"] if isinstance(first, dict) else first)


def moment(text: str | None) -> datetime | None:
    """A stamp (or any ISO 8601 time) as a datetime, UTC when it names no zone."""
    if text is None:
        return None
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
