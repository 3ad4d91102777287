"""Who may read what: the groups the service knows for a user id, and the access list of
a document or of every document of a source, changed without embedding anything again."""

from __future__ import annotations

from collections.abc import Sequence

from knowledge_api.errors import NotFound
from knowledge_api.ledger import Actor, local_user
from knowledge_api.models import Document
from knowledge_api.principals import groups_of, user_id
from knowledge_api.service import KnowledgeService


async def groups(service: KnowledgeService, user: str) -> tuple[str, ...]:
    """The groups the service knows for `user` (none when it knows none)."""
    return await service.records.groups(user_id(user, "id"))


async def set_groups(
    service: KnowledgeService, user: str, names: Sequence[str], actor: Actor | None = None
) -> tuple[str, ...]:
    """Replace the groups of `user`: in force at once here, within a few seconds on every
    other replica and process (as a revoked key)."""
    user = user_id(user, "id")
    checked = groups_of(list(names))
    await service.records.set_groups(user, checked)
    changed = {"principal": user, "groups": list(checked)}
    await service.audit(actor or local_user(), "groups set", None, changed)
    return checked


async def set_document_acl(
    service: KnowledgeService,
    doc: Document,
    acl: tuple[str, ...],
    action: str,
    actor: Actor | None = None,
) -> dict[str, object]:
    """Give one document the access list `acl`; what changed, as its audit record says."""
    changed = await service.sources.set_document_acls([doc.id], acl)
    if not changed:
        raise NotFound(f"no document with id {doc.id!r}", id=doc.id)
    said: dict[str, object] = {"ids": [doc.id], "acl": list(acl), "documents": 1, "embedded": 0}
    await service.audit(actor or local_user(), action, doc.collection, said)
    return said


async def source_documents(service: KnowledgeService, collection: str, source: str) -> list[str]:
    """The ids of the documents of a source; 404 for a source the collection lacks."""
    known = {info.name for info in await service.sources.listed(collection)}
    owned = await service.sources.produced(collection, source)
    if source not in known and not owned:
        raise NotFound(
            f"no source {source!r} in collection {collection!r}",
            source=source,
            collection=collection,
        )
    return sorted(owned)


async def set_source_acl(
    service: KnowledgeService,
    collection: str,
    source: str,
    acl: tuple[str, ...],
    action: str,
    actor: Actor | None = None,
) -> dict[str, object]:
    """Give every document of a source the access list `acl`, and remember it as the
    source's default for the documents its next runs write; 404 for an unknown source."""
    owned = await source_documents(service, collection, source)
    changed = await service.sources.set_document_acls(owned, acl)
    await service.sources.set_acl(collection, source, acl)
    said: dict[str, object] = {
        "source": source,
        "acl": list(acl),
        "documents": changed,
        "embedded": 0,
    }
    await service.audit(actor or local_user(), action, collection, said)
    return said
