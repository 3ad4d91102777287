"""Adopting a database that other pipelines already fill (`knowledge-api migrate --adopt`).

The tables `siam_vectors` and `wiki_documents` keep their shape, rows and functions
(`match_siam_vectors_gemini` included, whatever its signature): the adoption only adds,
online, what the service searches with — expression indexes built CONCURRENTLY (no
table rewrite), and functions named `knowledge_*`. Every step is recorded
with the SQL that takes it back in `knowledge_adoption`, so `migrate --undo` removes
exactly what was added, newest first, and then the record itself.

Two columns are added, each of one statement that rewrites nothing: `knowledge_acl`
on both tables (who may read each row, `{public}` unless the service is told otherwise,
under a GIN index), and, with `--wiki-vectors` (stores/existing/wiki_vectors.py), a
`knowledge_embedding vector(d)` column on wiki pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from knowledge_api.errors import ConfigurationError

RECORD = "knowledge_adoption"
LOCK_TIMEOUT = "5s"
"""How long a step waits for a lock: an ALTER queued behind a long transaction would
block every reader of the table behind it; failing is better, and the step can be rerun."""
ORIGINAL_COLUMNS = {
    "siam_vectors": {
        "id",
        "organization",
        "division",
        "app_under_test",
        "content",
        "embedding",
        "source_type",
        "source_id",
        "metadata",
    },
    "wiki_documents": {"id", "title", "markdown_content", "url", "app_name"},
}
"""What the service reads of each table (the spec's shape): adoption needs them all."""


@dataclass(frozen=True, slots=True)
class Step:
    """One change to the database and the SQL that takes it back (a concurrent step
    builds the index its name names)."""

    name: str
    sql: str
    undo: str
    concurrent: bool = False
    """CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction."""


def sql_file(name: str) -> str:
    return resources.files("knowledge_api.stores.sql").joinpath("adopt", name).read_text()


def gin_index(name: str, table: str, document: str) -> Step:
    return concurrent_index(name, table, f"gin (to_tsvector('english'::regconfig, {document}))")


def hnsw_index(name: str, table: str, column: str) -> Step:
    method = f"hnsw ({column} vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    return concurrent_index(name, table, method)


def concurrent_index(name: str, table: str, method: str) -> Step:
    """An index built without locking writes out, and dropped the same way."""
    return Step(
        name,
        f"CREATE INDEX CONCURRENTLY {name} ON {table} USING {method}",
        f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        concurrent=True,
    )


def functions(name: str, script: str, signatures: Sequence[str]) -> Step:
    drops = "; ".join(f"DROP FUNCTION IF EXISTS {signature}" for signature in signatures)
    return Step(name, sql_file(script), drops)


SEARCH_FUNCTIONS = (
    "knowledge_adopted_generation()",
    "knowledge_search_wiki_documents(text, integer, text)",
    "knowledge_search_siam_vectors(text, integer, text[], text, text, text, jsonb)",
    "knowledge_match_siam_vectors(vector, integer, text[], text, text, text, jsonb)",
    "knowledge_adopted_pattern(text)",
    "knowledge_adopted_terms(text)",
)


SEARCH_STEP = "knowledge_search_functions"
WIKI_COLUMN = "knowledge_wiki_embedding_column"
WIKI_VECTORS = "knowledge_wiki_vector_function"
"""The step after which wiki pages are searched by meaning."""


ACL_COLUMN = "knowledge_acl"
ACL_STEP = "knowledge_acl_functions"
"""The step after which rows keep access lists the searches apply."""
ACL_FUNCTIONS = (
    "knowledge_acl_passes(text[], text[], jsonb)",
    "knowledge_match_siam_vectors(vector, integer, text[], text, text, text, jsonb, text[], jsonb)",
    "knowledge_search_siam_vectors(text, integer, text[], text, text, text, jsonb, text[], jsonb)",
    "knowledge_search_wiki_documents(text, integer, text, text[], jsonb)",
    "knowledge_set_siam_acl(text, text, text[])",
    "knowledge_set_wiki_acl(text, text[])",
)
WIKI_ACL_VECTORS = "knowledge_wiki_acl_vector_function"
"""Wiki pages by meaning within access lists: once both the wiki vectors and the access
lists are there, whichever came last."""


def acl_steps() -> list[Step]:
    """Who may read each row: a `knowledge_acl text[]` column on both tables, `{public}`
    for every row until the service is told otherwise (a constant default: no rewrite),
    a GIN index over it, and the writes and searches that use it (replacing those of
    SEARCH_STEP, which `--undo` then finds gone)."""
    steps: list[Step] = []
    for table in ("siam_vectors", "wiki_documents"):
        steps.append(
            Step(
                f"knowledge_{table}_acl",
                f"ALTER TABLE {table} ADD COLUMN {ACL_COLUMN} text[] NOT NULL DEFAULT '{{public}}'",
                f"ALTER TABLE {table} DROP COLUMN IF EXISTS {ACL_COLUMN}",
            )
        )
        steps.append(concurrent_index(f"knowledge_{table}_acl_index", table, f"gin ({ACL_COLUMN})"))
    return [*steps, functions(ACL_STEP, "acl_search.sql", ACL_FUNCTIONS)]


def wiki_acl_step() -> Step:
    return functions(
        WIKI_ACL_VECTORS,
        "wiki_acl_search.sql",
        ["knowledge_match_wiki_documents(vector, integer, text, text[], jsonb)"],
    )


def adopt_steps(has_vector_index: bool) -> list[Step]:
    """What the service needs of the original tables. An existing vector index on
    siam_vectors.embedding is used as it is; otherwise one is built."""
    steps = [
        gin_index("knowledge_siam_vectors_fts", "siam_vectors", "coalesce(content, '')"),
        gin_index(
            "knowledge_wiki_documents_fts",
            "wiki_documents",
            "coalesce(title, '') || ' ' || coalesce(markdown_content, '')",
        ),
        Step(
            "knowledge_siam_vectors_source",
            "CREATE INDEX CONCURRENTLY knowledge_siam_vectors_source "
            "ON siam_vectors (source_type, source_id)",
            "DROP INDEX CONCURRENTLY IF EXISTS knowledge_siam_vectors_source",
            concurrent=True,
        ),
        functions(SEARCH_STEP, "search.sql", SEARCH_FUNCTIONS),
        *acl_steps(),
    ]
    if not has_vector_index:
        steps.insert(0, hnsw_index("knowledge_siam_vectors_embedding", "siam_vectors", "embedding"))
    return steps


def wiki_column_step(dimension: int) -> Step:
    return Step(
        WIKI_COLUMN,
        f"ALTER TABLE wiki_documents ADD COLUMN knowledge_embedding vector({dimension})",
        "ALTER TABLE wiki_documents DROP COLUMN IF EXISTS knowledge_embedding",
    )


WIKI_SEARCH_STEPS = [
    hnsw_index("knowledge_wiki_documents_embedding", "wiki_documents", "knowledge_embedding"),
    functions(
        WIKI_VECTORS,
        "wiki_search.sql",
        ["knowledge_match_wiki_documents(vector, integer, text)"],
    ),
]


# -- what the database holds -------------------------------------------------------------


async def applied_steps(conn: Any) -> list[str]:
    """Names of the recorded steps, oldest first (none before an adoption)."""
    if await conn.fetchval(f"SELECT to_regclass('{RECORD}')") is None:
        return []
    return [r["name"] for r in await conn.fetch(f"SELECT name FROM {RECORD} ORDER BY position")]


async def check_adoptable(conn: Any) -> None:
    """The original tables are there with the columns the service reads, and this is
    not a database of the service's own schema."""
    if await conn.fetchval("SELECT to_regclass('knowledge_schema_migrations')") is not None:
        raise ConfigurationError(
            "this database holds the service's own schema (knowledge_schema_migrations): "
            "serve it with KNOWLEDGE_SCHEMA_MODE=own; there is nothing to adopt"
        )
    for table, needed in ORIGINAL_COLUMNS.items():
        rows = await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) "
            "AND attnum > 0 AND NOT attisdropped",
            table,
        )
        missing = needed - {r["attname"] for r in rows}
        if missing:
            raise ConfigurationError(
                f"cannot adopt {table}: it lacks column(s) {', '.join(sorted(missing))} "
                "(or the table itself)"
            )


