"""Connector sources: registering one, syncing it (new and changed items since its
cursor, then pruning what its service no longer has, under the mass-delete guard),
syncing them all, and what the listing says of each.

A run writes the documents of its window in batches as the service's pages come
(usecases/sync_window.py), then lists what the service still has; nothing is deleted
or emptied until that passes the mass-delete guard, and the cursor moves only once
every document of its window is stored. A run that fails keeps its error in the
source's record (shown by the listing), deletes nothing and keeps its cursor.
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

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, KnowledgeAPIError, NotFound
from knowledge_api.ledger import DONE, FAILED, MAX_AUDITED_IDS, RUNNING, Actor, Job, changes
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import memberships
from knowledge_api.usecases.sources import MirrorReport
from knowledge_api.usecases.sync_window import SyncPlan, write_window

log = logging.getLogger("knowledge_api.connectors")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SYNC_OWNER = "sources-sync"
"""The owner of a sync job in the jobs' records (an upload job names its service)."""


class SourceExists(KnowledgeAPIError, status=409, type="source_exists"):
    """A source of that name is in the collection already."""


@dataclass
class SyncResult:
    """What one run of a source did (or, dry, would do)."""

    collection: str
    name: str
    plan: SyncPlan | None = None
    report: MirrorReport | None = None
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    warning: str | None = None

    def line(self) -> str:
        where = f"{self.collection}/{self.name}"
        if self.error is not None:
            return f"{where}: sync stopped: {self.error}"
        assert self.plan is not None
        plan = self.plan
        if self.report is None:
            text = f"{where}: dry run: " + counts(plan, len(plan.deleted))
        else:
            text = f"{where}: " + counts(plan, self.report.deleted)
        if self.problems:
            text += f"; {len(self.problems)} left out: {'; '.join(self.problems[:5])}"
        if self.warning:
            text += f"; warning: {self.warning}"
        return text

    def body(self) -> dict[str, object]:
        """The run as the sync job reports it."""
        plan = self.plan
        return {
            "collection": self.collection,
            "source": self.name,
            "added": len(plan.added) if plan else 0,
            "updated": len(plan.updated) if plan else 0,
            "deleted": (self.report.deleted if self.report else 0),
            "problems": self.problems[:20],
            "error": self.error,
            "warning": self.warning,
        }


def counts(plan: SyncPlan, deleted: int) -> str:
    return (
        f"{len(plan.added)} added, {len(plan.updated)} updated, {plan.unchanged} unchanged, "
        f"{deleted} deleted"
    )


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


async def run_source(
    service: KnowledgeService,
    info: SourceInfo,
    source: ConnectorSource,
    actor: Actor,
    full: bool,
    dry_run: bool,
    allow_mass_delete: bool,
) -> SyncResult:
    """Read the window since the cursor (moved back by KNOWLEDGE_SYNC_OVERLAP; all with
    `full`), writing its documents in batches as they come (usecases/sync_window.py);
    then list every id when the run prunes, delete what is gone under the mass-delete
    guard, give users the groups the service's permissions make (usecases/memberships.py)
    and move the cursor, in that order."""
    result = SyncResult(info.collection, info.name)
    settings = service.settings
    started = datetime.now(UTC)
    prune = full or prune_due(source, settings.prune_every, started)
    since = "" if full else window_start(source.cursor, settings.sync_overlap)
    try:
        owned = await service.sources.produced(info.collection, info.name)
        result.plan = plan = SyncPlan(info.collection, info.name, stored=len(owned))
        given = await service.sources.acl_of(info.collection, info.name)
        async with service.catalog.read_connector(source, info.collection, since) as reading:
            plan.own_acl = reading.permissions
            indexed = await write_window(service, reading, plan, given, dry_run)
            # with nothing stored there is nothing to prune: no need to list every id
            seen = await reading.seen(prune and bool(owned))
            await reading.members()  # given and taken back once the run has stored all
            window = reading.read
        if seen is not None:
            plan.deleted = {i: sid for i, sid in owned.items() if not seen_in(sid, seen)}
            plan.check_deletions(settings.prune_max_fraction, allow_mass_delete)
        result.problems = window.problems
        if not source.last_sync and not plan.taken and not owned:
            result.warning = FOUND_NOTHING
        if dry_run:
            return result
        if plan.emptied and not service.embedder_ready:
            await service.load_embedder()
        emptied, deleted = await service.sources.mirror(
            plan.emptied, info.collection, info.name, list(plan.deleted), replaced=plan.adopted
        )
    except KnowledgeAPIError as e:  # the cursor stays: the next run reads the window again
        return await stopped(service, info, source, result, e, dry_run)
    result.report = MirrorReport(indexed + emptied, plan.unchanged, deleted)
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    cursor = window.cursor or validation.utc_text(started)
    granted = await memberships.follow(service, info, source, window.members, actor)
    scopes = await memberships.rescope(service, info, source, window.scopes, owned, given)
    pruned = prune or seen is not None
    moved = source.moved(cursor, finished, pruned, result.warning, granted, scopes)
    await service.sources.note_connector(info.collection, info.name, moved.to_json())
    if plan.changed or deleted:
        await service.audit(
            actor,
            f"sources sync {info.name}",
            info.collection,
            changes(
                ids=plan.changed,
                summary=result.report.indexed,
                removed=deleted,
                removed_ids=list(plan.deleted)[:MAX_AUDITED_IDS],
            ),
        )
    return result


FOUND_NOTHING = (
    "the first sync found nothing: check the URL, the settings naming what to read (a "
    "project, a space, a channel) and what the credentials may see"
)


async def stopped(
    service: KnowledgeService,
    info: SourceInfo,
    source: ConnectorSource,
    result: SyncResult,
    error: KnowledgeAPIError,
    dry_run: bool,
) -> SyncResult:
    """The run stopped on `error`: kept as the source's last error (a dry run keeps
    nothing); its cursor stays, nothing is deleted."""
    result.error = error.message
    if not dry_run:
        failed = source.failed(error.message).to_json()
        await service.sources.note_connector(info.collection, info.name, failed)
    return result


def window_start(cursor: str, overlap: float) -> str:
    """Where an incremental run reads from: a cursor that is an instant moved back by
    `overlap` seconds (an item the service's search returned late is read again); a
    cursor of a connector's own form as it is."""
    try:
        moment = datetime.fromisoformat(cursor)
    except ValueError:
        return cursor
    return validation.utc_text(moment - timedelta(seconds=overlap))


def prune_due(source: ConnectorSource, every: float, now: datetime) -> bool:
    """Whether a run lists every id and prunes: never pruned, or last pruned `every`
    seconds ago or more; never when `every` is 0."""
    if every <= 0:
        return False
    if not source.last_prune:
        return True
    return datetime.fromisoformat(source.last_prune) + timedelta(seconds=every) <= now


def seen_in(source_id: str, seen: set[str]) -> bool:
    """A stored document the service still has: its id is seen, or it is a part of an
    item seen (`ID/NAME`, such as a message's attachment). A URL's path makes no part:
    the page `/guide/install` is seen on its own, never because `/guide` is."""
    item = source_id.rpartition("/")[0]
    return source_id in seen or (item in seen and "://" not in item)


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
