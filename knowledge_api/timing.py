"""Durations as responses report them, and timestamps."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def elapsed_ms(since: float) -> float:
    """Milliseconds since a `time.perf_counter()` reading."""
    return ms(time.perf_counter() - since)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
