"""API keys as the stores keep them: a name, the SHA-256 of the token (the token itself
is shown once and never stored), scopes, and the collections the key may reach.

Keys live in the store's own database, so every replica sees the same ones: a table of
the SQLite file (`SQLiteKeys`, also used beside Chroma and Qdrant, whose engines have
no tables) or of the Postgres schema (`SiamKeys`, for the postgres and supabase stores).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from cachetools import TTLCache

from knowledge_api.errors import BackendConnectionError, NameTaken
from knowledge_api.models import ApiKey, token_hash
from knowledge_api.stores.tables.database import SQLiteTables
from knowledge_api.stores.tables.schema import SchemaTables


class KeyStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def add(self, key: ApiKey) -> None:
        """Store a new key; a name in use is NameTaken."""

    async def find(self, key_hash: str) -> ApiKey | None: ...

    async def all(self) -> list[ApiKey]: ...

    async def named(self, name: str) -> ApiKey | None: ...

    async def revoke(self, name: str) -> bool: ...

    async def groups(self, user: str) -> tuple[str, ...]:
        """The groups the service knows for a user id (none when it knows none)."""

    async def set_groups(self, user: str, groups: Sequence[str]) -> None:
        """Replace the groups of a user id (none: it is forgotten)."""

    async def source_acl(self, collection: str, source: str) -> tuple[str, ...] | None:
        """The access list a source gives the documents it writes; None when it has none
        of its own (its documents are public)."""

    async def set_source_acl(self, collection: str, source: str, acl: Sequence[str]) -> None:
        """Remember a source's access list (empty: closed)."""


KEY_CACHE_SECONDS = 5.0


