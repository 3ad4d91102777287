"""Connector sources: registering one, syncing it (new and changed items since its
cursor, then pruning what its service no longer has, under the mass-delete guard),
syncing them all, and what the listing says of each.

A run reads the service first, then plans from the store alone; nothing is written
until the plan passes the guard, and the cursor moves only once the documents of its
window are stored. A run that fails keeps its error in the source's record (shown by
the listing) and deletes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from knowledge_api.errors import KnowledgeAPIError, NotFound
from knowledge_api.ledger import MAX_AUDITED_IDS, Actor, changes
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases.sources import MirrorPlan, MirrorReport, mirror, plan_mirror


class SourceExists(KnowledgeAPIError, status=409, type="source_exists"):
    """A source of that name is in the collection already."""


@dataclass
class SyncResult:
    """What one run of a source did (or, dry, would do)."""

    collection: str
    name: str
    plan: MirrorPlan | None = None
    report: MirrorReport | None = None
    problems: list[str] = field(default_factory=list)
    error: str | None = None

    def line(self) -> str:
        where = f"{self.collection}/{self.name}"
        if self.error is not None:
            return f"{where}: sync stopped: {self.error}"
        assert self.plan is not None
        plan = self.plan
        if self.report is None:
            return f"{where}: dry run: " + counts(plan, len(plan.deleted))
        text = f"{where}: " + counts(plan, self.report.deleted)
        if self.problems:
            text += f"; {len(self.problems)} left out: {'; '.join(self.problems[:5])}"
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
        }


def counts(plan: MirrorPlan, deleted: int) -> str:
    return (
        f"{len(plan.added)} added, {len(plan.updated)} updated, {plan.unchanged} unchanged, "
        f"{deleted} deleted"
    )


async def add_source(
    service: KnowledgeService, collection: str, name: str, source: ConnectorSource
) -> ConnectorSource:
    """Register a connector source (no sync); 400 naming the field for a kind, URL or
    setting its connector refuses, 409 when the collection has a source of that name."""
    service.check_connector(source, collection)
    if any(info.name == name for info in await service.store.sources(collection)):
        raise SourceExists(
            f"the collection {collection!r} has a source {name!r} already: remove it first "
            "(knowledge-api sources remove) or choose another name",
            source=name,
            collection=collection,
        )
    await service.store.record_source(collection, name, connector=source.to_json())
    return source


async def connector_sources(
    service: KnowledgeService, collection: str | None = None
) -> list[tuple[SourceInfo, ConnectorSource]]:
    return [
        (info, ConnectorSource.from_json(info.connector))
        for info in await service.store.sources(collection)
        if info.connector
    ]


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
    """One run of a source. A failure (the service unreachable, the credentials refused,
    a mass delete refused) is kept as the source's `last_error` and the result's error:
    nothing is deleted and the cursor stays."""
    result = SyncResult(info.collection, info.name)
    store = service.store
    try:
        window, seen = await service.read_connector(source, info.collection, full)
        plan = await plan_mirror(service, window.documents, info.name, info.collection, False)
        owned = await store.source_documents(info.collection, info.name)
        plan.deleted = {i: sid for i, sid in owned.items() if not seen_in(sid, seen)}
        plan.check_deletions(service.settings.prune_max_fraction, allow_mass_delete)
    except KnowledgeAPIError as e:
        result.error = e.message
        if not dry_run:
            failed = source.failed(e.message).to_json()
            await store.record_source(info.collection, info.name, connector=failed)
        return result
    result.plan, result.problems = plan, window.problems
    if dry_run:
        return result
    result.report = await mirror(service, plan)
    finished = datetime.now(UTC).isoformat(timespec="seconds")
    moved = source.moved(window.cursor, finished).to_json()
    await store.record_source(info.collection, info.name, connector=moved)
    if plan.changed or result.report.deleted:
        removed = list(plan.deleted)
        summary = result.report.indexed
        await service.audit(
            actor,
            f"sources sync {info.name}",
            info.collection,
            changes(
                plan.changed,
                summary,
                removed=result.report.deleted,
                removed_ids=removed[:MAX_AUDITED_IDS],
            ),
        )
    return result


def seen_in(source_id: str, seen: set[str]) -> bool:
    """A stored document the service still has: its id is seen, or it is a part of an
    item seen (`ID/NAME`, such as a message's attachment)."""
    return source_id in seen or source_id.rpartition("/")[0] in seen


async def sync_all(
    service: KnowledgeService, actor: Actor, full: bool = False, dry_run: bool = False
) -> list[SyncResult]:
    """Every connector source, one after the other."""
    return [
        await sync_source(service, info, source, actor, full, dry_run)
        for info, source in await connector_sources(service)
    ]
