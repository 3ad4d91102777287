"""API keys: create (the token is shown once), list (never a token), revoke."""

from __future__ import annotations

import re
from collections.abc import Sequence

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import Actor, local_user
from knowledge_api.models import ApiKey
from knowledge_api.principals import groups_of, user_id
from knowledge_api.service import KnowledgeService

SCOPES = ("read", "write", "admin", "delegate")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


async def create(
    service: KnowledgeService,
    name: str,
    scopes: Sequence[str],
    collections: Sequence[str],
    actor: Actor | None = None,
    user: str = "",
    groups: Sequence[str] = (),
) -> tuple[ApiKey, str]:
    """A new key and its token; only the token's hash is stored. The audit trail says
    `actor` (default: the local user) created it. With `user` and `groups`, the key
    reads as that user, with those groups beside those the service knows for it."""
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            "--name", "must be 1-64 letters, digits, '_', '.', '@' or '-', starting with one"
        )
    unknown = sorted(set(scopes) - set(SCOPES))
    if not scopes or unknown:
        raise InvalidRequest("--scopes", f"must be a list of: {', '.join(SCOPES)}", got=unknown)
    listed = tuple(validation.collection_name(c, "--collections") for c in collections)
    reader = user_id(user, "--user") if user else ""
    held = groups_of(list(groups), "--groups")
    key, token = ApiKey.issued(name, tuple(dict.fromkeys(scopes)), listed or None, reader, held)
    await service.records.add_key(key)
    made = {"key": name, "scopes": list(key.scopes), "collections": list(listed)}
    if reader or held:
        made.update(user=reader, groups=list(held))
    await service.audit(actor or local_user(), "keys create", None, made)
    return key, token


async def listed(service: KnowledgeService) -> list[ApiKey]:
    return await service.records.keys()


async def revoke(service: KnowledgeService, name: str, actor: Actor | None = None) -> bool:
    revoked = await service.records.revoke_key(name)
    if revoked:
        await service.audit(actor or local_user(), "keys revoke", None, {"key": name})
    return revoked
