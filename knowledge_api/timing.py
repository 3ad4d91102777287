"""Durations as responses report them, and timestamps."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Generic, TypeVar


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def elapsed_ms(since: float) -> float:
    """Milliseconds since a `time.perf_counter()` reading."""
    return ms(time.perf_counter() - since)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


T = TypeVar("T", str, bytes)


class Spelled(Generic[T]):
    """Milliseconds rounded to `places` decimals, as the text a JSON number of them is
    (`spell` of the rounded float: `repr`, or its bytes), each value spelled once.
    `round(x, places)` and a float's repr each make a correctly rounded decimal
    conversion, which cost a cache hit's `total_ms` and its log line's `ms` about a
    microsecond each; durations repeat, so their text is looked up by the rounded
    count of units instead (halves rounded up)."""

    MAX_KNOWN = 4096

    def __init__(self, places: int, spell: Callable[[float], T]) -> None:
        self.scale: int = 10**places
        self.spell: Callable[[float], T] = spell
        self.known: dict[int, T] = {}

    def rounded(self, ms: float) -> float:
        """`ms` rounded as its text is."""
        return int(ms * self.scale + 0.5) / self.scale

    def __call__(self, ms: float) -> T:
        units = int(ms * self.scale + 0.5)
        text = self.known.get(units)
        if text is None:
            if len(self.known) >= self.MAX_KNOWN:
                self.known.clear()
            text = self.known[units] = self.spell(units / self.scale)
        return text
