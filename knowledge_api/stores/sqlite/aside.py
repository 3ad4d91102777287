"""Searches of the SQLite store's vector index, sent off the event loop together.

The product over every vector is C that lets go of the GIL: on the event loop it held
every other request for as long as it ran, twice a cold query. The searches asked
within one step of the loop (the queries of a batch the model embedded wake together,
and each asks at once) go to a thread of their own as one job: handing the GIL to the
thread and back for each search made the loop wait for it as long as the searches took
on the loop. The index's lock is held while they run, so a change the loop applies to
the index waits for them, and they for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Search = Callable[[], list[tuple[int, float]]]
"""One search of the index, to run on the searcher's thread."""
Found = asyncio.Future[list[tuple[int, float]]]
"""Where a search's caller waits for its (key, cosine) pairs."""


class SearchAside:
    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self._searcher: ThreadPoolExecutor | None = None
        self._asked: list[tuple[Search, Found]] = []
        """Searches asked in this step of the loop, sent off to the thread at its end."""
        self._asked_in: asyncio.AbstractEventLoop | None = None

    async def run(self, search: Search) -> list[tuple[int, float]]:
        """`search`'s (key, cosine) pairs, found with the others asked in this step."""
        loop = asyncio.get_running_loop()
        found: Found = loop.create_future()
        if self._asked_in is not loop:  # first, or a loop since closed: its asks are gone
            self._asked, self._asked_in = [], loop
        if not self._asked:
            loop.call_soon(self._send_off, loop)
        self._asked.append((search, found))
        return await found

    def _send_off(self, loop: asyncio.AbstractEventLoop) -> None:
        """This step's searches to the thread; a search asked alone (no batch woke with
        it, so no request waits on the loop meanwhile) runs here at once, unless the
        thread is searching: handing it over cost a lone query more than it spared."""
        asked, self._asked = self._asked, []
        searches, found = [search for search, _ in asked], [each for _, each in asked]
        if len(asked) == 1 and self.lock.acquire(blocking=False):
            try:
                results = _results(searches)
            finally:
                self.lock.release()
            _deliver(found, results)
            return
        if self._searcher is None:
            self._searcher = ThreadPoolExecutor(1, thread_name_prefix="vector-search")
        job = loop.run_in_executor(self._searcher, self._run, searches)
        job.add_done_callback(lambda done: _settle(found, done))

    def _run(self, searches: list[Search]) -> list[tuple[bool, Any]]:
        """Each search's result, or its error, under the lock (so, between changes)."""
        with self.lock:
            return _results(searches)

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.shutdown(wait=True)
            self._searcher = None


def _results(searches: list[Search]) -> list[tuple[bool, Any]]:
    """Each search's result, or its own error (for its caller alone)."""
    results: list[tuple[bool, Any]] = []
    for search in searches:
        try:
            results.append((True, search()))
        except Exception as e:
            results.append((False, e))
    return results


def _deliver(asked: list[Found], results: list[tuple[bool, Any]]) -> None:
    """Each search's caller given its result or its error (a caller gone: nothing)."""
    for found, (ok, value) in zip(asked, results, strict=True):
        if not found.done():
            found.set_result(value) if ok else found.set_exception(value)


def _settle(asked: list[Found], job: asyncio.Future[list[tuple[bool, Any]]]) -> None:
    """`_deliver` once the thread's job is done (or every caller its failure)."""
    if job.cancelled():
        for found in asked:
            found.cancel()
    elif (error := job.exception()) is not None:
        for found in asked:
            if not found.done():
                found.set_exception(error)
    else:
        _deliver(asked, job.result())
