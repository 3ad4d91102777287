"""Connector sources: registering one, syncing it under its lease (the run itself is
usecases/connector_run.py), syncing them all, the syncs asked over HTTP run as jobs,
the schedule that syncs each source when it is due, and what the listing says of each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from knowledge_api.errors import InvalidRequest, KnowledgeAPIError, NotFound
from knowledge_api.ledger import DONE, FAILED, RUNNING, Actor, Job
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases.connector_run import SyncResult, run_source

log = logging.getLogger("knowledge_api.connectors")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SYNC_OWNER = "sources-sync"
"""The owner of a sync job in the jobs' records (an upload job names its service)."""


class SourceExists(KnowledgeAPIError, status=409, type="source_exists"):
    """A source of that name is in the collection already."""


async def add_source(
    service: KnowledgeService,
    collection: str,
    name: str,
    source: ConnectorSource,
    acl: tuple[str, ...] = (),
) -> SourceInfo:
    """Register a connector source (no sync): the source as listed now. 400 naming the
    field for a kind, URL, setting or secret its connector refuses, 409 when the
    collection has a source of that name. Its documents take `acl`: without one the
    source is closed (admin keys only) until an access list is set."""
    for key, variable in source.secrets.items():
        if not ENV_NAME.fullmatch(variable):
            raise InvalidRequest(
                f"secrets.{key}", "takes the NAME of an environment variable, never its value"
            )
    service.catalog.check_connector(source, collection)
    if any(info.name == name for info in await service.sources.listed(collection)):
        raise SourceExists(
            f"the collection {collection!r} has a source {name!r} already: remove it first "
            "(knowledge-api sources remove) or choose another name",
            source=name,
            collection=collection,
        )
    await service.sources.set_acl(collection, name, acl)
    await service.sources.note_connector(collection, name, source.to_json())
    return next(i for i in await service.sources.listed(collection) if i.name == name)


async def connector_sources(
    service: KnowledgeService, collection: str | None = None
) -> list[tuple[SourceInfo, ConnectorSource]]:
    return await service.catalog.connector_sources(collection)


async def find_source(
    service: KnowledgeService, name: str, collection: str | None
) -> tuple[SourceInfo, ConnectorSource]:
    """The connector source `name` (of `collection`, or the one collection holding it)."""
    found = [pair for pair in await connector_sources(service, collection) if pair[0].name == name]
    if len(found) != 1:
        where = f" in collection {collection!r}" if collection else ""
        many = " (in several collections: name one with --collection)" if found else ""
        raise NotFound(f"no connector source {name!r}{where}{many}", source=name)
    return found[0]


async def sync_source(
    service: KnowledgeService,
    info: SourceInfo,
    source: ConnectorSource,
    actor: Actor,
    full: bool = False,
    dry_run: bool = False,
    allow_mass_delete: bool = False,
) -> SyncResult:
    """One run of a source, holding its lease in the store (a dry run reads only, and
    takes none). A failure (the service unreachable, the credentials refused, a mass
    delete refused) is kept as the source's `last_error` and the result's error: nothing
    is deleted and the cursor stays. While another process holds the lease, the run
    does nothing and says so."""
    if dry_run:
        return await run_source(service, info, source, actor, full, True, allow_mass_delete)
    async with leased(service, info) as held:
        if not held:
            result = SyncResult(info.collection, info.name)
            result.error = "another process is syncing this source now; this run did nothing"
            return result
        # what that other process may have moved since `source` was read
        info, source = await find_source(service, info.name, info.collection)
        return await run_source(service, info, source, actor, full, False, allow_mass_delete)


LEASE_SECONDS = 300.0
"""How long a sync's lease on its source lasts unless renewed: a process that dies
mid-run holds the source no longer than this."""


@asynccontextmanager
async def leased(service: KnowledgeService, info: SourceInfo) -> AsyncIterator[bool]:
    """The source's lease taken for this process (renewed while the run goes, let go at
    its end); False when another process holds it."""
    sources = service.sources
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    if not await sources.lease(info.collection, info.name, holder, LEASE_SECONDS):
        yield False
        return

    async def renew() -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            await sources.lease(info.collection, info.name, holder, LEASE_SECONDS)

    renewing = asyncio.create_task(renew())
    try:
        yield True
    finally:
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)
        await sources.lease(info.collection, info.name, holder, 0)


async def sync_all(
    service: KnowledgeService, actor: Actor, full: bool = False, dry_run: bool = False
) -> list[SyncResult]:
    """Every connector source, one after the other."""
    return [
        await sync_source(service, info, source, actor, full, dry_run)
        for info, source in await connector_sources(service)
    ]


def source_view(info: SourceInfo, default_every: float) -> dict[str, Any]:
    """A source as the listings show it: a connector source's kind, URL, settings, the
    names of the variables holding its secrets (never a value), its cursor, next
    scheduled run (`default_every`: KNOWLEDGE_SYNC_INTERVAL) and last error; null for a
    source `ingest` or an upload fills."""
    source = ConnectorSource.from_json(info.connector) if info.connector else None
    due = next_run(info, source, default_every) if source else None
    return {
        "collection": info.collection,
        "name": info.name,
        "documents": info.documents,
        "last_run": info.last_run,
        "kind": source.kind if source else None,
        "url": source.url if source else None,
        "settings": source.settings if source else None,
        "secrets": source.secrets if source else None,
        "cursor": source.cursor if source else None,
        "next_run": due.isoformat(timespec="seconds") if due else None,
        "last_error": source.last_error if source else None,
        "warning": source.warning if source else None,
        "last_prune": (source.last_prune or None) if source else None,
    }


