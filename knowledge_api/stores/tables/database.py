"""Tables of a SQLite file kept beside a store's own data (the API keys, the audit trail,
answered queries and their ratings, upload jobs): one connection, opened on first use,
each statement run on a thread. The file is the sqlite store's own, or one beside a
store whose engine keeps no such tables."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from knowledge_api.errors import BackendConnectionError

PRAGMAS = ("busy_timeout=5000", "journal_mode=WAL", "synchronous=NORMAL")
"""As the sqlite store's own connections: a commit waits for no fsync."""


class SQLiteTables:
    SCHEMA: tuple[str, ...] = ()
    """The statements that create the tables, each run at every open."""
    ADDED: tuple[str, ...] = ()
    """`ALTER TABLE ... ADD COLUMN` statements of columns added since, each run at every
    open (a column already there is left as it is)."""
    WHAT = "tables"
    """What the tables hold, as a failure names it."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._using = threading.Lock()
        """Held by each statement's thread and by close: closing the connection under a
        statement still running on another thread (a write sent off as a request ended,
        at shutdown) crashes the process."""

    async def open(self) -> None:
        await asyncio.to_thread(self._connect)

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                for pragma in PRAGMAS:
                    conn.execute(f"PRAGMA {pragma}")
                for statement in self.SCHEMA:
                    conn.execute(statement)
                for statement in self.ADDED:
                    _add_column(conn, statement)
            except (sqlite3.Error, OSError) as e:
                raise BackendConnectionError(
                    f"cannot open the {self.WHAT} in {self.path}: {e}"
                ) from e
            self._conn = conn
        return self._conn

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._using:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def _run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            with self._using:
                return self._connect().execute(sql, params).fetchall()

        try:
            return await asyncio.to_thread(run)
        except sqlite3.Error as e:
            raise self._failed(e) from e

    async def _run_many(self, sql: str, rows: Callable[[], Iterable[Sequence[Any]]]) -> None:
        """`sql` once per row, in one transaction on one thread, where `rows` are made
        too (their encoding is work the event loop need not do)."""

        def run() -> None:
            with self._using:
                conn = self._connect()
                conn.execute("BEGIN")
                try:
                    conn.executemany(sql, rows())
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")

        try:
            await asyncio.to_thread(run)
        except sqlite3.Error as e:
            raise self._failed(e) from e

    def _failed(self, error: sqlite3.Error) -> Exception:
        """The error a failed statement is raised as."""
        return BackendConnectionError(f"{self.WHAT} unavailable: {error}")


def _add_column(conn: sqlite3.Connection, statement: str) -> None:
    try:
        conn.execute(statement)
    except sqlite3.OperationalError as e:
        if "duplicate column" not in str(e):
            raise
