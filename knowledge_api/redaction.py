"""Configured secrets taken out of any text that leaves the process.

A provider or a KB host may echo request headers in its error messages; those
messages reach warnings, streams, /health and the log. Whatever their source, every
configured secret value is masked there, with as many `*` as it has characters (so
a response's length, and its Content-Length, do not change).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

MIN_LENGTH = 4
"""Shorter values would mask ordinary words; no real secret is that short."""


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        found = {value for value in secrets if len(value) >= MIN_LENGTH}
        self.values = sorted(found, key=len, reverse=True)  # a longer one may contain another
        self._encoded = [value.encode() for value in self.values]

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, "*" * len(value))
        return text

    def bytes(self, data: bytes) -> bytes:
        for value in self._encoded:
            if value in data:
                data = data.replace(value, b"*" * len(value))
        return data


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
