"""One SQLite database file as the SQLite store uses it: a reader connection on the
event loop, a reader thread and a writer thread with a connection each, the numbered
migrations, and a check that the file is still the one that was opened."""

from __future__ import annotations

import asyncio
import mmap
import os
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TypeVar

from knowledge_api.errors import BackendConnectionError, IndexingError
from knowledge_api.models import chunk_id, document_id
from knowledge_api.stores.reconnect import Reconnect

T = TypeVar("T")

READER_CACHE_KIB = 131072
"""Page cache of the reader connection (SQLite's default is 2 MiB): in a large store a
keyword query reads hundreds of FTS5 index pages, and with the default each of them is
read again from the operating system by every query. Only pages read take memory, so a
small store never fills it."""


class SQLiteFile:
    def __init__(self, path: Path, backend: str, on_open: Callable[[], None]) -> None:
        self.path = path
        self.backend = backend
        self.on_open = on_open
        """Called after each (re)connection, to load what the store keeps in memory."""
        self.commits = 0
        self.write_failure = ""
        """Why writes are failing, empty while they succeed."""
        self.connection = Reconnect(backend)
        self._conn: sqlite3.Connection | None = None
        self._writer_conn: sqlite3.Connection | None = None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        self._aside_conn: sqlite3.Connection | None = None
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="sqlite-reader")
        self._identity: tuple[int, int] | None = None
        self.commit_watch = CommitWatch(path)

    def open(self) -> sqlite3.Connection:
        self.connection.attempting()
        try:
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = reader(self.path)
            migrate(conn)
            self._identity = file_identity(self.path)
            aside = reader(self.path)  # with the first: both read the one file opened
        except (sqlite3.Error, OSError) as e:
            raise self.connection.failed(f"cannot open {self.path}: {e}") from e
        self._conn = conn
        self._aside_conn = aside
        self.commit_watch.open()  # once the reader made the WAL index
        self.connection.succeeded()
        self.on_open()
        return conn

    async def close(self) -> None:
        if self._writer_conn is not None:
            await self.write(self._close_writer)
        if self._aside_conn is not None:
            await self.read_aside(sqlite3.Connection.close)
            self._aside_conn = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.commit_watch.close()

    def _close_writer(self) -> None:
        if self._writer_conn is not None:
            self._writer_conn.close()
            self._writer_conn = None

    @property
    def opened(self) -> bool:
        return self._conn is not None

    def db(self) -> sqlite3.Connection:
        """The reader connection; reopens (at most every few seconds) after a failure."""
        if self._conn is not None:
            return self._conn
        self.connection.check()
        return self.open()

    async def read_aside(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the reader thread's own connection, so that the event loop goes
        on meanwhile (a vector search beside a keyword query, other requests beside
        either)."""
        self.db()  # (re)opens both
        assert self._aside_conn is not None
        return await asyncio.get_running_loop().run_in_executor(
            self._reader, work, self._aside_conn
        )

    def _writer_db(self) -> sqlite3.Connection:
        """The writer thread's own connection: a write waiting for a lock held by another
        process waits there, while reads and cache hits go on on the event loop."""
        self.check()
        if self._writer_conn is None:
            self._writer_conn = connect(self.path)
        return self._writer_conn

    def check(self) -> None:
        """Refuse writes once the database file was removed or replaced: they would be
        acknowledged, then lost with the unlinked file."""
        if self._identity is not None and file_identity(self.path) != self._identity:
            raise BackendConnectionError(
                f"{self.path} was removed or replaced while the service ran: writes are "
                "refused so that none is acknowledged and then lost; restore the file, or "
                "restart the service to start a new store there",
                backend=self.backend,
            )

    async def write(self, work: Callable[[], T]) -> T:
        """Run a write on the writer thread; a lock that outlasts busy_timeout is a 503,
        and /health says writes are failing until one succeeds."""
        try:
            result: T = await asyncio.get_running_loop().run_in_executor(self._writer, work)
        except sqlite3.OperationalError as e:
            self.write_failure = f"writes are failing: {write_failure_cause(e)}"
            raise IndexingError(f"{self.path}: {self.write_failure}", backend=self.backend) from e
        self.write_failure = ""
        return result

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on the writer thread's connection. It reads the schema
        first: another connection may have changed it since this one last did (the side
        tables beside the store are created on first use), and SQLite fails to re-read
        it inside a savepoint, or under a delete that cascades through a foreign key
        ("no such table: documents", SQLITE_SCHEMA)."""
        conn = self._writer_db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("SELECT 1 FROM sqlite_schema LIMIT 0").fetchall()
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self.commits += 1


class CommitWatch:
    """Whether any connection may have committed to the file since it was last asked,
    read from the header of the file's WAL index (the `-shm` file beside it): every
    commit in WAL mode rewrites that header (frame count, checksums, salts) as its last
    step, the one that makes it visible to readers. `PRAGMA data_version`, which says
    for sure, takes and releases SQLite's file locks on every call (several system calls,
    most of what a cache hit cost); the header is mapped into memory once, so looking at
    it is a 48-byte copy, and the pragma is asked only when it moved.

    The index is mapped only while the store's reader connection holds it open: SQLite
    empties (truncates) a WAL index only when it is the first to open it, which no
    process is while a connection holds it, so the mapped page is never cut from under
    a read (`_sync` opens the reader before it looks). Without a WAL index to map (a
    database in memory, a file not opened yet) the answer is always "maybe", which
    costs the pragma, as before.

    The file stays open as long as it is mapped, and is closed only after the store's
    connections: SQLite's locks are POSIX locks, which belong to the process, and closing
    any descriptor of the file drops all of them. Closed early, it would let another
    process open the index as if it were the first, truncate it, and kill this one with
    SIGBUS on its next commit."""

    HEADER_BYTES = 48
    """The first copy of the WAL index header (SQLite's walformat.html)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(f"{path}-shm")
        self.memory = str(path) == ":memory:"
        self.mapped: mmap.mmap | None = None
        self.index: int | None = None
        """The open WAL index, kept while mapped (see above)."""
        self.seen = b""

    def open(self) -> None:
        self.close()
        if self.memory:
            return
        try:
            self.index = os.open(self.path, os.O_RDONLY)
            self.mapped = mmap.mmap(self.index, self.HEADER_BYTES, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # no index, or one shorter than its header
            self.mapped = None  # an index opened stays open until close(), as above

    def close(self) -> None:
        """Unmap and close the index: only once the store's connections are closed."""
        if self.mapped is not None:
            self.mapped.close()
        if self.index is not None:
            os.close(self.index)
        self.mapped, self.index, self.seen = None, None, b""

    def moved(self) -> bytes | None:
        """The header when it moved since `seen` (b"" when there is none to read: maybe
        it did), None when it did not. The caller sets `seen` to it once it looked."""
        if self.mapped is None:
            return b""
        header = self.mapped[: self.HEADER_BYTES]
        return None if header == self.seen else header


WRITE_FAILURE_CAUSES = {
    "SQLITE_FULL": "the disk is full (or the database reached its size limit)",
    "SQLITE_BUSY": "another process holds a lock on the database",
    "SQLITE_LOCKED": "another connection holds a lock on the database",
    "SQLITE_READONLY": "the database file or its folder is read-only",
    "SQLITE_IOERR": "the disk failed a read or write",
}


def write_failure_cause(error: sqlite3.OperationalError) -> str:
    """What a failed write ran into, from SQLite's result code (a full disk and a lock
    held elsewhere both come as OperationalError), with SQLite's own words."""
    name = getattr(error, "sqlite_errorname", "") or "SQLite"
    primary = "_".join(name.split("_")[:2])  # SQLITE_IOERR_WRITE is an SQLITE_IOERR
    cause = WRITE_FAILURE_CAUSES.get(primary)
    return f"{cause} ({name}: {error})" if cause else f"{error} ({name})"


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    for pragma in (
        "journal_mode=WAL",
        "synchronous=NORMAL",
        "foreign_keys=ON",
        "busy_timeout=5000",
    ):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def reader(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
    return conn


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the database file; None in memory or when it is gone."""
    if str(path) == ":memory:":
        return None
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return (-1, -1)
    return found.st_dev, found.st_ino


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the numbered migrations newer than the file's user_version. They run with
    the ids of models.py as SQL functions, and without foreign keys: a migration that
    makes a table again drops the old one, which would take the rows that refer to it
    (SQLite changes the setting outside a transaction only)."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    folder = resources.files("knowledge_api.stores.sql").joinpath("sqlite")
    scripts = sorted(folder.iterdir(), key=lambda p: p.name)
    pending = [(int(s.name.split("_", 1)[0]), s) for s in scripts]
    pending = [(version, script) for version, script in pending if version > current]
    if not pending:
        return
    conn.create_function("knowledge_document_id", 4, document_id, deterministic=True)
    conn.create_function("knowledge_chunk_id", 2, chunk_id, deterministic=True)
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        for version, script in pending:
            conn.executescript(
                f"BEGIN; {script.read_text()}; PRAGMA user_version = {version}; COMMIT;"
            )
    finally:
        conn.execute("PRAGMA foreign_keys = ON")
