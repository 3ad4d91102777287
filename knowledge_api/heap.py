"""The process's memory: its heap, where glibc's malloc keeps it, and the pages of the
files it maps (elsewhere these do nothing).

glibc gives each thread that allocates an arena of its own, up to eight per core: the
service's threads (the event loop, the query and model threads, the runtime's workers)
each kept freed pages of their own, some 20 MB in all after the bench's queries. Two
arenas hold the same work in less: measured on a served store of 5,000 passages after
cold queries and cache hits, 254 MB resident with glibc's default and 235 MB with two.

A file the process maps shared and read-only (the local model's weights) counts in its
resident memory for every page read: release_mapped_file hands those pages back, the
file still mapped, its pages read again from the page cache when next touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from pathlib import Path
from typing import Any

ARENAS = 2
M_ARENA_MAX = -8
"""mallopt's parameter number for the arena limit (malloc.h)."""
MADV_DONTNEED = 4
"""madvise's advice (Linux): drop the pages of a range; a shared file mapping's come
back from the file when touched."""
MAPS = Path("/proc/self/maps")


@functools.cache
def libc() -> Any:
    """glibc, loaded once; None where there is none (musl, macOS)."""
    try:
        library = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return library if hasattr(library, "mallopt") and hasattr(library, "malloc_trim") else None


def limit_arenas() -> None:
    """At most ARENAS malloc arenas, for the threads started from now on: called first
    thing in a process, before any thread is."""
    library = libc()
    if library is not None:
        library.mallopt(M_ARENA_MAX, ARENAS)


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system: a large batch's buffers, freed,
    would otherwise stay resident."""
    library = libc()
    if library is not None:
        with contextlib.suppress(OSError):
            library.malloc_trim(0)


def release_mapped_file(path: Path | str) -> None:
    """Drop this process's resident pages of `path`'s shared, read-only mappings.

    Only those: a private mapping's written pages would be lost, a shared one's are the
    file's. Nothing where there is no glibc or no /proc (macOS)."""
    library = libc()
    if library is None:
        return
    name = str(path)
    try:
        lines = MAPS.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] != name or fields[1] != "r--s":
            continue
        start, end = (int(address, 16) for address in fields[0].split("-"))
        library.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)
