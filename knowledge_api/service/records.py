"""The records the service keeps beside the index for its doors: API keys, upload and
sync jobs, ratings of answers (ledger.py has their shapes)."""

from __future__ import annotations

from knowledge_api.ledger import Job, Rating
from knowledge_api.models import ApiKey
from knowledge_api.service.engine import Engine
from knowledge_api.stores.tables.jobs import JobStore


class Records:
    """Keys, jobs and ratings, over the engine's side tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def add_key(self, key: ApiKey) -> None:
        await self.engine.keys.add(key)

    async def keys(self) -> list[ApiKey]:
        return await self.engine.keys.all()

    async def key(self, name: str) -> ApiKey | None:
        """The key of this name, read from the store (None when there is none)."""
        return await self.engine.keys.named(name)

    async def groups(self, user: str) -> tuple[str, ...]:
        """The groups the service knows for the user id `user`."""
        found: tuple[str, ...] = await self.engine.keys.groups(user)
        return found

    async def set_groups(self, user: str, groups: tuple[str, ...]) -> None:
        """Replace the groups of the user id `user`."""
        await self.engine.keys.set_groups(user, groups)

    async def revoke_key(self, name: str) -> bool:
        """Whether a key of that name was there to revoke."""
        return await self.engine.keys.revoke(name)

    @property
    def job_table(self) -> JobStore:
        """The table the upload worker keeps its jobs in, as it is now: the worker
        holds it for its run (a test hands it a failing one)."""
        return self.engine.jobs

    async def save_job(self, job: Job) -> None:
        await self.engine.jobs.save(job)

    async def job(self, job_id: str) -> Job | None:
        return await self.engine.jobs.get(job_id)

    async def unfinished_jobs(self, owner: str | None = None) -> list[Job]:
        """The jobs left queued or running (by `owner`, or all)."""
        return await self.engine.jobs.unfinished(owner)

    async def rate(self, rating: Rating) -> int:
        """Store a rating, replacing the key's earlier rating of the query; its id."""
        return await self.engine.feedback_log.rate(rating)

    async def ratings(
        self, limit: int, before: int | None = None, since: str | None = None
    ) -> list[Rating]:
        """Ratings newest first, older than `before` (an id), at or after `since`."""
        return await self.engine.feedback_log.ratings(limit, before, since)
