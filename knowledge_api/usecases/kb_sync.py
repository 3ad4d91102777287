"""KB sync: pull the host's articles (GET /api/kb/articles) into the support collection.

The host is read by the `kb` connector's client (connectors/kb.py), the one reader of
its API. An incremental sync asks for the articles updated since the newest
`last_updated` already stored; a full sync asks for everything and then removes the
synced articles the host no longer has. Articles go through the ordinary ingestion, so
an unchanged article is neither embedded nor written again.

When the host is unreachable or fails, nothing is removed: the index keeps serving
what it has, and `SyncState` (shown by /health) says since when it is stale.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowledge_api.errors import ConnectorFailed, KnowledgeAPIError
from knowledge_api.ledger import MAX_AUDITED_IDS, Actor, changes, local_user
from knowledge_api.models import Document, KBHost
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases.sources import MassDeleteRefused, MirrorPlan

log = logging.getLogger("knowledge_api.kb_sync")


# -- syncing ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncReport:
    full: bool
    updated_since: str
    fetched: int
    indexed: int
    embedded: int
    unchanged: int
    removed: int
    invalid: tuple[str, ...]
    seconds: float

    def line(self) -> str:
        kind = "full sync" if self.full else f"incremental sync since {self.updated_since or '-'}"
        text = (
            f"{kind}: {self.fetched} articles fetched, {self.indexed} indexed "
            f"({self.embedded} passages embedded), {self.unchanged} unchanged, "
            f"{self.removed} removed in {self.seconds:.1f}s"
        )
        if self.invalid:
            text += f"; {len(self.invalid)} invalid skipped: {'; '.join(self.invalid[:5])}"
        return text


@dataclass
class SyncState:
    """What /health says about the sync: when it last worked, since when it fails."""

    host: str
    last_success: str = ""
    failing_since: str = ""
    last_error: str = ""
    last_report: SyncReport | None = field(default=None, repr=False)

    def succeeded(self, report: SyncReport) -> None:
        self.last_success, self.failing_since, self.last_error = now_iso(), "", ""
        self.last_report = report

    def failed(self, error: str) -> None:
        self.failing_since = self.failing_since or now_iso()
        self.last_error = error

    def health(self) -> dict[str, Any]:
        if self.failing_since:
            status = "stale"
        elif self.last_success:
            status = "ok"
        else:
            status = "pending"
        report: dict[str, Any] = {"status": status, "host": self.host}
        if self.last_success:
            report["last_success"] = self.last_success
        if self.failing_since:
            report["stale_since"] = self.last_success or "never synced"
            report["failing_since"] = self.failing_since
            report["error"] = self.last_error
        if self.last_report is not None:
            report["last_sync"] = self.last_report.line()
        return report


PERIODIC = Actor("kb-sync")
"""The periodic sync, as the audit trail names it."""


class KBSync:
    def __init__(
        self,
        service: KnowledgeService,
        host: KBHost,
        collection: str,
        actor: Actor = PERIODIC,
    ) -> None:
        self.service = service
        self.host = host
        self.base_url = host.url.rstrip("/")
        self.collection = collection
        self.state = SyncState(self.base_url)
        self.actor = actor
        """Who the audit trail says wrote: the periodic sync, or who ran `sync`."""

    @classmethod
    def from_service(cls, service: KnowledgeService, actor: Actor = PERIODIC) -> KBSync:
        s = service.settings
        host = KBHost(s.kb_sync_url, s.kb_sync_token.get(), s.kb_sync_page_size, s.kb_sync_timeout)
        return cls(service, host, s.support_collection, actor)

    async def run(self, full: bool = False, allow_mass_delete: bool = False) -> SyncReport:
        """One sync; on failure nothing stored changes and the error is re-raised. A full
        sync removing more than KNOWLEDGE_PRUNE_MAX_FRACTION of the synced articles is
        refused (MassDeleteRefused) unless `allow_mass_delete`."""
        try:
            report = await self._run(full, allow_mass_delete)
        except KnowledgeAPIError as e:
            self.state.failed(e.message)
            raise
        self.state.succeeded(report)
        return report

    async def _run(self, full: bool, allow_mass_delete: bool) -> SyncReport:
        started = time.perf_counter()
        stored = await self.stored_articles()
        since = "" if full else max((ts for ts in stored.values() if ts), default="")
        found = await self.service.catalog.read_kb(self.host, since, self.collection)
        host = self.base_url
        plan = MirrorPlan(self.collection, host, stored=len(stored))
        if full:
            plan.deleted = {
                doc_id: source_id
                for doc_id, source_id in await self.stored_ids()
                if source_id not in found.present  # malformed ones are kept too
            }
            settings = self.service.settings
            plan.check_deletions(settings.prune_max_fraction, allow_mass_delete)
        documents = found.documents
        acl = await self.service.sources.acl_of(self.collection, host)
        for doc in documents:
            doc.acl = doc.acl if acl is None else acl
        summary = await self.service.ingest(documents, source=host)
        removed = await self.service.sources.prune(self.collection, host, list(plan.deleted))
        if summary.documents or removed:
            await self.service.audit(
                self.actor,
                "kb sync full" if full else "kb sync",
                self.collection,
                changes(
                    documents,
                    summary,
                    removed=removed,
                    removed_ids=list(plan.deleted)[:MAX_AUDITED_IDS],
                ),
            )
        return SyncReport(
            full=full,
            updated_since=since,
            fetched=found.fetched,
            indexed=summary.documents,
            embedded=summary.embedded,
            unchanged=summary.skipped,
            removed=removed,
            invalid=tuple(found.invalid),
            seconds=time.perf_counter() - started,
        )

    async def stored_articles(self) -> dict[str, str]:
        """source id -> last_updated of the articles this host synced before."""
        return {
            doc.source_id: str(doc.metadata.get("last_updated", "")) async for doc in self._synced()
        }

    async def stored_ids(self) -> list[tuple[str, str]]:
        return [(doc.id, doc.source_id) async for doc in self._synced()]

    async def _synced(self) -> AsyncIterator[Document]:
        async for doc in self.service.iter_documents(self.collection):
            if doc.metadata.get("kb_host") == self.base_url:  # a KB article of this host
                yield doc


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- entry points ----------------------------------------------------------------------


async def sync_command(
    service: KnowledgeService,
    full: bool,
    allow_mass_delete: bool = False,
    acl: tuple[str, ...] | None = None,
) -> int:
    """`knowledge-api sync --from URL`: one sync, a summary line, exit status 1 on failure;
    with `acl`, the host's articles take that access list from now on."""
    sync = KBSync.from_service(service, local_user())
    if acl is not None:
        await service.sources.set_acl(sync.collection, sync.base_url, acl)
    try:
        report = await sync.run(full, allow_mass_delete)
    except MassDeleteRefused as e:
        print(f"sync stopped: {e.message}", flush=True)
        return 1
    except ConnectorFailed as e:
        count = len(await sync.stored_articles())
        print(f"sync failed: {e.message}; the index keeps its {count} articles", flush=True)
        return 1
    print(report.line())
    return 0


