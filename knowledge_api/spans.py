"""Where a text sits in another that may space it differently, and offsets in the units
clients count.

A chunk's content is its document's text with runs of whitespace made one space or one
line break (a block's lines, a sentence cut at spaces), and an extractive answer quotes
a passage with its whitespace collapsed. `Squeezed` finds such a text in the stored one
by comparing every run of whitespace as one space, and maps what it finds back to the
stored text's own offsets, counted in code points (Python's `str` indices).
JavaScript counts UTF-16 code units: `utf16` converts.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import Literal

Unit = Literal["codepoints", "utf16"]
UNITS: tuple[Unit, ...] = ("codepoints", "utf16")
_SPACE = re.compile(r"\s+")
_LONG_SPACE = re.compile(r"\s\s+")


def squeezed(text: str) -> str:
    """The text with every run of whitespace one space, and none at either end."""
    return " ".join(text.split())


class Squeezed:
    """A stored text with its whitespace runs made one space (none at either end), and
    the way back: the compact position of each run of two or more whitespace
    characters and the characters dropped up to its end."""

    __slots__ = ("_dropped", "_lead", "_runs", "compact", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.compact = squeezed(text)
        self._lead = len(text) - len(text.lstrip())
        self._runs: list[int] = []
        self._dropped: list[int] = []
        dropped = self._lead
        for run in _LONG_SPACE.finditer(text, self._lead):  # one character moves nothing
            start, end = run.span()
            self._runs.append(start - dropped)
            dropped += end - start - 1
            self._dropped.append(dropped)

    def original(self, at: int) -> int:
        """The stored offset of the compact text's character `at` (not a space)."""
        k = bisect_left(self._runs, at) - 1
        return at + (self._dropped[k] if k >= 0 else self._lead)

    def find(self, needle: str, start: int = 0, end: int | None = None) -> tuple[int, int] | None:
        """(start, end) in the stored text of the first place from stored offset
        `start` (and before `end`) that reads as `needle`, whitespace runs compared as
        one space; None if there is none or `needle` is blank."""
        wanted = squeezed(needle)
        if not wanted:
            return None
        begin = self.compact_offset(start)
        stop = len(self.compact) if end is None else self.compact_offset(end)
        at = self.compact.find(wanted, begin, stop)
        if at < 0:
            return None
        return self.original(at), self.original(at + len(wanted) - 1) + 1

    def compact_offset(self, stored: int) -> int:
        """The compact position of a stored offset (the first at or after it)."""
        lo, hi = 0, len(self.compact)
        while lo < hi:  # original() is increasing: the first compact index reaching it
            mid = (lo + hi) // 2
            if self.original(mid) < stored:
                lo = mid + 1
            else:
                hi = mid
        return lo


def carried(content: str, stored: str, start: int, end: int) -> tuple[int, int] | None:
    """The span of `stored` reading as content[start:end], where `content` is `stored`
    respaced (a chunk's content and its document's text from the chunk's start):
    matched at the same place among the words, else searched for; None if absent."""
    at = Squeezed(content).compact_offset(start)
    target = Squeezed(stored)
    piece = squeezed(content[start:end])
    if piece and target.compact[at : at + len(piece)] == piece:
        return target.original(at), target.original(at + len(piece) - 1) + 1
    return target.find(piece)


def utf16(text: str, offset: int) -> int:
    """A code point offset into `text` as UTF-16 code units: characters beyond the
    Basic Multilingual Plane (most emoji) count two."""
    if offset == 0 or text.isascii():
        return offset
    return len(text[:offset].encode("utf-16-le", "surrogatepass")) // 2


def in_unit(text: str, offset: int, unit: Unit) -> int:
    return utf16(text, offset) if unit == "utf16" else offset
