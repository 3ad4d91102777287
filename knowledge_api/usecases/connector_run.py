"""One run of a connector source: the window since its cursor written in batches as the
service's pages come (usecases/sync_window.py), then, when the run prunes, the ids the
service still has listed and what is gone deleted under the mass-delete guard; the
users' groups followed and the cursor moved last. A run that fails keeps its error in
the source's record, deletes nothing and keeps its cursor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from knowledge_api import validation
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.ledger import MAX_AUDITED_IDS, Actor, changes
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import memberships
from knowledge_api.usecases.sources import MirrorReport
from knowledge_api.usecases.sync_window import SyncPlan, write_window


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
