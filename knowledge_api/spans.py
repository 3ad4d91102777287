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

from typing import Literal

import numpy as np

Unit = Literal["codepoints", "utf16"]
UNITS: tuple[Unit, ...] = ("codepoints", "utf16")
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character `str.isspace` takes (and `str.split` splits at)."""
_SPACE_TABLE = np.zeros(ord(max(WHITESPACE)) + 2, dtype=bool)
_SPACE_TABLE[[ord(c) for c in WHITESPACE]] = True
"""Whitespace by code point, up to the last one; the last entry stands for all beyond."""


def squeezed(text: str) -> str:
    """The text with every run of whitespace one space, and none at either end."""
    return " ".join(text.split())


class Squeezed:
    """A stored text with its whitespace runs made one space (none at either end), and
    the way back: the stored offset of each character of the compact text (a run's
    space stands at the run's first character)."""

    __slots__ = ("_kept", "compact", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.compact = squeezed(text)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        space = _SPACE_TABLE[np.minimum(codes, len(_SPACE_TABLE) - 1)]
        kept = ~space
        kept[1:] |= space[1:] & ~space[:-1]  # a run's first character stands for it
        words = np.flatnonzero(~space)
        if words.size:  # no run before the first word nor after the last
            kept[: words[0]] = False
            kept[words[-1] + 1 :] = False
        else:
            kept[:] = False
        self._kept = np.flatnonzero(kept)

    def original(self, at: int) -> int:
        """The stored offset of the compact text's character `at`."""
        return int(self._kept[at])

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
        return int(np.searchsorted(self._kept, stored))


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
