"""Sources: mirroring one (an ingested path, a KB host) so the index matches it (listing
and deleting them is usecases/catalog.py).

A mirror is planned first, from the store alone (no model): which documents are new,
changed, unchanged, and which the source no longer produces. A plan that would delete
more than KNOWLEDGE_PRUNE_MAX_FRACTION of the source's documents is refused unless the
caller says so: a mount that came up empty must not wipe the index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.models import (
    Document,
    IndexSummary,
    Progress,
    document_id,
)
from knowledge_api.principals import PUBLIC_ACL
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import memberships


class SourceOverlap(KnowledgeAPIError):
    """A source would index files another source of the collection indexes already: the
    same file would be two documents, and deleting either source would take one of them."""

    status = 409
    type = "source_overlap"


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
    root: str = ""
    """The folder (resolved) or base URL the source reads its files from ('' for none)."""
    adopted: list[str] = field(default_factory=list)
    """Ids of documents of no source (stored before sources were kept) that documents
    added now replace: deleted once those are written."""
    acl: tuple[str, ...] | None = None
    """The access list given for this run (`--acl`): remembered as the source's own once
    the run writes; None: the source's own list applies (public when it has none)."""

    @property
    def changed(self) -> list[Document]:
        return self.added + self.updated

    def lines(self) -> list[str]:
        """One line per document the mirror would write or delete, naming its file."""
        return (
            [f"add {doc.source_id}" for doc in self.added]
            + [
                f"update {doc.source_id}" + ("" if doc.chunks else " (emptied: no text left)")
                for doc in self.updated
            ]
            + [f"delete {source_id}" for source_id in sorted(self.deleted.values())]
        )

    @property
    def emptied(self) -> list[Document]:
        """The stored documents the mirror would keep with no passage left."""
        return [doc for doc in self.updated if not doc.chunks]

    def refusal(self, max_fraction: float, allowed: bool) -> MassDeleteRefused | None:
        """Why a plan deleting (or emptying) more than `max_fraction` of the source is
        refused unless `allowed`; None when it is not."""
        if allowed:
            return None
        return mass_delete(
            self.source, len(self.deleted), len(self.emptied), self.stored, max_fraction
        )

    def check_deletions(self, max_fraction: float, allowed: bool) -> None:
        """Refuse a plan deleting or emptying more than `max_fraction` of the source,
        unless `allowed`."""
        refused = self.refusal(max_fraction, allowed)
        if refused is not None:
            raise refused


def mass_delete(
    source: str, deleted: int, emptied: int, stored: int, max_fraction: float
) -> MassDeleteRefused | None:
    """The refusal of a run that would delete `deleted` and empty `emptied` of the
    `stored` documents of `source`, when that is more than `max_fraction` of them."""
    lost = deleted + emptied
    if not lost or lost <= max_fraction * stored:
        return None
    some = f" ({emptied} of them emptied)" if emptied else ""
    return MassDeleteRefused(
        f"the source {source!r} would lose {lost} of its {stored} documents{some}, more "
        f"than KNOWLEDGE_PRUNE_MAX_FRACTION ({max_fraction:g}) allows; nothing was "
        "deleted. If the source really lost them, run again with --allow-mass-delete",
        source=source,
        deleted=deleted,
        emptied=emptied,
        stored=stored,
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
    root: str = "",
    acl: tuple[str, ...] | None = None,
) -> MirrorPlan:
    """What mirroring `documents` as `source` would do; with `prune`, the stored documents
    it no longer produces are to be deleted, except those whose source id `kept` keeps (a
    file that could not be read this time). With a `root` (where the source reads its
    files: their source ids are relative to it, or URLs under it), SourceOverlap when
    another source of the collection indexes one of these files already. Each document
    takes `acl`, or the source's own access list (knowledge_api.principals), unless its
    connector gave it one."""
    incoming = list(documents)
    given = acl if acl is not None else await service.sources.acl_of(collection, source)
    owned_by(incoming, source, given)
    if root:
        await refuse_overlap(service, incoming, source, collection, root)
    changed, stored = await service.sources.compared(incoming)
    owned = await service.sources.produced(collection, source)
    plan = MirrorPlan(
        collection,
        source,
        unchanged=len(incoming) - len(changed),
        stored=len(owned),
        root=root,
        acl=acl,
    )
    for doc in changed:
        (plan.updated if doc.id in stored else plan.added).append(doc)
    plan.adopted = adopted(plan.added, stored)
    if prune:
        produced = {doc.id for doc in incoming}
        plan.deleted = {
            doc_id: source_id
            for doc_id, source_id in owned.items()
            if doc_id not in produced and not kept(source_id)
        }
    return plan


