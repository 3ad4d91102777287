"""Loaders: files and folders into Documents, with every file left out named and why.

A folder is walked recursively in sorted order (hidden files and folders, such as
`.git`, are not walked). Each file goes to the extractor of its suffix (see
extract.py). A file of unknown type, a binary file, or one that fails to parse is
skipped with its reason and the rest of the run goes on: `Loaded.skipped` lists them
so the caller can say so. Every document is held to the rules POST
/v1/knowledge/documents applies (`validation.document_fields`): a file that breaks them
is skipped, a JSON-lines record that does is left out (`path:line`, naming the field)
and the file's other records are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import ConfigurationError, ExtractionError, InvalidRequest
from knowledge_api.ingest import mail, metrics, tables
from knowledge_api.ingest.extract import (
    SNIFF_BYTES,
    Extracted,
    extractor,
    html_to_markdown,
    is_binary,
    markdown_title,
    too_long,
)
from knowledge_api.models import DEFAULT_COLLECTION, Document

JSONL = (".jsonl",)
RULES = (".yaml", ".yml")
DASHBOARDS = (".json",)
RECORD_FIELDS = {
    "source_id": "_id",
    "content": "text",
    "title": "title",
    "metadata": "metadata",
    "created_at": "created_at",
    "updated_at": "updated_at",
}
"""A JSON-lines record's fields, by the document field each becomes."""
FILE_FIELDS = {
    "source_id": "name",
    "content": "text",
    "title": "title",
    "metadata": "metadata",
    "created_at": "created_at",
    "updated_at": "updated_at",
}
"""A file's document as its errors name its fields: its name, its text."""

__all__ = [
    "LoadOptions",
    "Loaded",
    "Skipped",
    "html_to_markdown",
    "load_as",
    "load_file",
    "load_files",
    "load_jsonl",
    "load_paths",
    "markdown_title",
]


@dataclass(frozen=True)
class LoadOptions:
    source_type: str | None = None
    """Default: wiki for documents, knowledge for JSONL records."""
    collection: str = DEFAULT_COLLECTION
    metadata: dict[str, Any] = field(default_factory=dict)
    """Added to every document's (held to the rules of metadata by whoever sets it)."""
    base_url: str = ""
    max_file_mb: int = 50
    """Largest attachment of an e-mail read (KNOWLEDGE_MAX_FILE_MB)."""
    kpi_columns: Mapping[str, str] = field(default_factory=dict)
    """The columns of KPI files named otherwise than their role (KNOWLEDGE_KPI_COLUMNS)."""
    max_chars: int | None = None
    """The most characters of text one file may hold (KNOWLEDGE_MAX_FILE_CHARS); a
    longer one is an error of its own. None: no limit."""
    created_at: str = ""
    updated_at: str = ""
    """The dates of every document read (an upload's fields, as `validation.date` writes
    them), where a record names none of its own; without them a file's document is
    updated at the file's modification time, and created when first stored."""


@dataclass(frozen=True)
class Skipped:
    """A file left out: `reason` is short ("binary", "unknown type"), `detail` says more."""

    path: str
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


@dataclass
class Loaded:
    """The documents read and the files skipped. Iterating it gives the documents, so
    it goes straight to `KnowledgeService.ingest`."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    def __len__(self) -> int:
        return len(self.documents)


def load_paths(paths: list[Path], options: LoadOptions) -> Loaded:
    """Every path is checked before any file is read: a missing one is an InvalidRequest."""
    for path in paths:
        if not path.exists():
            raise InvalidRequest(str(path), "no such file or folder")
    files = (
        (file, file.relative_to(path if path.is_dir() else path.parent).as_posix())
        for path in paths
        for file in walk(path)
    )
    return load_files(files, options)


def load_files(files: Iterable[tuple[Path, str]], options: LoadOptions) -> Loaded:
    """The documents of the files, each (path, the name it is read as). E-mail
    messages are gathered across the files, so a thread spread over several is one
    document; a message or an attachment that cannot be read is skipped on its own."""
    loaded = Loaded()
    threads = mail.Threads(
        source_type=options.source_type or mail.SOURCE_TYPE,
        collection=options.collection,
        metadata=options.metadata,
        max_file_bytes=options.max_file_mb * 2**20,
    )
    paths: dict[str, str] = {}
    for file, name in files:
        if mail.in_maildir_tmp(file):
            continue  # a message still being delivered
        paths[name] = str(file)
        try:
            with reading():
                if mail.is_mail(file, name):
                    threads.read(file, name)
                else:
                    loaded.documents.extend(load_as(file, name, options, loaded.skipped))
        except ExtractionError as e:
            loaded.skipped.append(Skipped(str(file), e.reason, e.detail))
    loaded.documents.extend(threads.documents())
    for problem in threads.problems:
        loaded.skipped.append(Skipped(paths[problem.file], problem.reason, problem.detail))
    return loaded


def walk(path: Path) -> Iterator[Path]:
    """The path itself if a file, else the files under it, hidden ones left out."""
    if not path.is_dir():
        yield path
        return
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path).parts
        if file.is_file() and not any(part.startswith(".") for part in relative):
            yield file


def load_file(
    path: Path, options: LoadOptions, root: Path, refused: list[Skipped]
) -> list[Document]:
    """The documents of one file, or ExtractionError saying why there are none; its
    records left out are added to `refused`."""
    return load_as(path, path.relative_to(root).as_posix(), options, refused)


def load_as(path: Path, name: str, options: LoadOptions, refused: list[Skipped]) -> list[Document]:
    """The documents of the file at `path` read as the file `name` (a relative path,
    whose suffix says its type): an uploaded file is stored under another name. The
    records of a JSON-lines file that break the rules of a document are left out,
    each added to `refused` as `name:line`."""
    suffix = PurePosixPath(name).suffix.lower()
    with reading():
        if path.stat().st_size == 0:
            # unread, as an upload of 0 bytes is: a file truncated by a failed copy or a
            # mount half come up must not empty its document
            raise ExtractionError("empty file", "0 bytes")
        parts = structured(path, name, options)
        if parts is not None:
            modified = modified_at(path)
            return [
                file_document(name, part.extracted, options, part.key, part.source_type, modified)
                for part in parts
            ]
        if suffix in JSONL:
            return list(load_jsonl(path, options, refused, str(path)))
        extract = extractor(suffix)
        if extract is None:
            raise unknown_type(path, suffix)
        extracted = extract(path, options.max_chars)
        if options.max_chars is not None and len(extracted.content) > options.max_chars:
            raise too_long(options.max_chars)
        return [file_document(name, extracted, options, modified=modified_at(path))]


def modified_at(path: Path) -> str:
    """The file's modification time, as documents keep their dates."""
    return validation.utc_text(datetime.fromtimestamp(path.stat().st_mtime, UTC))


