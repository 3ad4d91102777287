"""The log lines of the service: text or JSON, info and below to stdout, warnings and
errors to stderr, each with the id of the request it was written in ("-" outside one).

A request's own line (one per request, see web/observe.py) is written without making
a log record when nothing but our own handler would see it: lines wait in a batch and
become text together (`RequestLines`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from knowledge_api.redaction import RedactingFilter, Redactor
from knowledge_api.settings import Settings
from knowledge_api.timing import Spelled

NO_VALUE = "-"
access_log = logging.getLogger("knowledge_api.access")
ACCESS = access_log.name


class Logged:
    """What a log line knows of the request being served (web/observe.py's exchange)."""

    __slots__ = ("request_id",)

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


current: ContextVar[Logged | None] = ContextVar("knowledge_api_request", default=None)


def request_id() -> str | None:
    """The id of the request being served, None outside a request."""
    exchange = current.get()
    return exchange.request_id if exchange else None


DISCONNECTED = " client disconnected before the end of the response"
Waiting = tuple[float, str, str, str, int, float, bool | None, str, bool]
"""A request line waiting to be written: time, request id, method, route, status, ms
(not rounded yet), cache hit, key name, whether the client left before the end."""


def request_fields(line: Waiting) -> dict[str, Any]:
    """What a request's line says beyond its message (`http` of its record), `ms`
    rounded to a tenth."""
    _, _, method, route, status, ms, cache_hit, key, disconnected = line
    fields: dict[str, Any] = {
        "method": method,
        "route": route,
        "status": status,
        "ms": TENTHS.rounded(ms),
        "cache_hit": NO_VALUE if cache_hit is None else cache_hit,
        "key": key,
    }
    if disconnected:
        fields["client"] = "disconnected"
    return fields


def request_message(fields: dict[str, Any]) -> str:
    cache_hit = fields["cache_hit"]
    cache = cache_hit if cache_hit == NO_VALUE else str(cache_hit).lower()
    message = (
        f"{fields['method']} {fields['route']} {fields['status']} {fields['ms']}ms "
        f"cache_hit={cache} key={fields['key']}"
    )
    return message + DISCONNECTED if "client" in fields else message


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id() or NO_VALUE
        return True


class BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


class Seconds:
    """A timestamp's whole second as text, formatted once per second: a log line's time
    would otherwise cost as much as the rest of the line."""

    def __init__(self, render: Callable[[int], str]) -> None:
        self.render = render
        self.second = -1
        self.text = ""

    def of(self, created: float) -> str:
        second = int(created)
        if second != self.second:
            self.second, self.text = second, self.render(second)
        return self.text


UTC_SECONDS = Seconds(lambda s: datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
LOCAL_SECONDS = Seconds(
    lambda s: time.strftime(logging.Formatter.default_time_format, time.localtime(s))
)


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        exception = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(
            record.created,
            record.levelname,
            record.name,
            getattr(record, "request_id", NO_VALUE),
            record.getMessage(),
            getattr(record, "http", {}),
            exception,
        )

    def line(
        self,
        created: float,
        level: str,
        name: str,
        request_id: str,
        message: str,
        fields: dict[str, Any],
        exception: str | None = None,
    ) -> str:
        line: dict[str, Any] = {
            "time": f"{UTC_SECONDS.of(created)}.{int(created * 1000) % 1000:03d}+00:00",
            "level": level.lower(),
            "logger": name,
            "message": message,
            "request_id": request_id,
            **fields,
        }
        if exception:
            line["exception"] = exception
        return orjson.dumps(line, default=str).decode()

    def request_lines(self, waiting: list[Waiting], masks: Iterable[Redactor]) -> list[str]:
        """`line` of each request waiting, from a template when no text in it needs
        escaping (request ids, route templates, methods and key names never do)."""
        lines = []
        known = KNOWN_PARTS
        for line in waiting:
            created, request_id, method, route, status, exact_ms, cache_hit, key, left = line
            parts = known.get((method, route, status, cache_hit, key)) or Parts.of(
                method, route, status, cache_hit, key
            )
            if left or parts.json_head is None:
                fields = request_fields(line)
                message = request_message(fields)
                for redactor in masks:
                    message = redactor.text(message)
                lines.append(self.line(created, "INFO", ACCESS, request_id, message, fields))
                continue
            ms_text = TENTHS(exact_ms)
            stamp = f"{UTC_SECONDS.of(created)}.{MILLIS[int(created * 1000) % 1000]}"
            if not masks:  # the message's text around `ms` is the line's too, made once
                lines.append(
                    f'{{"time":"{stamp}{parts.json_message_head}{ms_text}'
                    f"{parts.json_message_tail}{request_id}{parts.json_head}{ms_text}"
                    f"{parts.json_tail}"
                )
                continue
            message = f"{parts.head}{ms_text}{parts.tail}"
            for redactor in masks:
                message = redactor.text(message)
            lines.append(
                f'{{"time":"{stamp}+00:00","level":"info","logger":"{ACCESS}",'
                f'"message":"{message}","request_id":"{request_id}{parts.json_head}{ms_text}'
                f"{parts.json_tail}"
            )
        return lines


MILLIS = [f"{ms:03d}" for ms in range(1000)]
PLAIN_JSON = re.compile(r"[ !#-\[\]-~]*")
"""Printable ASCII but `"` and a backslash: the same text as a JSON string."""


@dataclass(frozen=True, slots=True)
class Parts:
    """The text around `ms` that the lines of requests alike share, made once: the
    message before and after it and, when no text in it needs escaping (request ids,
    route templates, methods and key names never do), the JSON line's fields."""

    head: str
    tail: str
    json_head: str | None
    json_tail: str
    json_message_head: str
    """A JSON line from its time's end to `ms` in its message (when no secret is masked)."""
    json_message_tail: str
    """From `ms` in the message to the request id's value."""

    @classmethod
    def of(cls, method: str, route: str, status: int, cache_hit: bool | None, key: str) -> Parts:
        found = KNOWN_PARTS.get((method, route, status, cache_hit, key))
        if found is None:
            if len(KNOWN_PARTS) >= 1024:
                KNOWN_PARTS.clear()
            found = KNOWN_PARTS[method, route, status, cache_hit, key] = cls.made(
                method, route, status, cache_hit, key
            )
        return found

    @classmethod
    def made(cls, method: str, route: str, status: int, cache_hit: bool | None, key: str) -> Parts:
        cache = NO_VALUE if cache_hit is None else "true" if cache_hit else "false"
        plain = all(PLAIN_JSON.fullmatch(text) for text in (method, route, key))
        json_head = f'","method":"{method}","route":"{route}","status":{status},"ms":'
        cache_json = f'"{NO_VALUE}"' if cache_hit is None else cache
        head = f"{method} {route} {status} "
        tail = f"ms cache_hit={cache} key={key}"
        return cls(
            head=head,
            tail=tail,
            json_head=json_head if plain else None,
            json_tail=f',"cache_hit":{cache_json},"key":"{key}"}}',
            json_message_head=f'+00:00","level":"info","logger":"{ACCESS}","message":"{head}',
            json_message_tail=f'{tail}","request_id":"',
        )


KNOWN_PARTS: dict[tuple[str, str, int, bool | None, str], Parts] = {}
TENTHS = Spelled(1, repr)
"""A line's `ms` as text (as JSON writes it too)."""


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def request_lines(self, waiting: list[Waiting], masks: Iterable[Redactor]) -> list[str]:
        lines = []
        for created, request_id, method, route, status, exact_ms, cache_hit, key, left in waiting:
            parts = Parts.of(method, route, status, cache_hit, key)
            message = f"{parts.head}{TENTHS(exact_ms)}{parts.tail}"
            if left:
                message += DISCONNECTED
            for redactor in masks:
                message = redactor.text(message)
            stamp = f"{LOCAL_SECONDS.of(created)},{MILLIS[int(created * 1000) % 1000]}"
            lines.append(f"{stamp} INFO {ACCESS} [{request_id}] {message}")
        return lines


class SplitHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """One side of the split: configuring again replaces these, and only these.

    Without a stream of its own it writes to whatever sys.stdout or sys.stderr is at
    the time, like logging's last resort, so a replaced stream (a test's capture,
    closed since) is never written to."""

    def __init__(self, name: str, stream: TextIO | None) -> None:
        super().__init__(stream or getattr(sys, name))
        self.system_stream = None if stream else name

    def emit(self, record: logging.LogRecord) -> None:
        if self is LINES.handler:
            LINES.flush()  # the request lines waiting come first
        self.stream_now()
        super().emit(record)

    def stream_now(self) -> TextIO:
        if self.system_stream:
            self.stream = getattr(sys, self.system_stream)
        stream: TextIO = self.stream
        return stream


def configure_logging(
    settings: Settings, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> None:
    """The one logging setup of `knowledge-api serve` and the other commands: info and
    below to stdout, warnings and errors to stderr, as text or JSON lines, each with
    the request id ("-" outside a request)."""
    formatter = JSONFormatter() if settings.log_format == "json" else TextFormatter()
    out = SplitHandler("stdout", stdout)
    out.addFilter(BelowWarning())
    err = SplitHandler("stderr", stderr)
    err.setLevel(logging.WARNING)
    root = logging.getLogger()
    remove_split_handlers()
    for handler in (out, err):
        handler.addFilter(RequestIdFilter())
        handler.setFormatter(formatter)
        root.addHandler(handler)
    LINES.flush()
    LINES.handler = out
    root.setLevel(settings.log_level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per call to a provider
    logging.getLogger("mcp").setLevel(logging.WARNING)  # a line per stateless MCP request


def remove_split_handlers() -> None:
    LINES.flush()
    LINES.handler = None
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, SplitHandler)]:
        root.removeHandler(handler)


class RequestLines:
    """The request lines, written straight to the info handler `configure_logging` set
    up: the text its formatter would make of the record, without making the record,
    which costs more than the rest of a cache hit. Only while that handler is the one
    a record would reach (no other handler added, as a test's log capture adds, no
    filter but ours and the secrets' mask); otherwise the line goes through `logging`
    as any other.

    Lines are written in batches: at most FLUSH_S after the first one waiting, before
    any other line of that handler, and when the app stops. A request only leaves its
    values; they become text when the batch is written, in one loop."""

    FLUSH_S = 0.05
    MAX_WAITING = 256

    def __init__(self) -> None:
        self.handler: SplitHandler | None = None
        self.waiting: list[Waiting] = []
        self._checked: tuple[Any, ...] = ()
        self._masks: list[Redactor] | None = None
        """The secrets' masks of the handler, as of `_checked`; None: write through logging."""
        self._direct: tuple[JSONFormatter | TextFormatter, list[Redactor]] | None = None
        """The formatter and masks of the last lines taken in: theirs when written."""

    def request(
        self,
        request_id: str,
        method: str,
        route: str,
        status: int,
        ms: float,
        cache_hit: bool | None,
        key: str,
        disconnected: bool = False,
    ) -> None:
        """One request's line, at info: written directly when it can be (made into text
        only when the lines waiting are written, in one go), else logged. Whether it
        can be is checked as a batch begins: the lines joining it go the same way.
        `ms` is written rounded to a tenth, rounded only then."""
        entry = (time.time(), request_id, method, route, status, ms, cache_hit, key, disconnected)
        waiting = self.waiting
        if waiting:
            waiting.append(entry)
            if len(waiting) >= self.MAX_WAITING:
                self.flush()
            return
        handler = self.handler
        if handler is None or self.masks(handler) is None:
            fields = request_fields(entry)
            access_log.info(request_message(fields), extra={"http": fields})
            return
        waiting.append(entry)
        self.flush_soon()

    def masks(self, handler: SplitHandler) -> list[Redactor] | None:
        """Checked again only when what decides it changed: compared in place, as
        building the state to compare would cost as much as the line."""
        checked = self._checked
        between = access_log.parent
        if (
            checked
            and checked[0] is handler
            and checked[1] == logging.root.handlers
            and checked[2] == handler.filters
            and checked[3] is handler.formatter
            and not access_log.handlers
            and not access_log.disabled
            and (between is None or between is logging.root or not between.handlers)
        ):
            return self._masks
        state = (handler, [*logging.root.handlers], [*handler.filters], handler.formatter)
        self._checked, self._masks = state, self.masks_of(handler, state)
        if self._masks is not None:
            self._direct = (handler.formatter, self._masks)  # type: ignore[assignment]
        return self._masks

    def masks_of(self, handler: SplitHandler, state: tuple[Any, ...]) -> list[Redactor] | None:
        _, handlers, filters, formatter = state
        between = access_log.parent
        elsewhere = (
            access_log.handlers,
            access_log.disabled,
            between is not None and between is not logging.root and between.handlers,
        )
        if len(handlers) != 2 or handler not in handlers or any(elsewhere):
            return None
        if not isinstance(formatter, JSONFormatter | TextFormatter):
            return None
        masks = []
        for each in filters:
            if isinstance(each, RedactingFilter):
                masks.append(each.redactor)
            elif not isinstance(each, RequestIdFilter | BelowWarning):
                return None
        return masks

    def flush_soon(self) -> None:
        try:
            asyncio.get_running_loop().call_later(self.FLUSH_S, self.flush)
        except RuntimeError:  # no loop: nothing would flush later
            self.flush()

    def flush(self) -> None:
        handler, waiting, direct = self.handler, self.waiting, self._direct
        if not waiting or handler is None or direct is None:
            return
        self.waiting = []
        formatter, masks = direct
        lines = formatter.request_lines(waiting, masks)
        with handler.lock or contextlib.nullcontext():
            handler.stream_now().write(handler.terminator.join(lines) + handler.terminator)
            handler.flush()


LINES = RequestLines()
atexit.register(LINES.flush)
