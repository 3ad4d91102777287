"""A connector run's window written as it is read: each batch of documents the
connector hands over is planned against the store (new, changed, unchanged) and its
new and changed documents are embedded and written while the next batch is read. A
run holds a few batches of documents, never a whole project: of what it wrote it keeps
ids alone (and, of each item, the date of the copy it took).

The cursor is not this module's: the run stores it once every batch is written, so a
run that stops midway is read again from where it started by the next one; what it had
written is then unchanged (its content hash), neither embedded nor written again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from knowledge_api.models import Document, IndexSummary
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases.sources import adopted, mass_delete, owned_by


class Reading(Protocol):
    """A run's read of its connector (`service.catalog.read_connector`)."""

    def batches(self) -> AsyncIterator[list[Document]]: ...


@dataclass
class SyncPlan:
    """What a run did (or, dry, would do), kept by document id as the window streams
    by. The documents it would empty (no text left) are held back until the
    mass-delete guard has passed; they have no passages to hold."""

    collection: str
    source: str
    stored: int = 0
    """Documents the source held before the run."""
    own_acl: bool = False
    """The documents carry their service's permissions as their access lists
    (`sources.owned_by`)."""
    added: dict[str, str] = field(default_factory=dict)
    """Document id -> source id of the documents written new."""
    updated: dict[str, str] = field(default_factory=dict)
    unchanged: int = 0
    deleted: dict[str, str] = field(default_factory=dict)
    emptied: list[Document] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    """Ids of documents of no source that documents written now replace."""
    taken: dict[str, str] = field(default_factory=dict)
    """Document id -> `updated_at` of the copy of each item the run took."""

    @property
    def changed(self) -> list[str]:
        return [*self.added, *self.updated]

    def lines(self) -> list[str]:
        """One line per document the run would write or delete, naming its item."""
        emptied = {doc.id for doc in self.emptied}
        return (
            [f"add {source_id}" for source_id in self.added.values()]
            + [
                f"update {source_id}" + (" (emptied: no text left)" if doc_id in emptied else "")
                for doc_id, source_id in self.updated.items()
            ]
            + [f"delete {source_id}" for source_id in sorted(self.deleted.values())]
        )

    def check_deletions(self, max_fraction: float, allowed: bool) -> None:
        """Refuse a run deleting or emptying more than `max_fraction` of the source,
        unless `allowed`: nothing is then deleted or emptied."""
        refused = mass_delete(
            self.source, len(self.deleted), len(self.emptied), self.stored, max_fraction
        )
        if refused is not None and not allowed:
            raise refused

    def fresh(self, batch: list[Document]) -> list[Document]:
        """Each item of a batch once, and not a copy older than one the run took
        already (a window may read an item twice, across pages or in its overlap)."""
        return [
            doc
            for doc in latest(batch)
            if doc.id not in self.taken or later(doc.updated_at, self.taken[doc.id])
        ]

    def count(self, fresh: list[Document], changed: list[Document], stored: set[str]) -> None:
        """Tally a batch: its documents new, changed (those that would be emptied held
        back) and unchanged; an item taken before counts once, with its first copy."""
        before = {doc.id for doc in fresh if doc.id in self.taken}
        self.taken.update((doc.id, doc.updated_at) for doc in fresh)
        moved = {doc.id for doc in changed}
        self.unchanged += sum(1 for doc in fresh if doc.id not in moved | before)
        for doc in changed:
            if doc.id in stored and not doc.chunks:
                self.emptied.append(doc)
            if doc.id not in before:
                (self.updated if doc.id in stored else self.added)[doc.id] = doc.source_id
        self.adopted += adopted((doc for doc in changed if doc.id not in stored), stored)


async def write_window(
    service: KnowledgeService,
    reading: Reading,
    plan: SyncPlan,
    given: tuple[str, ...] | None,
    dry_run: bool,
) -> IndexSummary:
    """Plan each batch `reading` (the run's read of its connector) hands over and,
    unless dry, embed and write its new and changed documents while the next batch is
    read; what was indexed. The model loads only when a batch has work for it."""
    batches = planned(service, reading, plan, given)
    if dry_run:
        async for _ in batches:
            pass
        return IndexSummary()
    first = await anext(batches, None)
    if first is None:
        return IndexSummary()
    if not service.embedder_ready:
        await service.load_embedder()  # a command: the model only for a run with work
    return await service.catalog.ingest(chained(first, batches), checked=True)


async def planned(
    service: KnowledgeService, reading: Reading, plan: SyncPlan, given: tuple[str, ...] | None
) -> AsyncIterator[list[Document]]:
    """The documents of each batch to write: new or changed, chunked, compared."""
    async for batch in reading.batches():
        owned_by(batch, plan.source, given, plan.own_acl)
        fresh = plan.fresh(batch)
        changed, stored = await service.sources.compared(fresh)
        plan.count(fresh, changed, stored)
        written = [doc for doc in changed if doc.chunks or doc.id not in stored]
        if written:
            yield written


async def chained(
    first: list[Document], rest: AsyncIterable[list[Document]]
) -> AsyncIterator[list[Document]]:
    yield first
    async for batch in rest:
        yield batch


def latest(documents: list[Document]) -> list[Document]:
    """Each item once: the copy updated last, in the order first read."""
    kept: dict[str, Document] = {}
    for doc in documents:
        held = kept.get(doc.id)
        if held is None or later(doc.updated_at, held.updated_at):
            kept[doc.id] = doc
    return list(kept.values())


def later(updated: str, other: str) -> bool:
    """Whether an item updated at `updated` is as new as one at `other` or newer (an
    undated copy is: the later read wins)."""
    if not updated or not other:
        return True
    return instant(updated) >= instant(other)


def instant(text: str) -> datetime:
    """An ISO 8601 date as an instant (UTC when it names no offset)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
