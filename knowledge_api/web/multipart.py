"""A multipart/form-data body received as it arrives: each file part written to its own
file on disk a chunk at a time (never held whole in memory), up to a size limit, with
python-multipart's streaming parser (the one Starlette's own form parsing uses).

A file past the limit stops being written and is kept as an error of its own, so the
other files of the body still count; the body goes on being read to its end.
"""

from __future__ import annotations

import asyncio
import errno
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header
from starlette.requests import Request

from knowledge_api.errors import (
    IndexingError,
    InvalidRequest,
    RateLimited,
    RequestTimeout,
    UnsupportedMediaType,
)

MAX_FIELD_BYTES = 1024
"""A form field (collection, source, source_type) is a short name."""


@dataclass(slots=True)
class ReceivedFile:
    name: str
    """The file name the client sent, as sent."""
    path: Path
    size: int = 0
    too_large: bool = False


@dataclass(slots=True)
class Received:
    values: dict[str, list[str]] = field(default_factory=dict)
    """Each form field's values, in the order sent (one, unless it was repeated)."""
    files: list[ReceivedFile] = field(default_factory=list)

    @property
    def fields(self) -> dict[str, str]:
        """Each form field's first value."""
        return {name: sent[0] for name, sent in self.values.items()}


class _Parts:
    """The parser's callbacks: headers of a part, then its data to a file or a field.
    File operations are queued (`ops`) and done off the event loop after each chunk."""

    def __init__(self, folder: Path, file_field: str, max_file_bytes: int, max_files: int):
        self.folder = folder
        self.file_field = file_field
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.received = Received()
        self.header_name = b""
        self.header_value = b""
        self.disposition = b""
        self.name = ""
        self.data = bytearray()
        self.file: ReceivedFile | None = None
        self.out: IO[bytes] | None = None
        self.opened: list[IO[bytes]] = []
        self.ops: list[tuple[str, IO[bytes], bytes]] = []

    def on_part_begin(self) -> None:
        self.disposition, self.name, self.file, self.out = b"", "", None, None
        self.data = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        if self.header_name.lower() == b"content-disposition":
            self.disposition = self.header_value
        self.header_name, self.header_value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.disposition)
        self.name = options.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" not in options:
            return
        if self.name != self.file_field:
            raise InvalidRequest(self.name, f"files are sent as {self.file_field!r} parts")
        if len(self.received.files) >= self.max_files:
            raise InvalidRequest(self.file_field, f"at most {self.max_files} files an upload")
        sent = options[b"filename"].decode("utf-8", "replace")
        path = self.folder / f"{len(self.received.files):05d}"
        self.file = ReceivedFile(sent, path)
        self.received.files.append(self.file)
        self.out = path.open("wb")
        self.opened.append(self.out)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self.file is None or self.out is None:
            if len(self.data) + len(piece) > MAX_FIELD_BYTES:
                raise InvalidRequest(self.name, f"a form field is at most {MAX_FIELD_BYTES} bytes")
            self.data += piece
        elif not self.file.too_large:
            self.file.size += len(piece)
            if self.file.size > self.max_file_bytes:
                self.file.too_large = True  # what was written goes, the rest is not kept
                self.ops.append(("truncate", self.out, b""))
            else:
                self.ops.append(("write", self.out, piece))

    def on_part_end(self) -> None:
        if self.out is not None:
            self.ops.append(("close", self.out, b""))
        else:
            value = self.data.decode("utf-8", "replace")
            self.received.values.setdefault(self.name, []).append(value)

    def flush(self) -> None:
        """The queued file operations, in order (on a worker thread)."""
        for op, out, data in self.ops:
            if op == "write":
                out.write(data)
            elif op == "truncate":
                out.truncate(0)
            else:
                out.close()
        self.ops.clear()

    def close(self) -> None:
        self.ops.clear()
        for out in self.opened:
            out.close()


RETRY_AFTER_S = 5


class Receiving:
    """The uploads whose bodies are being received: each holds a connection and open
    files for as long as its client sends, so a process receives at most `most` at
    once and one caller (a key, or a client address without keys) `per_caller`; one
    more is 429 with Retry-After, before its body is read."""

    def __init__(self, most: int, per_caller: int) -> None:
        self.most = most
        self.per_caller = per_caller
        self.open = 0
        self.by_caller: Counter[str] = Counter()

    @contextmanager
    def slot(self, caller: str) -> Iterator[None]:
        if self.open >= self.most:
            raise RateLimited(
                f"{self.most} uploads are being received, the most this process takes at "
                f"once (KNOWLEDGE_MAX_UPLOADS): retry in {RETRY_AFTER_S} s",
                RETRY_AFTER_S,
                max_uploads=self.most,
            )
        if self.by_caller[caller] >= self.per_caller:
            raise RateLimited(
                f"this caller already sends {self.per_caller} uploads, the most one key (or "
                "client address, without keys) sends at once (KNOWLEDGE_MAX_UPLOADS_PER_KEY): "
                f"retry in {RETRY_AFTER_S} s",
                RETRY_AFTER_S,
                max_uploads_per_key=self.per_caller,
            )
        self.open += 1
        self.by_caller[caller] += 1
        try:
            yield
        finally:
            self.open -= 1
            self.by_caller[caller] -= 1
            if not self.by_caller[caller]:
                del self.by_caller[caller]