@asynccontextmanager
async def periodic_sync(service: KnowledgeService) -> AsyncIterator[KBSync | None]:
    """While the service runs: a full sync at start, then an incremental one every
    KNOWLEDGE_KB_SYNC_INTERVAL (every KNOWLEDGE_KB_SYNC_FULL_EVERY-th one full).
    Nothing runs when KNOWLEDGE_KB_SYNC_URL is empty."""
    if not service.settings.kb_sync_url:
        yield None
        return
    sync = KBSync.from_service(service)
    service.health_reports["kb_sync"] = sync.state.health
    task = asyncio.create_task(sync_forever(sync), name="kb-sync")
    try:
        yield sync
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def sync_forever(sync: KBSync) -> None:
    settings = sync.service.settings
    runs = 0
    while True:
        full = runs % settings.kb_sync_full_every == 0
        try:
            log.info("%s", (await sync.run(full)).line())
        except KnowledgeAPIError as e:
            log.warning("KB sync failed, serving the articles already indexed: %s", e.message)
        except Exception as e:  # a bug must not end the periodic sync; /health shows it
            log.exception("KB sync failed unexpectedly")
            sync.state.failed(f"unexpected error: {type(e).__name__}")
        runs += 1
        await asyncio.sleep(settings.kb_sync_interval)
