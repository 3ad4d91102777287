"""The `postgres` store: the production schema over a direct connection (asyncpg pool).

Vectors are searched by pgvector's HNSW index, keywords by full text (tsvector + GIN);
both go through the SQL functions in stores/sql/postgres/ and are fused by the shared
`HybridSearch`. With no KNOWLEDGE_DATABASE_URL the store starts the pip-installed
embedded Postgres (with pgvector) in KNOWLEDGE_POSTGRES_DATA_DIR (server.py). Opening the
store applies the migrations the database lacks (schema.py); `knowledge-api migrate` does
it ahead of time.
Writes go by COPY, one transaction per call or migrated collection (postgres/load.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError, IndexingError, KnowledgeStoreError
from knowledge_api.models import Document, EmbedderIdentity
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.postgres.codecs import register_codecs
from knowledge_api.stores.postgres.load import load
from knowledge_api.stores.postgres.options import DEFAULT_OPTIONS, PostgresOptions
from knowledge_api.stores.postgres.replicas import (
    EVERY_COLLECTION,
    PRIMARY_POSITION,
    Reading,
    Replicas,
    open_errors,
    read_urls,
    redact,
    require_asyncpg,
)
from knowledge_api.stores.postgres.rows import (
    Condition,
    FunctionCall,
    Row,
    Selection,
    where_sql,
)
from knowledge_api.stores.postgres.schema import migrate
from knowledge_api.stores.postgres.server import embedded_server_url, release_embedded_server
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.reconnect import Reconnect, reason

log = logging.getLogger("knowledge_api")
COMMAND_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
"""Seconds a new connection may take (asyncpg waits 60), so that a server that takes
connections and never answers fails a request in seconds, saying so."""
ANALYZE_AFTER = 1000
"""Passages written before the planner's statistics are refreshed (or a fifth of the
table, when that is more): plans stay right after a bulk load, before autovacuum."""


class PostgresStore(SiamStore):
    name = "postgres"

    def __init__(
        self,
        url: Secret,
        data_dir: Path,
        dimension: int = 384,
        options: PostgresOptions = DEFAULT_OPTIONS,
        replicas: Replicas | None = None,
        tuning: SearchTuning = DEFAULT_TUNING,
        ef_search: int = 100,
    ) -> None:
        super().__init__(tuning, ef_search)
        self.url = url
        self.data_dir = data_dir
        self.dimension = dimension
        self.options = options
        self.replicas = replicas or Replicas(())
        """The read replicas (KNOWLEDGE_DATABASE_READ_URLS), watched while the store is open."""
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
            "options": PostgresOptions.of(settings),
            "replicas": Replicas(
                read_urls(settings.database_read_urls.get()),
                check_ms=settings.replica_check_ms,
                max_lag_ms=settings.replica_max_lag_ms,
                pool_size=settings.postgres_pool_size,
            ),
        }

    def __repr__(self) -> str:
        return f"PostgresStore({self.where()!r})"

    def where(self) -> str:
        return redact(self.url.get()) if self.url else f"embedded:{self.data_dir}"

    def location(self) -> dict[str, Any]:
        if not self.replicas:
            return {"database": self.where()}
        return {"database": self.where(), "replicas": self.replicas.report()}

    def replicas_down(self) -> bool:
        return self.replicas.down()

    def reads(self) -> dict[str, int]:
        return dict(self.replicas.reads)

    # -- connection -------------------------------------------------------------------

    async def open(self) -> None:
        await self._connect()
        await self._acknowledged(None)  # the schema as opened (migrated, perhaps) is read
        if self.replicas:
            await self.replicas.start(await self._url())

    async def close(self) -> None:
        await self.replicas.stop()
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
            url = (await self._migrate())[0] if self.options.manage_schema else await self._url()
            self._pool = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=self.options.pool_size,
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
        """All of `documents` in one transaction, by COPY (see postgres/load.py)."""
        await self.index_batches(one_set(documents), sum(len(doc.chunks) for doc in documents))

    async def index_batches(
        self, batches: AsyncIterable[Sequence[Document]], expected: int = 0
    ) -> None:
        """Every set in one transaction: a load that fails leaves the previous state."""
        collections: set[str] = set()
        try:
            async with self._connection(IndexingError) as conn, conn.transaction():
                written = await load(
                    conn, noted(batches, collections), expected, self.options.index_build
                )
        finally:
            self._wrote()
        await self._acknowledged(collections)
        self._written_rows += written
        if self._written_rows >= max(ANALYZE_AFTER, self._analyzed_rows // 5):
            await self._analyze()

    async def _analyze(self) -> None:
        """Refresh the planner's statistics; the documents are stored whatever happens.
        The side tables of filters and facets too: a filtered search's choice between an
        exact and a graph search rests on their estimates."""
        try:
            async with self._connection(KnowledgeStoreError) as conn:
                await conn.execute(
                    "ANALYZE knowledge_documents, siam_vectors, siam_vector_values,"
                    " siam_vector_facets"
                )
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
        url = await asyncio.to_thread(
            embedded_server_url, self.data_dir, self.options.shared_buffers
        )
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

    # -- read replicas -----------------------------------------------------------------

    async def _position(self) -> int:
        """The primary's WAL position now (past every write acknowledged so far)."""
        async with self._connection(KnowledgeStoreError) as conn:
            position: int = await conn.fetchval(PRIMARY_POSITION)
        return position

    async def _acknowledged(self, collections: Iterable[str] | None) -> None:
        """Reads of `collections` (None: of every one) wait for the replicas to replay
        the primary's position now; with no replica, nothing to do."""
        if self.replicas:
            self.replicas.record(collections, await self._position())

    async def _fetch(
        self, sql: str, args: Sequence[Any], error: type[KnowledgeStoreError], on: Reading | None
    ) -> list[Row]:
        """The rows of a read: on a replica that may serve `on`, else on the primary.
        The generations of the service's schema are polled first (at most every half
        second): another process's write they show is waited for like this process's
        own, so no read misses a write made more than that long ago, whichever process
        made it. (Tables other pipelines own have none: their writes are seen once
        replayed, within KNOWLEDGE_REPLICA_MAX_LAG_MS.)"""
        replica = None
        if on is not None and self.replicas:
            if self.options.manage_schema:
                await self._generations()
            replica = self.replicas.route(on)
        if replica is not None:
            found = await self.replicas.fetch(replica, sql, args)
            if found is not None:
                return [dict(row) for row in found]
        async with self._connection(error) as conn:
            rows = await conn.fetch(sql, *args)
        if on is not None:
            self.replicas.reads[""] += 1
        return [dict(row) for row in rows]

    def reads_of_a_document(self) -> tuple[Reading | None, ...]:
        """A replica, then the primary: a replica may not have replayed yet the write
        of another process that this one already showed (a miss is the primary's word)."""
        return (EVERY_COLLECTION, None) if self.replicas else (EVERY_COLLECTION,)

    # -- the primitives SiamStore builds on ---------------------------------------------

    async def run_function(self, call: FunctionCall, on: Reading | None) -> list[Row]:
        names = ", ".join(f"{name} => ${i}" for i, name in enumerate(call.params, start=1))
        return await self._fetch(
            f"SELECT * FROM {call.function}({names})", list(call.params.values()), call.error, on
        )

    async def read_rows(self, selection: Selection, on: Reading | None) -> list[Row]:
        where, args = where_sql(selection.conditions)
        sql = f"SELECT {selection.columns} FROM {selection.table}{where}"
        if selection.order:
            sql += f" ORDER BY {selection.order}"
        if selection.limit:
            sql += f" LIMIT {int(selection.limit)}"
        return await self._fetch(sql, args, KnowledgeStoreError, on)

    async def delete_rows(self, table: str, *conditions: Condition) -> int:
        where, args = where_sql(conditions)
        async with self._connection(KnowledgeStoreError) as conn:
            status = await conn.execute(f"DELETE FROM {table}{where}", *args)
        return int(status.split()[-1])


async def one_set(documents: Sequence[Document]) -> AsyncIterator[Sequence[Document]]:
    yield documents


async def noted(
    batches: AsyncIterable[Sequence[Document]], collections: set[str]
) -> AsyncIterator[Sequence[Document]]:
    """`batches`, the collections of their documents added to `collections`."""
    async for batch in batches:
        collections.update(doc.collection for doc in batch)
        yield batch
