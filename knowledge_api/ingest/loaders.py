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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import ConfigurationError, ExtractionError, InvalidRequest
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
RECORD_FIELDS = {"source_id": "_id", "content": "text", "title": "title", "metadata": "metadata"}
"""A JSON-lines record's fields, by the document field each becomes."""
FILE_FIELDS = {"source_id": "name", "content": "text", "title": "title", "metadata": "metadata"}
"""A file's document as its errors name its fields: its name, its text."""

__all__ = [
    "LoadOptions",
    "Loaded",
    "Skipped",
    "html_to_markdown",
    "load_as",
    "load_file",
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
    max_chars: int | None = None
    """The most characters of text one file may hold (KNOWLEDGE_MAX_FILE_CHARS); a
    longer one is an error of its own. None: no limit."""


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
    loaded = Loaded()
    for path in paths:
        root = path if path.is_dir() else path.parent
        for file in walk(path):
            try:
                loaded.documents.extend(load_file(file, options, root, loaded.skipped))
            except ExtractionError as e:
                loaded.skipped.append(Skipped(str(file), e.reason, e.detail))
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
    try:
        if suffix in JSONL:
            return list(load_jsonl(path, options, refused, str(path)))
        extract = extractor(suffix)
        if extract is None:
            raise unknown_type(path, suffix)
        extracted = extract(path, options.max_chars)
        if options.max_chars is not None and len(extracted.content) > options.max_chars:
            raise too_long(options.max_chars)
        return [file_document(name, extracted, options)]
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


def file_document(relative: str, extracted: Extracted, options: LoadOptions) -> Document:
    path = PurePosixPath(relative)
    url = f"{options.base_url.rstrip('/')}/{relative}" if options.base_url else ""
    metadata = {
        "path": relative,
        "format": path.suffix.lower().lstrip("."),
        **extracted.metadata,
        **options.metadata,
    }
    if url:
        metadata["url"] = url
    title = extracted.title or path.stem.replace("-", " ").replace("_", " ")
    # the title is the file's own (a heading, its properties): shortened, never refused
    fields = {
        "name": url or relative,
        "text": extracted.content,
        "title": title[: validation.TITLE_MAX_LENGTH],
        "metadata": metadata,
    }
    return Document(
        source_type=options.source_type or "wiki",
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
    return Document(
        source_type=options.source_type or "knowledge", collection=options.collection, **fields
    )
