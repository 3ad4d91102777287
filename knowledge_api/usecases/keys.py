"""API keys: create (the token is shown once), list and read (never a token), revoke.

The command line (`knowledge-api keys ...`) and the HTTP routes (`/v1/knowledge/keys`)
take the same values through the same rules; an error names the field as each door
spells it (`--scopes` on the command line, `scopes` over HTTP)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, NameTaken
from knowledge_api.ledger import Actor, local_user
from knowledge_api.models import ApiKey
from knowledge_api.principals import groups_of, user_id
from knowledge_api.service import KnowledgeService

SCOPES = ("read", "write", "admin", "delegate")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
MAX_COLLECTIONS = 100
CLI = "--"
"""How the command line spells a field: `--name`."""


def key_name(value: Any, path: str = "name") -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidRequest(
            path, "must be 1-64 letters, digits, '_', '.', '@' or '-', starting with one"
        )
    return value


def scopes_of(value: Any, path: str = "scopes") -> tuple[str, ...]:
    """A non-empty list of known scopes, each once, in order."""
    listed = value if isinstance(value, list) else []
    unknown = sorted({str(each) for each in listed} - set(SCOPES))
    if not listed or unknown or not all(isinstance(each, str) for each in listed):
        raise InvalidRequest(path, f"must be a list of: {', '.join(SCOPES)}", got=unknown)
    return tuple(dict.fromkeys(listed))


def collections_of(value: Any, path: str = "collections") -> tuple[str, ...]:
    """Collection names, each once ([]: every collection)."""
    if not isinstance(value, list) or len(value) > MAX_COLLECTIONS:
        raise InvalidRequest(path, f"must be a list of at most {MAX_COLLECTIONS} collection names")
    return tuple(
        dict.fromkeys(validation.collection_name(c, f"{path}[{i}]") for i, c in enumerate(value))
    )


async def create(
    service: KnowledgeService,
    name: str,
    scopes: Sequence[str],
    collections: Sequence[str],
    actor: Actor | None = None,
    user: str = "",
    groups: Sequence[str] = (),
    *,
    prefix: str = CLI,
    action: str = "keys create",
) -> tuple[ApiKey, str]:
    """A new key and its token; only the token's hash is stored. The audit trail says
    `actor` (default: the local user) created it, under `action`. With `user` and
    `groups`, the key reads as that user, with those groups beside those the service
    knows for it. `prefix` spells the fields in errors as the door does."""
    name = key_name(name, f"{prefix}name")
    checked = scopes_of(list(scopes), f"{prefix}scopes")
    listed = collections_of(list(collections), f"{prefix}collections")
    reader = user_id(user, f"{prefix}user") if user else ""
    held = groups_of(list(groups), f"{prefix}groups")
    if await service.records.key(name) is not None:
        raise NameTaken(f"{prefix}name", "is already the name of a key", name=name)
    key, token = ApiKey.issued(name, checked, listed or None, reader, held)
    await service.records.add_key(key)
    made = {"key": name, "scopes": list(key.scopes), "collections": list(listed)}
    if reader or held:
        made.update(user=reader, groups=list(held))
    await service.audit(actor or local_user(), action, None, made)
    return await service.records.key(name) or key, token


async def listed(service: KnowledgeService) -> list[ApiKey]:
    return await service.records.keys()


async def named(service: KnowledgeService, name: str) -> ApiKey | None:
    """The key of this name (None when there is none)."""
    return await service.records.key(name)


async def revoke(
    service: KnowledgeService,
    name: str,
    actor: Actor | None = None,
    action: str = "keys revoke",
) -> bool:
    """Whether a key of that name was there to revoke: it stops working at once on this
    process and within a few seconds on every other replica and process."""
    revoked = await service.records.revoke_key(name)
    if revoked:
        await service.audit(actor or local_user(), action, None, {"key": name})
    return revoked
