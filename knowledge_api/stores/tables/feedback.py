"""Answers as their readers rated them: what the store keeps so a rating can be judged.

When a query or an answer is computed (a tier-1 miss), its `query_id` is recorded with
the query, the ranking that ran and the ids of its results in order (`Answered`); a hit
serves the same value, with the same id, and writes nothing. A reader's rating of it
(`Rating`: up or down, a comment, the citations it found right, the source it expected)
refers to that id; a key rates a query once, a later rating of it replacing the key's
earlier one (its id stays, its moment and values are the new ones). Like the API keys
and the audit trail, both live in the Postgres schema with the postgres and supabase
stores (any replica resolves an id) and in the SQLite file otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Protocol

from knowledge_api.errors import BackendConnectionError
from knowledge_api.ledger import Answered, Rating, stamp
from knowledge_api.stores.tables.audit import moment
from knowledge_api.stores.tables.database import SQLiteTables
from knowledge_api.stores.tables.schema import SchemaTables


class FeedbackLog(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def answered_many(self, batch: Sequence[Answered]) -> None:
        """Record the answers of a batch (those computed within the trail's LINGER_S),
        in one write where the log can."""

    async def find(self, query_id: str) -> Answered | None: ...

    async def rate(self, rating: Rating) -> int:
        """Store a rating, replacing the key's earlier rating of the query; its id."""

    async def ratings(
        self, limit: int, before: int | None = None, since: str | None = None
    ) -> list[Rating]:
        """Ratings newest first, older than `before` (an id), at or after `since`."""


class SQLiteFeedback(SQLiteTables):
    SCHEMA = (
        """CREATE TABLE IF NOT EXISTS answered_queries (
            query_id TEXT PRIMARY KEY,
            at TEXT NOT NULL,
            kind TEXT NOT NULL,
            collection TEXT NOT NULL,
            query TEXT NOT NULL,
            ranking TEXT NOT NULL,
            results TEXT NOT NULL,
            cited TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS answer_ratings (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            query_id TEXT NOT NULL,
            rating TEXT NOT NULL,
            key TEXT NOT NULL,
            comment TEXT,
            cited TEXT,
            expected_source TEXT,
            request_id TEXT)""",
        # a key's earlier ratings of a query, kept before one rating per key per query
        # was the rule: the newest stays (once, before the index exists)
        """DELETE FROM answer_ratings
            WHERE NOT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'answer_ratings_once')
              AND id NOT IN (SELECT max(id) FROM answer_ratings GROUP BY query_id, key)""",
        """CREATE UNIQUE INDEX IF NOT EXISTS answer_ratings_once
            ON answer_ratings (query_id, key)""",
    )

    WHAT = "ratings"

    async def answered_many(self, batch: Sequence[Answered]) -> None:
        await self._run_many(
            "INSERT OR IGNORE INTO answered_queries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            lambda: [answered_row(a) for a in batch],
        )

    async def find(self, query_id: str) -> Answered | None:
        rows = await self._run(
            "SELECT query_id, kind, collection, query, ranking, results, cited, at "
            "FROM answered_queries WHERE query_id = ?",
            (query_id,),
        )
        if not rows:
            return None
        qid, kind, collection, query, ranking, results, cited, at = rows[0]
        return Answered(
            qid,
            kind,
            collection,
            query,
            json.loads(ranking),
            json.loads(results),
            json.loads(cited),
            at,
        )

    async def rate(self, rating: Rating) -> int:
        r = rating
        rows = await self._run(
            "INSERT INTO answer_ratings (at, query_id, rating, key, comment, cited, "
            "expected_source, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (query_id, key) DO UPDATE SET at = excluded.at, "
            "rating = excluded.rating, comment = excluded.comment, cited = excluded.cited, "
            "expected_source = excluded.expected_source, request_id = excluded.request_id "
            "RETURNING id",
            (
                r.at or stamp(),
                r.query_id,
                r.rating,
                r.key,
                r.comment,
                None if r.cited is None else json.dumps(r.cited),
                r.expected_source,
                r.request_id,
            ),
        )
        return int(rows[0][0])

    async def ratings(
        self, limit: int, before: int | None = None, since: str | None = None
    ) -> list[Rating]:
        conditions: list[str] = []
        params: list[Any] = []
        if before is not None:
            conditions.append("id < ?")
            params.append(before)
        if since is not None:
            conditions.append("at >= ?")
            params.append(since)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = await self._run(
            "SELECT id, at, query_id, rating, key, comment, cited, expected_source, request_id "
            f"FROM answer_ratings{where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            Rating(
                query_id,
                rating,
                key,
                comment,
                None if cited is None else json.loads(cited),
                expected,
                request_id,
                at,
                id_,
            )
            for id_, at, query_id, rating, key, comment, cited, expected, request_id in rows
        ]


class SiamFeedback(SchemaTables):
    """Answers and ratings in the Postgres schema (postgres and supabase stores)."""

    async def answered_many(self, batch: Sequence[Answered]) -> None:
        for answered in batch:  # one call each: the schema records one answer a call
            values = asdict(answered)
            values.pop("at")
            await self.store.call(
                "knowledge_answered_record",
                {f"answer_{name}": value for name, value in values.items()},
                BackendConnectionError,
            )

    async def find(self, query_id: str) -> Answered | None:
        rows = await self.store.call(
            "knowledge_answered_find", {"answer_query_id": query_id}, BackendConnectionError
        )
        if not rows:
            return None
        row = rows[0]
        return Answered(
            str(row["query_id"]),
            row["kind"],
            row["collection"],
            row["query"],
            loaded(row["ranking"]),
            loaded(row["results"]),
            loaded(row["cited"]),
            at_of(row["at"]),
        )

    async def rate(self, rating: Rating) -> int:
        rows = await self.store.call(
            "knowledge_rating_add",
            {
                "rating_query_id": rating.query_id,
                "rating_value": rating.rating,
                "rating_key": rating.key,
                "rating_comment": rating.comment,
                "rating_cited": rating.cited,
                "rating_expected_source": rating.expected_source,
                "rating_request_id": rating.request_id,
            },
            BackendConnectionError,
        )
        first = rows[0]
        return int(first["id"] if isinstance(first, dict) else first)

    async def ratings(
        self, limit: int, before: int | None = None, since: str | None = None
    ) -> list[Rating]:
        rows = await self.store.call(
            "knowledge_ratings_page",
            {"page_size": limit, "before_id": before, "since": since},
            BackendConnectionError,
        )
        return [
            Rating(
                str(row["query_id"]),
                row["rating"],
                row["key"],
                row["comment"],
                None if row["cited"] is None else list(loaded(row["cited"])),
                row["expected_source"],
                row["request_id"],
                at_of(row["at"]),
                int(row["id"]),
            )
            for row in rows
        ]


def answered_row(a: Answered) -> tuple[str, ...]:
    """An answer as a row of `answered_queries`."""
    return (
        a.query_id,
        a.at or stamp(),
        a.kind,
        a.collection,
        a.query,
        json.dumps(a.ranking),
        json.dumps(a.results),
        json.dumps(a.cited),
    )


def loaded(value: Any) -> Any:
    """A jsonb value as asyncpg (decoded) or PostgREST (decoded, or text) gives it."""
    return json.loads(value) if isinstance(value, str) else value


def at_of(value: Any) -> str:
    return stamp(moment(value) if isinstance(value, str) else value)