async def has_vector_index(conn: Any) -> bool:
    """An index of any kind over siam_vectors.embedding already exists."""
    found = await conn.fetchval(
        """SELECT count(*) FROM pg_index i JOIN pg_attribute a
               ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
           WHERE i.indrelid = 'siam_vectors'::regclass AND a.attname = 'embedding'"""
    )
    return bool(found)


async def adoption_plan(conn: Any) -> list[Step]:
    """The steps `--adopt` would apply now (none once adopted)."""
    await check_adoptable(conn)
    done = set(await applied_steps(conn))
    steps = adopt_steps(await has_vector_index(conn))
    if WIKI_VECTORS in done:  # adopted before access lists were kept
        steps.append(wiki_acl_step())
    return [s for s in steps if s.name not in done]


# -- applying and undoing ---------------------------------------------------------------


async def apply(
    conn: Any,
    steps: Sequence[Step],
    report: Callable[[str], None],
    lock_timeout: str = LOCK_TIMEOUT,
) -> None:
    """Apply the steps in order, each recorded once it is done. A step that fails leaves
    nothing behind (an index built half-way is dropped) and stops the run."""
    await conn.execute(f"SET lock_timeout = '{lock_timeout}'")
    await conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {RECORD} (
               position serial PRIMARY KEY,
               name text NOT NULL UNIQUE,
               undo text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now());
            -- Supabase grants new public tables to its API roles: not this one.
            DO $$ BEGIN
                IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'anon') THEN
                    REVOKE ALL ON {RECORD} FROM anon, authenticated;
                END IF;
            END $$"""
    )
    for step in steps:
        report(step.name)
        if step.concurrent:
            try:
                await conn.execute(step.sql)
            except Exception:
                if await conn.fetchval("SELECT to_regclass($1)", step.name) is not None:
                    await conn.execute(step.undo)  # the INVALID index of a failed build
                raise
            await record(conn, step)
        else:
            async with conn.transaction():
                await conn.execute(step.sql)
                await record(conn, step)


async def record(conn: Any, step: Step) -> None:
    await conn.execute(f"INSERT INTO {RECORD} (name, undo) VALUES ($1, $2)", step.name, step.undo)


async def undo_plan(conn: Any) -> list[tuple[str, str]]:
    """(name, undo SQL) of every recorded step, newest first."""
    if await conn.fetchval(f"SELECT to_regclass('{RECORD}')") is None:
        return []
    rows = await conn.fetch(f"SELECT name, undo FROM {RECORD} ORDER BY position DESC")
    return [(r["name"], r["undo"]) for r in rows]


async def undo(conn: Any, report: Callable[[str], None]) -> list[str]:
    """Take back every recorded step, newest first, then drop the record: the database
    is as it was before the adoption. Names of the steps undone."""
    await conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    undone = []
    for name, sql in await undo_plan(conn):
        report(name)
        for statement in sql.split("; "):
            await conn.execute(statement)
        await conn.execute(f"DELETE FROM {RECORD} WHERE name = $1", name)
        undone.append(name)
    await conn.execute(f"DROP TABLE IF EXISTS {RECORD}")
    return undone
