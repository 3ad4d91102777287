"""The process's heap, where glibc's malloc keeps it (elsewhere these do nothing).

glibc gives each thread that allocates an arena of its own, up to eight per core: the
service's threads (the event loop, the query and model threads, the runtime's workers)
each kept freed pages of their own, some 20 MB in all after the bench's queries. Two
arenas hold the same work in less: measured on a served store of 5,000 passages after
cold queries and cache hits, 254 MB resident with glibc's default and 235 MB with two.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any

ARENAS = 2
M_ARENA_MAX = -8
"""mallopt's parameter number for the arena limit (malloc.h)."""


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
