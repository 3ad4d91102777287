"""Who may read what: the groups the service knows for a user id, and the access list of
a document or of every document of a source, changed without embedding anything again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Source:
    """A source of a collection, named: every document it produced, and its next runs'."""

    collection: str
    name: str


async def set_acl(
    service: KnowledgeService,
    target: Document | Source,
    acl: tuple[str, ...],
    action: str,
    actor: Actor | None = None,
) -> dict[str, object]:
    """Give one document, or every document of a source (and the documents its next
    runs write), the access list `acl`, embedding nothing again; what changed, as its
    audit record says. 404 for a document or a source that is gone."""
    if isinstance(target, Document):
        said: dict[str, object] = {"ids": [target.id]}
        if not await service.sources.set_document_acls([target.id], acl):
            raise NotFound(f"no document with id {target.id!r}", id=target.id)
        changed = 1
    else:
        said = {"source": target.name}
        owned = await source_documents(service, target.collection, target.name)
        changed = await service.sources.set_document_acls(owned, acl)
        await service.sources.set_acl(target.collection, target.name, acl)
    said.update({"acl": list(acl), "documents": changed, "embedded": 0})
    await service.audit(actor or local_user(), action, target.collection, said)
    return said
