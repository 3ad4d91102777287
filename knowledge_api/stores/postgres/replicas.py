"""Read replicas of the postgres store (KNOWLEDGE_DATABASE_READ_URLS): where a read
goes, and how each replica is watched.

Read your writes: after each acknowledged write the store records the primary's WAL
position for the collections it touched (`record`). A read of a collection goes to a
replica whose replay position is at or past that collection's position, and to the
primary until one is. Replay positions are read by a watch every
KNOWLEDGE_REPLICA_CHECK_MS, never per query: choosing a replica (`route`) is a few
comparisons in memory. A replica that fails a read or a check, is not a standby, or
lags more than KNOWLEDGE_REPLICA_MAX_LAG_MS behind the primary is taken out (one
warning) and probed every PROBE_SECONDS until it answers in time again (one info line).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from knowledge_api.errors import ConfigurationError
from knowledge_api.registry import import_extra
from knowledge_api.stores.postgres.codecs import register_codecs
from knowledge_api.stores.reconnect import reason

log = logging.getLogger("knowledge_api")

PRIMARY_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
"""Where the primary has written to: past the commit record of every transaction
acknowledged before it is read, even under synchronous_commit = off (whose commits
return before their WAL is flushed, so pg_current_wal_lsn() may not cover them yet)."""
REPLICA_POSITION = (
    "SELECT pg_is_in_recovery() AS standby,"
    " pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint AS replayed"
)
PROBE_SECONDS = 1.0
"""How often a replica taken out is tried again."""
CHECK_TIMEOUT = 2.0
"""Seconds a replica may take to connect or to say where it has replayed to."""
READ_TIMEOUT = 10.0
"""Seconds a read may take on a replica before the primary answers it instead: a
replica that stops answering costs a request this long at most, once."""


@dataclass(frozen=True)
class Reading:
    """A read a replica may serve: of one collection, or of every one (None)."""

    collection: str | None = None


EVERY_COLLECTION = Reading()


class Replica:
    """One replica: its pool, its state (up, lagging or down) and where it has replayed to."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = host_port(url)
        self.pool: Any = None
        """The connections reads use."""
        self.watcher: Any = None
        """The watch's own connection: a check never waits behind reads for one."""
        self.state = "down"
        self.replayed = -1
        self.lag_bytes: int | None = None
        self.lag_ms: float | None = None
        self.out = False
        """Taken out and said so: its return is logged."""
        self.next_probe = 0.0

    def due(self, now: float) -> bool:
        return self.state != "down" or now >= self.next_probe

    def fail(self, why: str) -> None:
        """Taken out until a probe finds it answering: down, its connections dropped."""
        self.state, self.lag_bytes, self.lag_ms = "down", None, None
        self.next_probe = time.monotonic() + PROBE_SECONDS
        if self.pool is not None:
            self.pool.terminate()
            self.pool = None
        if self.watcher is not None:
            self.watcher.terminate()
            self.watcher = None
        self.take_out(why)

    def take_out(self, why: str) -> None:
        if not self.out:
            self.out = True
            log.warning("replica %s down: %s", self.name, why)

    def serve(self) -> None:
        self.state = "up"
        if self.out:
            self.out = False
            log.info("replica %s back", self.name)

    def report(self) -> dict[str, Any]:
        lag = None if self.lag_ms is None else round(self.lag_ms)
        return {
            "url": redact(self.url),
            "state": self.state,
            "lag_bytes": self.lag_bytes,
            "lag_ms": lag,
        }


