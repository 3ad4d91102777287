"""The groups a connector source grants users, from its service's permissions
(connectors/access.py): after each run, every user the service puts in one of the
source's groups holds it, and a user it no longer puts there loses it, unless another
source still grants it. Groups set by hand (`groups set`, `PUT /principals/{id}`) stay;
a user whose list was replaced by hand gets the source's groups back at its next run.
A change of the access list of a whole scope (a repository made private, a channel
converted) is given to the stored documents under it that the run did not read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from knowledge_api.ledger import Actor
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService

REMOVED = Actor("sources-remove")
"""Who takes back a removed source's groups, as the audit trail names it."""


def service_lists(given: tuple[str, ...] | None) -> bool:
    """Whether the documents of a source following its service's permissions keep the
    access lists the service gives them: unless the source has a list of its own that is
    not empty (closed, the default of a connector source, leaves them theirs)."""
    return not given


def by_user(members: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Group -> users as user -> groups."""
    held: dict[str, set[str]] = {}
    for group, users in members.items():
        for user in users:
            held.setdefault(user, set()).add(group)
    return held


async def granted_elsewhere(service: KnowledgeService, info: SourceInfo) -> dict[str, set[str]]:
    """User -> the groups the other connector sources grant them."""
    held: dict[str, set[str]] = {}
    for other, source in await service.catalog.connector_sources(None):
        if (other.collection, other.name) != (info.collection, info.name):
            for user, groups in by_user(source.members).items():
                held.setdefault(user, set()).update(groups)
    return held


async def follow(
    service: KnowledgeService,
    info: SourceInfo,
    source: ConnectorSource,
    members: Mapping[str, set[str]] | None,
    actor: Actor,
) -> dict[str, list[str]]:
    """Give users the groups of `members` and take back those the source granted before
    and grants no more: what the source grants now, for its record (its record's as it
    was when the kind maps no permissions)."""
    if members is None:
        return source.members
    before, now = by_user(source.members), by_user(members)
    others = await granted_elsewhere(service, info) if before else {}
    added = removed = 0
    for user in sorted(before.keys() | now.keys()):
        current = await service.records.groups(user)
        gained = now.get(user, set())
        lapsed = before.get(user, set()) - gained - others.get(user, set())
        kept = [group for group in current if group not in lapsed]
        new = sorted(gained - set(current))
        if new or len(kept) < len(current):
            await service.records.set_groups(user, (*kept, *new))
            added, removed = added + len(new), removed + len(current) - len(kept)
    if added or removed:
        changed = {"source": info.name, "granted": added, "revoked": removed}
        await service.audit(actor, f"sources sync {info.name} groups", info.collection, changed)
    # a group with nobody in it now is kept, to be asked again; one gone is not
    return {group: sorted(users) for group, users in sorted(members.items())}


async def rescope(
    service: KnowledgeService,
    info: SourceInfo,
    source: ConnectorSource,
    scopes: Mapping[str, tuple[str, ...]] | None,
    owned: Mapping[str, str],
    given: tuple[str, ...] | None,
) -> dict[str, list[str]]:
    """Give the stored documents (`owned`: id -> source id) under each source-id prefix
    whose access list changed since the last run that list, embedding nothing (a
    source with an access list of its own, `given`, keeps it); what the source's record
    keeps."""
    if scopes is None:
        return source.scopes
    if service_lists(given):
        for prefix, acl in scopes.items():
            if source.scopes.get(prefix) == list(acl):
                continue
            ids = [doc_id for doc_id, source_id in owned.items() if source_id.startswith(prefix)]
            if ids:
                await service.sources.set_document_acls(ids, acl)
    return {prefix: list(acl) for prefix, acl in sorted(scopes.items())}


async def released(service: KnowledgeService, collection: str, name: str) -> None:
    """Take back the groups a connector source being removed granted (those another
    source still grants stay)."""
    for info, source in await service.catalog.connector_sources(collection):
        if info.name == name and source.members:
            await follow(service, info, source, {}, REMOVED)