def next_run(info: SourceInfo, source: ConnectorSource, default_every: float) -> datetime | None:
    """When the service syncs the source next: at once when it never ran, else its last
    run (finished or failed) and its interval; None when it is not scheduled."""
    try:
        interval = source.every(default_every)
    except InvalidRequest:
        return None
    if interval <= 0:
        return None
    last = datetime.fromisoformat(info.last_run)
    last = last if last.tzinfo else last.replace(tzinfo=UTC)
    never = not source.last_sync and source.last_error is None
    return last if never else last + timedelta(seconds=interval)


class SyncJobs:
    """Syncs asked over HTTP: each one a job (GET /v1/knowledge/jobs/{id}), run in the
    background one after the other, so two runs of a source never overlap here."""

    def __init__(self, service: KnowledgeService) -> None:
        self.service = service
        self.turn = asyncio.Lock()
        self.tasks: set[asyncio.Task[None]] = set()

    async def submit(
        self, info: SourceInfo, source: ConnectorSource, actor: Actor, full: bool, allowed: bool
    ) -> Job:
        job = Job(uuid.uuid4().hex, info.collection, "", info.name, SYNC_OWNER)
        await self.service.records.save_job(job)
        task = asyncio.create_task(self.run(job, info, source, actor, full, allowed))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return job

    async def run(
        self,
        job: Job,
        info: SourceInfo,
        source: ConnectorSource,
        actor: Actor,
        full: bool,
        allowed: bool,
    ) -> None:
        async with self.turn:
            job.status = RUNNING
            await self.service.records.save_job(job)
            try:
                result = await sync_source(self.service, info, source, actor, full, False, allowed)
                job.reason = result.error or ""
                if result.report is not None:
                    indexed = result.report.indexed
                    job.chunks_done = job.chunks_total = indexed.chunks
                    job.embedded = indexed.embedded
            except Exception as e:  # a bug or a store gone: the job says so
                log.exception("sync of %s failed", info.name)
                job.reason = e.message if isinstance(e, KnowledgeAPIError) else type(e).__name__
            job.status = FAILED if job.reason else DONE
            await self.service.records.save_job(job)


@asynccontextmanager
async def sync_jobs(service: KnowledgeService) -> AsyncIterator[SyncJobs]:
    """While the service runs: syncs asked over HTTP run as jobs; those still running
    when it stops are cancelled (their cursor stays where it was)."""
    jobs = SyncJobs(service)
    try:
        yield jobs
    finally:
        for task in list(jobs.tasks):
            task.cancel()
        await asyncio.gather(*jobs.tasks, return_exceptions=True)


SCHEDULED = Actor("sources-sync")
"""The scheduled syncs, as the audit trail names them."""
TICK = 10.0
"""Seconds between two looks at which sources are due."""


@dataclass
class Schedule:
    """What /health says of the scheduled syncs: the source syncing now, each source's
    last scheduled run, and the errors of those that stopped."""

    running: str | None = None
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    checked_at: str | None = None
    """When it last looked for the sources due (and ran them)."""

    def finished(self, result: SyncResult) -> None:
        self.runs[f"{result.collection}/{result.name}"] = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "status": "failed" if result.error else "ok",
            "summary": result.line(),
        }

    def health(self) -> dict[str, Any]:
        failing = sorted(key for key, run in self.runs.items() if run["status"] == "failed")
        status = "failing" if failing else ("syncing" if self.running else "ok")
        return {
            "status": status,
            "syncing": self.running,
            "failing": failing,
            "runs": self.runs,
            "checked_at": self.checked_at,
        }


async def sync_due(service: KnowledgeService, jobs: SyncJobs, schedule: Schedule) -> int:
    """Sync, one after the other, the connector sources whose next run has come; how
    many ran."""
    default = service.settings.sync_interval
    ran = 0
    for info, source in await connector_sources(service):
        due = next_run(info, source, default)
        if due is None or due > datetime.now(UTC):
            continue
        async with jobs.turn:
            schedule.running = f"{info.collection}/{info.name}"
            try:
                result = await sync_source(service, info, source, SCHEDULED)
            finally:
                schedule.running = None
        schedule.finished(result)
        if result.error:
            log.warning("scheduled sync stopped: %s", result.line())
        else:
            log.info("scheduled sync: %s", result.line())
        ran += 1
    schedule.checked_at = datetime.now(UTC).isoformat(timespec="seconds")
    return ran


async def sync_forever(service: KnowledgeService, jobs: SyncJobs, schedule: Schedule) -> None:
    while True:
        try:
            await sync_due(service, jobs, schedule)
        except KnowledgeAPIError as e:  # the store did not answer: the next tick tries again
            log.warning("scheduled syncs: %s", e.message)
        except Exception:  # a bug must not end the schedule; the log says what
            log.exception("scheduled syncs failed unexpectedly")
        await asyncio.sleep(TICK)


@asynccontextmanager
async def scheduled_syncs(service: KnowledgeService, jobs: SyncJobs) -> AsyncIterator[Schedule]:
    """While the service runs: each connector source synced every its `every` (else
    KNOWLEDGE_SYNC_INTERVAL), never two at once with the runs asked over HTTP; /health
    shows them (`connectors`)."""
    schedule = Schedule()
    service.health_reports["connectors"] = schedule.health
    task = asyncio.create_task(sync_forever(service, jobs, schedule), name="sources-sync")
    try:
        yield schedule
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
