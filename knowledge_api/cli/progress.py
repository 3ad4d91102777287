"""Progress of a long run on stderr: a tqdm bar on a terminal, otherwise a plain line
every few seconds (`indexed 120/500 documents`), which reads well in a log file or CI
output where a bar's carriage returns make one unreadable line."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from knowledge_api.models import Progress

PLAIN_EVERY_SECONDS = 5.0


@contextmanager
def progress(
    total: int | None,
    unit: str = "document",
    desc: str = "indexing",
    stream: TextIO | None = None,
    every: float = PLAIN_EVERY_SECONDS,
) -> Iterator[Progress]:
    """A function to call with the number of items just done."""
    stream = stream if stream is not None else sys.stderr
    if stream.isatty():
        from tqdm import tqdm

        with tqdm(total=total, unit=unit, desc=desc, file=stream) as bar:
            yield bar.update
        return
    plain = PlainProgress(total, unit, stream, every)
    yield plain.update
    plain.finish()


class PlainProgress:
    def __init__(self, total: int | None, unit: str, stream: TextIO, every: float) -> None:
        self.total = total
        self.unit = unit
        self.stream = stream
        self.every = every
        self.done = 0
        self.printed = 0
        self.last = time.monotonic()

    def update(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.print()

    def finish(self) -> None:
        if self.printed and self.printed != self.done:
            self.print()

    def print(self) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        print(f"indexed {self.done}{of} {self.unit}s", file=self.stream, flush=True)
        self.printed = self.done
