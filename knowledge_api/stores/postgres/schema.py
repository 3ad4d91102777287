"""The service's own Postgres schema: the numbered migrations of stores/sql/postgres/,
applied in one transaction under an advisory lock, and the record of those applied
(`knowledge_schema_migrations`: version and name, never the text).

Each SQL function's current definition is a file of its own in functions/; the
migration that last (re)defines it includes it with a psql-style `\\ir` line, and
earlier migrations keep the definitions they made then. A database migrated step by
step and a new one end with the same functions.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from knowledge_api.errors import ConfigurationError
from knowledge_api.models import chunk_id, document_id

MIGRATION_LOCK = 7_304_251_911  # pg_advisory_xact_lock key: one migrator at a time
INCLUDE = re.compile(r"^\\ir (\S+)$", re.MULTILINE)
"""A line naming a file (relative to the migration's folder) whose text stands there."""


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every numbered migration, in order, includes expanded."""
    folder = resources.files("knowledge_api.stores.sql").joinpath("postgres")
    found = [
        (
            int(script.name.split("_", 1)[0]),
            script.name.removesuffix(".sql"),
            expanded(script.read_text(), folder),
        )
        for script in folder.iterdir()
        if script.name.endswith(".sql")
    ]
    return sorted(found)


def expanded(sql: str, folder: Traversable) -> str:
    """`sql` with each `\\ir` line replaced by the text of the file it names."""
    return INCLUDE.sub(lambda m: folder.joinpath(m.group(1)).read_text().rstrip("\n"), sql)


async def applied_versions(conn: Any) -> set[int]:
    if await conn.fetchval("SELECT to_regclass('knowledge_schema_migrations')") is None:
        return set()
    return {
        r["version"] for r in await conn.fetch("SELECT version FROM knowledge_schema_migrations")
    }


async def migrate(conn: Any, dimension: int) -> list[str]:
    """Apply the migrations the database lacks, in one transaction; their names.

    `{{dimension}}` in a migration is the embedder's dimension: the vector columns are
    made for the embedder configured when the schema is created. A database already up
    to date is only read, so a read-only one still serves."""
    versions = await applied_versions(conn)
    if versions >= {version for version, _, _ in migrations()}:
        return []
    if not versions and await conn.fetchval("SELECT to_regclass('siam_vectors')") is not None:
        raise ConfigurationError(
            "the database already holds siam_vectors, not made by this service: other "
            "pipelines fill it. Serve it as it is with KNOWLEDGE_SCHEMA_MODE=read_only, or "
            "adopt it with `knowledge-api migrate --adopt` and KNOWLEDGE_SCHEMA_MODE=adopted"
        )
    async with conn.transaction():
        await conn.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS knowledge_schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {
            r["version"]
            for r in await conn.fetch("SELECT version FROM knowledge_schema_migrations")
        }
        applied = []
        for version, name, sql in migrations():
            if version in done:
                continue
            await conn.execute(sql.replace("{{dimension}}", str(dimension)))
            if version in STEPS:
                await STEPS[version](conn)
            await conn.execute(
                "INSERT INTO knowledge_schema_migrations (version, name) VALUES ($1, $2)",
                version,
                name,
            )
            applied.append(name)
    return applied


async def rekey_sourced_documents(conn: Any) -> None:
    """The documents of a source take the ids that name it (models.document_id), their
    passages the ids that follow (the passages' and pages' references follow by ON
    UPDATE CASCADE, migration 017): ids are uuid5, which SQL computes only with an
    extension, so they are computed here."""
    rows = await conn.fetch(
        "SELECT id, collection, source_type, source_id, source FROM knowledge_documents "
        "WHERE source <> ''"
    )
    moved = {
        str(r["id"]): document_id(r["collection"], r["source_type"], r["source_id"], r["source"])
        for r in rows
    }
    moved = {old: new for old, new in moved.items() if old != new}
    if not moved:
        return
    await conn.execute(
        "UPDATE knowledge_documents d SET id = m.new "
        "FROM unnest($1::uuid[], $2::uuid[]) AS m(old, new) WHERE d.id = m.old",
        list(moved),
        list(moved.values()),
    )
    passages = await conn.fetch(
        "SELECT id, document_id, chunk_index FROM siam_vectors WHERE document_id = ANY($1::uuid[])",
        list(moved.values()),
    )
    await conn.execute(
        "UPDATE siam_vectors v SET id = m.new "
        "FROM unnest($1::uuid[], $2::uuid[]) AS m(old, new) WHERE v.id = m.old",
        [str(p["id"]) for p in passages],
        [chunk_id(str(p["document_id"]), p["chunk_index"]) for p in passages],
    )


STEPS: dict[int, Callable[[Any], Awaitable[None]]] = {17: rekey_sourced_documents}
"""What a migration needs done beside its SQL, run right after it in its transaction."""