@dataclass(frozen=True, slots=True)
class Pace:
    """How slowly a body may arrive: a client that sends nothing for `idle` seconds,
    or whose body, once its first `idle` seconds are over, arrives on average slower
    than `min_rate` bytes a second gets 408. (A byte every few seconds would otherwise
    hold a connection and a file open for as long as it likes.)"""

    idle: float
    min_rate: float

    def deadlines(self, started: float, now: float, received: int) -> tuple[float, float]:
        """When the wait for the next chunk ends: nothing came (`idle`), or the body is
        behind its rate."""
        return now + self.idle, started + self.idle + received / self.min_rate

    def too_slow(self, stalled: bool, seconds: float, received: int) -> RequestTimeout:
        if stalled:
            return RequestTimeout(
                f"the upload stalled: nothing arrived for {self.idle:g} s (KNOWLEDGE_BODY_TIMEOUT)",
                timeout_s=self.idle,
            )
        rate = self.min_rate / 1024
        return RequestTimeout(
            f"the upload arrived slower than {rate:g} KiB/s (KNOWLEDGE_UPLOAD_MIN_RATE): "
            f"{received} bytes in {seconds:.0f} s",
            min_rate_kib_s=rate,
            received_bytes=received,
        )


async def receive(
    request: Request,
    folder: Path,
    max_file_bytes: int,
    max_files: int,
    pace: Pace,
    file_field: str = "file",
) -> Received:
    """The form's fields and files, each file written under `folder`. A client that
    sends too slowly (`pace`) gets 408; a body that is not a well-formed
    multipart/form-data one, 400 or 415."""
    media_type, options = parse_options_header(request.headers.get("content-type", ""))
    if media_type != b"multipart/form-data":
        raise UnsupportedMediaType(
            "the body must be sent as multipart/form-data with one or more file parts "
            f"(got {media_type.decode() or 'no content type'})",
            content_type=media_type.decode(),
        )
    boundary = options.get(b"boundary")
    if not boundary:
        raise InvalidRequest("content-type", "multipart/form-data needs its boundary")
    try:
        return await _receive(
            request, folder, boundary, max_file_bytes, max_files, pace, file_field
        )
    except (TimeoutError, ConnectionError):
        raise
    except OSError as e:  # the upload folder cannot take the files: the disk is full, ...
        raise unwritable(folder, e) from e


def unwritable(folder: Path, error: OSError) -> IndexingError:
    """503 naming the folder and why it cannot be written, as a JSON write that meets a
    full disk is answered."""
    cause = "the disk is full" if error.errno in FULL else "it cannot be written"
    return IndexingError(
        f"the upload could not be kept in {folder.parent}: {cause} ({error.strerror or error})",
        path=str(folder.parent),
    )


FULL = (errno.ENOSPC, errno.EDQUOT)
"""A full disk, or the user's quota spent."""


async def _receive(
    request: Request,
    folder: Path,
    boundary: bytes,
    max_file_bytes: int,
    max_files: int,
    pace: Pace,
    file_field: str,
) -> Received:
    folder.mkdir(parents=True, exist_ok=True)
    parts = _Parts(folder, file_field, max_file_bytes, max_files)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": parts.on_part_begin,
            "on_part_data": parts.on_part_data,
            "on_part_end": parts.on_part_end,
            "on_header_field": parts.on_header_field,
            "on_header_value": parts.on_header_value,
            "on_header_end": parts.on_header_end,
            "on_headers_finished": parts.on_headers_finished,
        },
    )
    stream = request.stream()
    loop = asyncio.get_running_loop()
    started, received = loop.time(), 0
    try:
        while True:
            idle, behind = pace.deadlines(started, loop.time(), received)
            try:
                async with asyncio.timeout_at(min(idle, behind)):
                    chunk = await anext(stream, None)
            except TimeoutError as e:
                raise pace.too_slow(idle <= behind, loop.time() - started, received) from e
            if chunk is None:
                break
            received += len(chunk)
            parser.write(chunk)
            if parts.ops:
                await asyncio.to_thread(parts.flush)
        parser.finalize()
        parts.flush()
        if parser.state not in (MultipartState.END, MultipartState.BOUNDARY_PADDING):
            # python-multipart's finalize checks nothing: a body cut short would keep a
            # truncated last file as if it were whole
            raise InvalidRequest("body", "ended before the closing boundary of its form")
    except FormParserError as e:
        raise InvalidRequest("body", f"must be well-formed multipart/form-data ({e})") from e
    finally:
        parts.close()
    return parts.received