def owned_by(
    documents: Iterable[Document],
    source: str,
    given: tuple[str, ...] | None,
    own_acl: bool = False,
) -> None:
    """Name `source` as the documents' own, and give them the access list `given` (the
    run's, or the source's own; None: none) unless their connector gave them one: the
    one place that decides a document's access list. With `own_acl` (a connector
    following its service's permissions) each keeps its own unless the source has a
    list that is not empty (`memberships.service_lists`)."""
    keep = own_acl and memberships.service_lists(given)
    for doc in documents:
        doc.source = source
        if given is not None and not keep and (own_acl or doc.acl == PUBLIC_ACL):
            doc.acl = given


def adopted(added: Iterable[Document], stored: set[str]) -> list[str]:
    """The ids of documents of no source (stored before sources were kept) that the
    documents `added` replace, among the ids the store holds (`stored`)."""
    unsourced = [document_id(d.collection, d.source_type, d.source_id) for d in added]
    return [doc_id for doc_id in dict.fromkeys(unsourced) if doc_id in stored]


async def mirror(
    service: KnowledgeService, plan: MirrorPlan, progress: Progress | None = None
) -> MirrorReport:
    """Carry out a plan: write what is new or changed, delete what is gone, note the run."""
    indexed, deleted = await service.sources.mirror(
        plan.changed,
        plan.collection,
        plan.source,
        list(plan.deleted),
        plan.root,
        progress,
        replaced=plan.adopted,
    )
    if plan.acl is not None:
        await service.sources.set_acl(plan.collection, plan.source, plan.acl)
    return MirrorReport(indexed, plan.unchanged, deleted)


async def refuse_overlap(
    service: KnowledgeService, incoming: list[Document], source: str, collection: str, root: str
) -> None:
    """SourceOverlap, naming both sources and a file, when another source of `collection`
    indexes one of the files `incoming` holds (the same resolved path or URL)."""
    files = {location(root, doc.source_id) for doc in incoming}
    for other in await service.sources.listed(collection):
        if other.name == source or not other.root:
            continue
        theirs = {found for file in files if (found := source_id_under(other.root, file))}
        if not theirs:
            continue
        owned = await service.sources.produced(collection, other.name)
        held = sorted(theirs & set(owned.values()))
        if held:
            raise SourceOverlap(
                f"{len(held)} of the files the source {source!r} reads are indexed by the "
                f"source {other.name!r} already (as {held[0]!r}, in {other.root}): one file "
                f"would be two documents. Index them through one source: delete "
                f"{other.name!r} first (knowledge-api sources, DELETE /v1/knowledge/sources/"
                "{name}) or leave these files out",
                source=source,
                other=other.name,
                files=held[:10],
            )


def location(root: str, source_id: str) -> str:
    """The resolved path or URL of a file a source reads from `root`."""
    return source_id if "://" in source_id else f"{root.rstrip('/')}/{source_id}"


def source_id_under(root: str, file: str) -> str | None:
    """The source id a source reading from `root` gives `file`; None when not under it."""
    prefix = root.rstrip("/") + "/"
    if not file.startswith(prefix):
        return None
    return file if "://" in root else file[len(prefix) :]
