"""Configured secrets taken out of any text that leaves the process.

A provider or a KB host may echo request headers in its error messages; those
messages reach warnings, streams, /health and the log. Whatever their source, every
configured secret value, in any case and with anything between its characters, is
masked there, with as many `*` as the copy has characters (so a response's length, and
its Content-Length, do not change).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

MIN_LENGTH = 4
"""Shorter values would mask ordinary words; no real secret is that short."""
UPPER, LOWER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz"
OTHERS = bytes(b for b in range(256) if b not in b"0123456789" + UPPER + LOWER)
"""Every byte but an ASCII letter or digit: what may stand between a secret's
characters in a copy of it (spaces, dashes, dots, quotes, any non-ASCII byte)."""
LOWERED = bytes.maketrans(UPPER, LOWER)


class Redactor:
    """Masks every configured secret, and every copy of it that differs only in case or
    in what stands between its letters and digits ("AbC-1" also masks "abc1", "A B C 1"
    and "a.b.c-1"): a provider may echo a key lowercased, uppercased or spelled out.

    A copy is looked for in the text with everything but letters and digits taken out
    and the rest lowercased (one pass of `bytes.translate`, then a substring search per
    secret); only when one is there is the text searched with the one pattern, compiled
    here, that finds its place. Text without a secret costs about 2 µs a kilobyte, and 2
    more per secret (so the hit path pays 10 µs for a 1.8 kB answer with four secrets,
    where exact copies alone cost it 5). A secret of fewer than four ASCII letters and
    digits (mostly other characters) is masked as it is written only."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found = {value for value in secrets if len(value) >= MIN_LENGTH}
        self.values = sorted(found, key=len, reverse=True)  # a longer one may contain another
        found_cores = {core(value.encode()) for value in self.values}
        cores = sorted((k for k in found_cores if len(k) >= MIN_LENGTH), key=len, reverse=True)
        self._cores = cores
        self._exact = [v for v in self.values if len(core(v.encode())) < MIN_LENGTH]
        either = b"|".join(b"[^0-9A-Za-z]*".join(re.escape(bytes([c])) for c in k) for k in cores)
        self._bytes = re.compile(either or b"(?!)", re.IGNORECASE)
        self._text = re.compile((either or b"(?!)").decode(), re.IGNORECASE | re.ASCII)

    def __bool__(self) -> bool:
        return bool(self.values)

    def holds(self, data: bytes) -> bool:
        """Whether a copy of a secret may be in `data` (then the pattern finds it)."""
        letters = core(data)
        return any(k in letters for k in self._cores)

    def text(self, text: str) -> str:
        if self.holds(text.encode("utf-8", "surrogatepass")):
            text = self._text.sub(stars, text)
        for value in self._exact:
            text = text.replace(value, "*" * len(value))
        return text

    def bytes(self, data: bytes) -> bytes:
        if self.holds(data):
            data = self._bytes.sub(byte_stars, data)
        for value in self._exact:
            encoded = value.encode()
            data = data.replace(encoded, b"*" * len(encoded))
        return data


def core(data: bytes) -> bytes:
    """The ASCII letters and digits of `data`, lowercased: what every copy of a secret
    shares with it."""
    return data.translate(LOWERED, OTHERS)


def stars(match: re.Match[str]) -> str:
    return "*" * len(match.group())


def byte_stars(match: re.Match[bytes]) -> bytes:
    return b"*" * len(match.group())


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message and traceback before any handler writes it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redactor.text(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        return True