def structured(path: Path, name: str, options: LoadOptions) -> list[tables.Part] | None:
    """The documents of a file holding several, told apart by content: KPI files,
    rule files and dashboards (metrics), sheets (tables); None for a BEIR corpus."""
    suffix = PurePosixPath(name).suffix.lower()
    roles = options.kpi_columns
    if suffix in tables.SHEETS:
        sheets = tables.sheets(path, suffix)
        kpis = [kpi for kpi in (metrics.as_kpi(sheet, roles) for sheet in sheets) if kpi]
        others = [sheet for sheet in sheets if not metrics.is_kpi(sheet.header, roles)]
        title = PurePosixPath(name).stem.replace("-", " ").replace("_", " ")
        found = [part for sheet in kpis for part in metrics.kpi_parts(sheet)]
        return found + (tables.table_parts(others, title) if others else [])
    if suffix in JSONL:
        sheet = metrics.jsonl_sheet(path, roles)
        kpi = metrics.as_kpi(sheet, roles) if sheet is not None else None
        return metrics.kpi_parts(kpi) if kpi is not None else None
    if suffix in RULES:
        return metrics.rule_parts(path)
    if suffix in DASHBOARDS:
        return metrics.dashboard_parts(path, name)
    return None


@contextmanager
def reading() -> Iterator[None]:
    """The errors of reading a file as ExtractionError, the reason it was skipped."""
    try:
        yield
    except ConfigurationError as e:  # an optional extractor is not installed
        raise ExtractionError("extractor not installed", e.message) from e
    except InvalidRequest as e:  # its name or metadata break the rules of a document
        raise ExtractionError("bad document", e.message) from e
    except OSError as e:
        raise ExtractionError("unreadable", str(e)) from e


def unknown_type(path: Path, suffix: str) -> ExtractionError:
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    if is_binary(head):
        return ExtractionError("binary", "NUL bytes in its content")
    kind = suffix or "no suffix"
    return ExtractionError("unknown type", f"{kind}: not a supported document format")


def file_document(
    relative: str,
    extracted: Extracted,
    options: LoadOptions,
    key: str = "",
    source_type: str = "wiki",
    modified: str = "",
) -> Document:
    """The document of a file, or of the part `key` of a file that holds several,
    updated at `modified` (the file's modification time) unless `options` date it."""
    path = PurePosixPath(relative)
    url = f"{options.base_url.rstrip('/')}/{relative}" if options.base_url else ""
    metadata = {
        "path": relative,
        "format": path.suffix.lower().lstrip("."),
        **extracted.metadata,
        **options.metadata,
    }
    if url and "url" not in extracted.metadata:  # a rule's runbook is its link
        metadata["url"] = url
    title = extracted.title or path.stem.replace("-", " ").replace("_", " ")
    # the title is the file's own (a heading, its properties): shortened, never refused
    fields = {
        "name": (url or relative) + (f"#{key}" if key else ""),
        "text": extracted.content,
        "title": title[: validation.TITLE_MAX_LENGTH],
        "metadata": metadata,
        "created_at": options.created_at or None,
        "updated_at": options.updated_at or modified or None,
    }
    return Document(
        source_type=options.source_type or source_type,
        collection=options.collection,
        **validation.document_fields(fields, FILE_FIELDS, max_content=None),
    )


def load_jsonl(
    path: Path, options: LoadOptions, refused: list[Skipped], shown: str
) -> Iterator[Document]:
    """BEIR corpus layout: one {"_id", "title", "text", "metadata"?} object a line. A
    line that is no such record, or one that breaks the rules of a document, is added
    to `refused` as `shown:line`, naming the field, and the other lines are read."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield jsonl_document(line, options)
            except InvalidRequest as e:
                refused.append(Skipped(f"{shown}:{number}", "bad record", e.message))


def jsonl_document(line: str, options: LoadOptions) -> Document:
    try:
        record = json.loads(line)
    except ValueError as e:
        raise InvalidRequest("line", f"must be a JSON object ({e})") from e
    record = validation.require_object(record, "line")
    if isinstance(record.get("_id"), int) and not isinstance(record["_id"], bool):
        record["_id"] = str(record["_id"])  # BEIR ids are strings; some dumps write numbers
    fields = validation.document_fields(record, RECORD_FIELDS, max_content=None)
    fields["metadata"] = {**fields["metadata"], **options.metadata}
    fields["created_at"] = fields["created_at"] or options.created_at
    fields["updated_at"] = fields["updated_at"] or options.updated_at
    return Document(
        source_type=options.source_type or "knowledge", collection=options.collection, **fields
    )