class RememberedKeys:
    """A key store that remembers the keys it found for a few seconds, so checking a
    token costs no round trip on most requests; a revoked key stops working within
    KEY_CACHE_SECONDS on every replica, at once on the one that revoked it."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._known: TTLCache[str, ApiKey] = TTLCache(10_000, KEY_CACHE_SECONDS)
        self._groups: TTLCache[str, tuple[str, ...]] = TTLCache(10_000, KEY_CACHE_SECONDS)

    async def open(self) -> None:
        await self.keys.open()

    async def close(self) -> None:
        await self.keys.close()

    async def add(self, key: ApiKey) -> None:
        await self.keys.add(key)

    async def for_token(self, token: str) -> ApiKey | None:
        known = self.remembered(token)
        if known is None:
            known = await self.keys.find(token_hash(token))
            if known is not None:
                self._known[token] = known
        return known

    def remembered(self, token: str) -> ApiKey | None:
        """The key of this token if it was found in the last KEY_CACHE_SECONDS: what most
        requests need, without a round trip or even an await."""
        # Remembered by the token itself, only in this process's memory (which holds
        # it anyway while a request runs): a request with a known key hashes nothing.
        try:  # not TTLCache.get, which looks the token up twice
            return self._known[token]
        except KeyError:
            return None

    async def all(self) -> list[ApiKey]:
        return await self.keys.all()

    async def named(self, name: str) -> ApiKey | None:
        return await self.keys.named(name)

    async def revoke(self, name: str) -> bool:
        revoked = await self.keys.revoke(name)
        self._known.clear()
        return revoked

    async def groups(self, user: str) -> tuple[str, ...]:
        """A user's groups as the service knows them, remembered as keys are: a change
        is in force at once here and within KEY_CACHE_SECONDS on every other replica."""
        try:
            return self._groups[user]
        except KeyError:
            found = self._groups[user] = await self.keys.groups(user)
            return found

    async def set_groups(self, user: str, groups: Sequence[str]) -> None:
        await self.keys.set_groups(user, groups)
        self._groups.pop(user, None)

    async def source_acl(self, collection: str, source: str) -> tuple[str, ...] | None:
        return await self.keys.source_acl(collection, source)

    async def set_source_acl(self, collection: str, source: str, acl: Sequence[str]) -> None:
        await self.keys.set_source_acl(collection, source, acl)


class SQLiteKeys(SQLiteTables):
    """Keys in a table of a SQLite file (the sqlite store's own, or beside another store)."""

    SCHEMA = (
        """CREATE TABLE IF NOT EXISTS api_keys (
        name TEXT PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        collections TEXT,
        created_at TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS principals (
        id TEXT PRIMARY KEY,
        groups TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS source_acls (
        collection TEXT NOT NULL,
        source TEXT NOT NULL,
        acl TEXT NOT NULL,
        PRIMARY KEY (collection, source))""",
    )
    ADDED = (
        "ALTER TABLE api_keys ADD COLUMN user_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE api_keys ADD COLUMN groups TEXT NOT NULL DEFAULT ''",
    )

    WHAT = "API keys"

    def _failed(self, error: sqlite3.Error) -> Exception:
        if isinstance(error, sqlite3.IntegrityError):
            return NameTaken("name", "is already the name of a key")
        return super()._failed(error)

    async def add(self, key: ApiKey) -> None:
        collections = None if key.collections is None else ",".join(key.collections)
        await self._run(
            "INSERT INTO api_keys (name, key_hash, scopes, collections, created_at, user_id, "
            "groups) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key.name,
                key.key_hash,
                ",".join(key.scopes),
                collections,
                now(),
                key.user,
                ",".join(key.groups),
            ),
        )

    async def find(self, key_hash: str) -> ApiKey | None:
        rows = await self._run("SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,))
        return sqlite_key(rows[0]) if rows else None

    async def all(self) -> list[ApiKey]:
        return [sqlite_key(row) for row in await self._run("SELECT * FROM api_keys ORDER BY name")]

    async def named(self, name: str) -> ApiKey | None:
        rows = await self._run("SELECT * FROM api_keys WHERE name = ?", (name,))
        return sqlite_key(rows[0]) if rows else None

    async def revoke(self, name: str) -> bool:
        return bool(await self._run("DELETE FROM api_keys WHERE name = ? RETURNING 1", (name,)))

    async def groups(self, user: str) -> tuple[str, ...]:
        rows = await self._run("SELECT groups FROM principals WHERE id = ?", (user,))
        return split(rows[0][0]) if rows else ()

    async def set_groups(self, user: str, groups: Sequence[str]) -> None:
        if not groups:
            await self._run("DELETE FROM principals WHERE id = ?", (user,))
            return
        await self._run(
            "INSERT INTO principals (id, groups) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET groups = excluded.groups",
            (user, ",".join(groups)),
        )

    async def source_acl(self, collection: str, source: str) -> tuple[str, ...] | None:
        rows = await self._run(
            "SELECT acl FROM source_acls WHERE collection = ? AND source = ?", (collection, source)
        )
        return tuple(json.loads(rows[0][0])) if rows else None

    async def set_source_acl(self, collection: str, source: str, acl: Sequence[str]) -> None:
        await self._run(
            "INSERT INTO source_acls (collection, source, acl) VALUES (?, ?, ?) "
            "ON CONFLICT (collection, source) DO UPDATE SET acl = excluded.acl",
            (collection, source, json.dumps(list(acl))),
        )


def split(listed: str) -> tuple[str, ...]:
    return tuple(each for each in listed.split(",") if each)


def sqlite_key(row: Sequence[Any]) -> ApiKey:
    name, key_hash, scopes, collections, created_at, user, groups = row
    listed = None if collections is None else split(collections)
    return ApiKey(name, key_hash, tuple(scopes.split(",")), listed, created_at, user, split(groups))


class SiamKeys(SchemaTables):
    """Keys in the Postgres schema, through the store's own primitives (a direct
    connection for postgres, PostgREST for supabase)."""

    COLUMNS = "name,key_hash,scopes,collections,created_at,user_id,groups"

    async def add(self, key: ApiKey) -> None:
        rows = await self.store.call(
            "knowledge_api_key_create",
            {
                "key_name": key.name,
                "key_hash": key.key_hash,
                "key_scopes": list(key.scopes),
                "key_collections": None if key.collections is None else list(key.collections),
                "key_user": key.user,
                "key_groups": list(key.groups),
            },
            BackendConnectionError,
        )
        if not rows:
            raise NameTaken("name", "is already the name of a key")

    async def find(self, key_hash: str) -> ApiKey | None:
        rows = await self.store.select(
            "knowledge_api_keys", self.COLUMNS, ("key_hash", "eq", key_hash)
        )
        return siam_key(rows[0]) if rows else None

    async def all(self) -> list[ApiKey]:
        rows = await self.store.select("knowledge_api_keys", self.COLUMNS, order="name")
        return [siam_key(row) for row in rows]

    async def named(self, name: str) -> ApiKey | None:
        rows = await self.store.select("knowledge_api_keys", self.COLUMNS, ("name", "eq", name))
        return siam_key(rows[0]) if rows else None

    async def revoke(self, name: str) -> bool:
        rows = await self.store.call(
            "knowledge_api_key_revoke", {"key_name": name}, BackendConnectionError
        )
        return bool(rows)

    async def groups(self, user: str) -> tuple[str, ...]:
        rows = await self.store.select("knowledge_principals", "groups", ("id", "eq", user))
        return tuple(rows[0]["groups"]) if rows else ()

    async def set_groups(self, user: str, groups: Sequence[str]) -> None:
        params = {"principal_id": user, "principal_groups": list(groups)}
        await self.store.call("knowledge_principal_set", params, BackendConnectionError)

    async def source_acl(self, collection: str, source: str) -> tuple[str, ...] | None:
        rows = await self.store.select(
            "knowledge_source_acls",
            "acl",
            ("collection", "eq", collection),
            ("source", "eq", source),
        )
        return tuple(rows[0]["acl"]) if rows else None

    async def set_source_acl(self, collection: str, source: str, acl: Sequence[str]) -> None:
        params = {"acl_collection": collection, "acl_source": source, "source_acl": list(acl)}
        await self.store.call("knowledge_source_acl_set", params, BackendConnectionError)


def siam_key(row: dict[str, Any]) -> ApiKey:
    collections = row["collections"]
    created = row["created_at"]
    return ApiKey(
        row["name"],
        row["key_hash"],
        tuple(row["scopes"]),
        None if collections is None else tuple(collections),
        created if isinstance(created, str) else created.isoformat(timespec="seconds"),
        row.get("user_id") or "",
        tuple(row.get("groups") or ()),
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
