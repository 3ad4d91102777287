"""The lock of a store record several processes write on one machine (a local Chroma
folder read by the service and a `knowledge-api` command beside it): an exclusive
`flock` on a file beside the store, held across a read of the record and its write,
so that a lease taken is never taken twice. The kernel lets it go with the process
that held it, so a process that died holds nothing. Taken by polling: a task waiting
for it can be cancelled, and leaves nothing held."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

POLL_SECONDS = 0.002
"""Between two attempts: the record's read and write hold it for milliseconds."""


@contextlib.asynccontextmanager
async def held(path: Path | None) -> AsyncIterator[None]:
    """The lock of the file at `path` held until the block ends (None: no lock)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while not taken(descriptor):
            await asyncio.sleep(POLL_SECONDS)
        yield
    finally:
        os.close(descriptor)  # lets the lock go


def taken(descriptor: int) -> bool:
    """Whether the lock was free and is ours now. An flock belongs to its open file, so
    two stores of one process exclude each other as two processes do."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