class Replicas:
    """The store's replicas, the WAL position each collection must be read at, and the
    watch that keeps each replica's replay position (started by `start`)."""

    def __init__(
        self,
        urls: Sequence[str],
        check_ms: int = 100,
        max_lag_ms: int = 5000,
        pool_size: int = 10,
    ) -> None:
        self.replicas = [Replica(url) for url in urls]
        self.check_seconds = check_ms / 1000
        self.max_lag_ms = max_lag_ms
        self.pool_size = pool_size
        self.written: dict[str, int] = {}
        """Each collection's position after its last acknowledged write."""
        self.floor = 0
        """The position every collection is read at: writes whose collection is unknown."""
        self.latest = 0
        self.samples: deque[tuple[float, int]] = deque()
        """(time, the primary's position then): how long ago a replica's position was current."""
        self.reads: Counter[str] = Counter()
        """Reads served, by replica name ("" for the primary)."""
        self._turn = 0
        self._watch: asyncio.Task[None] | None = None
        self._primary_url = ""
        self._primary: Any = None
        """The watch's own connection to the primary."""

    def __bool__(self) -> bool:
        return bool(self.replicas)

    # -- reads --------------------------------------------------------------------

    def route(self, reading: Reading) -> Replica | None:
        """An up replica that has replayed what `reading` must see, taken in turn; None:
        the primary reads it."""
        needed = self.needed(reading)
        count = len(self.replicas)
        for step in range(count):
            replica = self.replicas[(self._turn + step) % count]
            if replica.state == "up" and replica.replayed >= needed:
                self._turn = (self._turn + step + 1) % count
                return replica
        return None

    def needed(self, reading: Reading) -> int:
        if reading.collection is None:
            return self.latest
        return max(self.floor, self.written.get(reading.collection, 0))

    def record(self, collections: Iterable[str] | None, position: int) -> None:
        """A write acknowledged by the primary at `position`, to `collections` (None:
        any collection)."""
        if collections is None:
            self.floor = max(self.floor, position)
        else:
            for collection in collections:
                self.written[collection] = max(self.written.get(collection, 0), position)
        self.latest = max(self.latest, position)

    async def fetch(self, replica: Replica, sql: str, args: Sequence[Any]) -> list[Any] | None:
        """The rows of a read on `replica`; None when it failed there (the primary then
        answers: a replica that lost its connection is taken out, a statement the standby
        cancelled, such as a conflict with recovery, is only read again)."""
        asyncpg = require_asyncpg()
        pool = replica.pool
        try:
            async with pool.acquire(timeout=READ_TIMEOUT) as conn:
                rows: list[Any] = await conn.fetch(sql, *args, timeout=READ_TIMEOUT)
        except TimeoutError:
            if replica.pool is pool:
                replica.fail(f"no answer within {READ_TIMEOUT:g} s")
            return None
        except connection_errors(asyncpg) as e:
            if replica.pool is pool:
                replica.fail(reason(e))
            return None
        except asyncpg.PostgresError:
            return None
        self.reads[replica.name] += 1
        return rows

    # -- the watch ------------------------------------------------------------------

    async def start(self, primary_url: str) -> None:
        """Check every replica once (a service starts with those that answer), then keep
        checking them in the background, against the primary at `primary_url`."""
        if not self.replicas or self._watch is not None:
            return
        self._primary_url = primary_url
        await self.check()
        self._watch = asyncio.create_task(self.watch())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        for replica in self.replicas:
            if replica.pool is not None:
                await replica.pool.close()
                replica.pool = None
            if replica.watcher is not None:
                await replica.watcher.close()
                replica.watcher = None
        if self._primary is not None:
            await self._primary.close()
            self._primary = None

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_seconds)
            try:
                await self.check()
            except Exception:  # the watch outlives any one failed check
                log.exception("checking the read replicas failed")

    async def check(self) -> None:
        """Read the primary's position, then each replica's that is due (a replica
        down is probed every PROBE_SECONDS)."""
        primary = await self.primary_position()
        if primary is None:
            return  # the store's own reconnection says so; the replicas keep their states
        now = time.monotonic()
        self.remember(now, primary)
        due = [replica for replica in self.replicas if replica.due(now)]
        await asyncio.gather(*(self.check_one(replica, primary, now) for replica in due))

    def remember(self, now: float, primary: int) -> None:
        self.samples.append((now, primary))
        keep = max(2 * self.max_lag_ms / 1000, 1.0)
        while len(self.samples) > 1 and self.samples[0][0] < now - keep:
            self.samples.popleft()

    async def primary_position(self) -> int | None:
        """The primary's position now, on the watch's own connection (None: it failed)."""
        asyncpg = require_asyncpg()
        try:
            if self._primary is None:
                self._primary = await asyncpg.connect(self._primary_url, timeout=CHECK_TIMEOUT)
            position: int = await self._primary.fetchval(PRIMARY_POSITION, timeout=CHECK_TIMEOUT)
        except (TimeoutError, *connection_errors(asyncpg), asyncpg.PostgresError, ValueError):
            if self._primary is not None:
                self._primary.terminate()
                self._primary = None
            return None
        return position

    async def check_one(self, replica: Replica, primary: int, now: float) -> None:
        asyncpg = require_asyncpg()
        try:
            if replica.watcher is None:
                replica.watcher = await asyncpg.connect(replica.url, timeout=CHECK_TIMEOUT)
            row = await replica.watcher.fetchrow(REPLICA_POSITION, timeout=CHECK_TIMEOUT)
            if replica.pool is None:
                replica.pool = await asyncpg.create_pool(
                    replica.url,
                    min_size=1,
                    max_size=self.pool_size,
                    init=register_codecs,
                    timeout=CHECK_TIMEOUT,
                )
        except TimeoutError:
            replica.fail(f"no answer within {CHECK_TIMEOUT:g} s")
            return
        except (*connection_errors(asyncpg), asyncpg.PostgresError, ValueError) as e:
            replica.fail(reason(e))
            return
        if not row["standby"] or row["replayed"] is None:
            replica.fail("not a standby (pg_is_in_recovery() is false)")
            return
        replica.replayed = int(row["replayed"])
        replica.lag_bytes = max(0, primary - replica.replayed)
        replica.lag_ms = 0.0 if replica.lag_bytes == 0 else self.lag_ms(replica.replayed, now)
        if replica.lag_ms > self.max_lag_ms:
            replica.state = "lagging"
            replica.take_out(f"lagging {replica.lag_ms / 1000:.1f} s behind the primary")
        else:
            replica.serve()

    def lag_ms(self, replayed: int, now: float) -> float:
        """Milliseconds since the primary was last seen at a position `replayed` reaches
        (since the oldest position remembered, when it reaches none)."""
        reached = self.samples[0][0]
        for at, position in self.samples:
            if position > replayed:
                break
            reached = at
        return (now - reached) * 1000

    # -- reports --------------------------------------------------------------------

    def report(self) -> list[dict[str, Any]]:
        return [replica.report() for replica in self.replicas]

    def down(self) -> bool:
        return any(replica.state == "down" for replica in self.replicas)


def host_port(url: str) -> str:
    """A replica's name in logs and metrics."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"


def read_urls(value: str) -> list[str]:
    """KNOWLEDGE_DATABASE_READ_URLS: the URLs, comma-separated, each a postgres URL."""
    urls = [url.strip() for url in value.split(",") if url.strip()]
    for url in urls:
        if urlsplit(url).scheme not in ("postgres", "postgresql") or not urlsplit(url).hostname:
            raise ConfigurationError(
                "KNOWLEDGE_DATABASE_READ_URLS must be postgres URLs with a host "
                "(postgresql://user:password@host:5432/db), separated by commas; "
                f"got {redact(url)!r}"
            )
    return urls


def connection_errors(asyncpg: Any) -> tuple[type[BaseException], ...]:
    """What a lost or refused connection raises."""
    return (
        OSError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
        asyncpg.PostgresConnectionError,
        asyncpg.exceptions.OperatorInterventionError,
        asyncpg.exceptions.InsufficientResourcesError,
        asyncpg.exceptions.CannotConnectNowError,
    )


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


def require_asyncpg() -> Any:
    return import_extra("asyncpg", "postgres")


def redact(url: str) -> str:
    """A database URL fit for logs and /health: no password."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))
