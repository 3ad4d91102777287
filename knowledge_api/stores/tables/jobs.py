"""Upload jobs as the stores keep them: one record a job, its files and their progress.

Jobs live in the store's own database, like the API keys (stores/tables/keys.py), so every
replica can answer for a job and a restarted service finds the jobs it left: a table of
the SQLite file (`SQLiteJobs`, also used beside Chroma and Qdrant) or of the Postgres
schema (`SiamJobs`, for the postgres and supabase stores). A store serving tables
other pipelines own refuses them (`RefusedJobs`), as it refuses every write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Protocol

from knowledge_api.errors import BackendConnectionError, KnowledgeAPIError
from knowledge_api.ledger import UNFINISHED, Job
from knowledge_api.stores.tables.database import SQLiteTables
from knowledge_api.stores.tables.schema import SchemaTables


def now() -> str:
    """To the microsecond: jobs saved one after the other are told apart by it (two
    writes to a file that waits for no fsync can fall in the same millisecond)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class JobStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def check_writable(self) -> None:
        """StoreReadOnly where the store refuses writes; before an upload is read."""

    async def save(self, job: Job) -> None:
        """Insert or replace the job's record (its updated_at set now)."""

    async def get(self, job_id: str) -> Job | None: ...

    async def unfinished(self, owner: str | None = None) -> list[Job]:
        """The jobs left queued or running (of `owner`, or of every service), oldest
        first."""


class SQLiteJobs(SQLiteTables):
    """Jobs in a table of a SQLite file (the sqlite store's own, or beside another store)."""

    SCHEMA = (
        """CREATE TABLE IF NOT EXISTS upload_jobs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        owner TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at TEXT NOT NULL)""",
    )

    WHAT = "upload jobs"

    def check_writable(self) -> None:
        return None

    async def save(self, job: Job) -> None:
        job.updated_at = now()
        job.created_at = job.created_at or job.updated_at
        await self._run(
            "INSERT OR REPLACE INTO upload_jobs VALUES (?, ?, ?, ?, ?)",
            (job.id, job.status, job.owner, job.data(), job.created_at),
        )

    async def get(self, job_id: str) -> Job | None:
        rows = await self._run("SELECT data FROM upload_jobs WHERE id = ?", (job_id,))
        return Job.from_data(rows[0][0]) if rows else None

    async def unfinished(self, owner: str | None = None) -> list[Job]:
        rows = await self._run(
            "SELECT data FROM upload_jobs WHERE status IN (?, ?) "
            "AND (? IS NULL OR owner = ?) ORDER BY created_at, id",
            (*UNFINISHED, owner, owner),
        )
        return [Job.from_data(row[0]) for row in rows]


class SiamJobs(SchemaTables):
    """Jobs in the Postgres schema, through the store's own primitives (a direct
    connection for postgres, PostgREST for supabase)."""

    def check_writable(self) -> None:
        return None

    async def save(self, job: Job) -> None:
        job.updated_at = now()
        job.created_at = job.created_at or job.updated_at
        params = {
            "job_id": job.id,
            "job_status": job.status,
            "job_owner": job.owner,
            "job_data": asdict(job),
            "job_created": job.created_at,
        }
        await self.store.call("knowledge_upload_job_save", params, BackendConnectionError)

    async def get(self, job_id: str) -> Job | None:
        rows = await self.store.select("knowledge_upload_jobs", "data", ("id", "eq", job_id))
        return Job.from_data(rows[0]["data"]) if rows else None

    async def unfinished(self, owner: str | None = None) -> list[Job]:
        mine = () if owner is None else (("owner", "eq", owner),)
        rows = await self.store.select(
            "knowledge_upload_jobs",
            "data",
            *mine,
            ("status", "in", list(UNFINISHED)),
            order="created_at",
        )
        return [Job.from_data(row["data"]) for row in rows]


class RefusedJobs:
    """The store of a database other pipelines fill: no job is accepted (409)."""

    def __init__(self, refused: Callable[[], KnowledgeAPIError]) -> None:
        self.refused = refused

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def check_writable(self) -> None:
        raise self.refused()

    async def save(self, job: Job) -> None:
        raise self.refused()

    async def get(self, job_id: str) -> Job | None:
        return None

    async def unfinished(self, owner: str | None = None) -> list[Job]:
        return []
