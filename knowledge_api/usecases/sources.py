"""Sources: mirroring one (an ingested path, a KB host) so the index matches it, listing
them, deleting one with its documents; and the listing of a collection's documents.

A mirror is planned first, from the store alone (no model): which documents are new,
changed, unchanged, and which the source no longer produces. A plan that would delete
more than KNOWLEDGE_PRUNE_MAX_FRACTION of the source's documents is refused unless the
caller says so: a mount that came up empty must not wipe the index.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from knowledge_api.errors import CollectionNotFound, InvalidRequest, KnowledgeAPIError
from knowledge_api.models import (
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    IndexSummary,
    Progress,
    SourceInfo,
)
from knowledge_api.service import KnowledgeService

MAX_PAGE = 500


class MassDeleteRefused(KnowledgeAPIError):
    """A mirror would delete more of a source than KNOWLEDGE_PRUNE_MAX_FRACTION allows."""

    status = 409
    type = "mass_delete_refused"


@dataclass
class MirrorPlan:
    collection: str
    source: str
    added: list[Document] = field(default_factory=list)
    updated: list[Document] = field(default_factory=list)
    unchanged: int = 0
    deleted: dict[str, str] = field(default_factory=dict)
    """Document id -> source id of the stored documents the source no longer produces."""
    stored: int = 0
    """Documents the source held before."""

    @property
    def changed(self) -> list[Document]:
        return self.added + self.updated

    def lines(self) -> list[str]:
        """One line per document the mirror would write or delete, naming its file."""
        return (
            [f"add {doc.source_id}" for doc in self.added]
            + [f"update {doc.source_id}" for doc in self.updated]
            + [f"delete {source_id}" for source_id in sorted(self.deleted.values())]
        )

    def check_deletions(self, max_fraction: float, allowed: bool) -> None:
        """Refuse a plan deleting more than `max_fraction` of the source, unless `allowed`."""
        if allowed or not self.deleted or len(self.deleted) <= max_fraction * self.stored:
            return
        raise MassDeleteRefused(
            f"the source {self.source!r} would lose {len(self.deleted)} of its {self.stored} "
            f"documents, more than KNOWLEDGE_PRUNE_MAX_FRACTION ({max_fraction:g}) allows; "
            "nothing was changed. If the source really lost them, run again with "
            "--allow-mass-delete",
            source=self.source,
            deleted=len(self.deleted),
            stored=self.stored,
        )


@dataclass(frozen=True, slots=True)
class MirrorReport:
    indexed: IndexSummary
    unchanged: int
    deleted: int


async def plan_mirror(
    service: KnowledgeService,
    documents: Iterable[Document],
    source: str,
    collection: str,
    prune: bool,
    kept: Callable[[str], bool] = lambda source_id: False,
) -> MirrorPlan:
    """What mirroring `documents` as `source` would do; with `prune`, the stored documents
    it no longer produces are to be deleted, except those whose source id `kept` keeps (a
    file that could not be read this time)."""
    incoming = list(documents)
    for doc in incoming:
        doc.source = source
    store = service.store
    changed = await service.changed(incoming)
    known = await store.document_hashes([doc.id for doc in changed])
    owned = await store.source_documents(collection, source)
    plan = MirrorPlan(collection, source, unchanged=len(incoming) - len(changed), stored=len(owned))
    for doc in changed:
        (plan.updated if doc.id in known else plan.added).append(doc)
    if prune:
        produced = {doc.id for doc in incoming}
        plan.deleted = {
            doc_id: source_id
            for doc_id, source_id in owned.items()
            if doc_id not in produced and not kept(source_id)
        }
    return plan


async def mirror(
    service: KnowledgeService, plan: MirrorPlan, progress: Progress | None = None
) -> MirrorReport:
    """Carry out a plan: write what is new or changed, delete what is gone, note the run."""
    indexed = IndexSummary()
    if plan.changed:
        indexed = await service.ingest(plan.changed, progress, source=plan.source)
    deleted = await service.store.delete_documents(list(plan.deleted)) if plan.deleted else 0
    await service.store.record_source(plan.collection, plan.source)
    return MirrorReport(indexed, plan.unchanged, deleted)


# -- listings --------------------------------------------------------------------------


async def collections(
    service: KnowledgeService, visible: Callable[[str], bool]
) -> list[CollectionInfo]:
    return [info for info in await service.store.collection_stats() if visible(info.name)]


async def require_collection(
    service: KnowledgeService, collection: str, visible: Callable[[str], bool]
) -> None:
    """404 `collection_not_found` for a collection that holds nothing (no document, no
    source), listing those the caller may read. Asked only when a listing found nothing:
    counting every collection's documents costs more than a page."""
    known = set(await service.collections())
    if collection in known or await service.store.sources(collection):
        return
    known |= {info.collection for info in await service.store.sources()}
    raise CollectionNotFound(
        f"no collection {collection!r}",
        collection=collection,
        available=sorted(name for name in known if visible(name)),
    )


async def sources(service: KnowledgeService, collection: str | None) -> list[SourceInfo]:
    return await service.store.sources(collection)


async def delete_source(
    service: KnowledgeService, collection: str, name: str, visible: Callable[[str], bool]
) -> list[str] | None:
    """The ids of the source's documents, deleted with it; None when the collection
    has no such source (404 `collection_not_found`, listing those the caller may read,
    when the collection itself holds nothing)."""
    known = {info.name for info in await service.store.sources(collection)}
    owned = await service.store.source_documents(collection, name)
    deleted = await service.store.delete_source(collection, name)  # 409 where read-only
    if not deleted and name not in known:
        await require_collection(service, collection, visible)
        return None
    return sorted(owned)


async def documents(
    service: KnowledgeService, page: DocumentPage, cursor: str, visible: Callable[[str], bool]
) -> tuple[list[DocumentSummary], str | None]:
    """One page of the listing and the cursor of the next (None after the last); 404
    for a collection that holds nothing."""
    if cursor:
        page = DocumentPage(
            page.collection, page.limit, resumed_after(cursor, page), page.source_type, page.source
        )
    found = await service.store.list_documents(
        DocumentPage(page.collection, page.limit + 1, page.after, page.source_type, page.source)
    )
    if not found and not cursor:
        await require_collection(service, page.collection, visible)
    if len(found) <= page.limit:
        return found, None
    shown = found[: page.limit]
    return shown, cursor_after(page, shown[-1].id)


def listing_key(page: DocumentPage) -> list[str | None]:
    return [page.collection, page.source_type, page.source]


def cursor_after(page: DocumentPage, last_id: str) -> str:
    """Opaque to clients: the listing it belongs to and the last id it showed."""
    raw = orjson.dumps([1, *listing_key(page), last_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def resumed_after(cursor: str, page: DocumentPage) -> str:
    """The id a cursor resumes after; 400 for a cursor this listing did not give."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, *key, last_id = orjson.loads(raw)
    except (ValueError, binascii.Error, TypeError, orjson.JSONDecodeError) as e:
        raise InvalidRequest("cursor", "is not a cursor this listing gave") from e
    if version != 1 or not isinstance(last_id, str):
        raise InvalidRequest("cursor", "is not a cursor this listing gave")
    if key != listing_key(page):
        raise InvalidRequest(
            "cursor", "belongs to a listing of other parameters (collection, source_type, source)"
        )
    return last_id
