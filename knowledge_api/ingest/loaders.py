"""Loaders: files and folders of Markdown, plain text, HTML and JSONL into Documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from knowledge_api.errors import InvalidRequest
from knowledge_api.models import DEFAULT_COLLECTION, Document

MARKDOWN = (".md", ".markdown")
TEXT = (".txt", ".text", ".rst")
HTML = (".html", ".htm")
JSONL = (".jsonl",)
SUPPORTED = MARKDOWN + TEXT + HTML + JSONL


@dataclass(frozen=True)
class LoadOptions:
    source_type: str | None = None
    """Default: wiki for documents, knowledge for JSONL records."""
    collection: str = DEFAULT_COLLECTION
    metadata: dict[str, Any] = field(default_factory=dict)
    base_url: str = ""


def load_paths(paths: list[Path], options: LoadOptions) -> Iterator[Document]:
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED)
            for file in files:
                yield from load_file(file, options, root=path)
        elif path.is_file():
            yield from load_file(path, options, root=path.parent)
        else:
            raise InvalidRequest(str(path), "no such file or folder")


def load_file(path: Path, options: LoadOptions, root: Path) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix in JSONL:
        yield from load_jsonl(path, options)
        return
    raw = path.read_text(encoding="utf-8", errors="replace")
    relative = path.relative_to(root).as_posix()
    if suffix in HTML:
        title, content = html_to_markdown(raw)
    else:
        title, content = markdown_title(raw) if suffix in MARKDOWN else "", raw
    url = f"{options.base_url.rstrip('/')}/{relative}" if options.base_url else ""
    metadata = {"path": relative, "format": suffix.lstrip("."), **options.metadata}
    if url:
        metadata["url"] = url
    yield Document(
        source_type=options.source_type or "wiki",
        source_id=url or relative,
        content=content,
        title=title or path.stem.replace("-", " ").replace("_", " "),
        metadata=metadata,
        collection=options.collection,
    )


def jsonl_records(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    """The BEIR objects of a JSON-lines file, each with its "_id" and "text" as strings;
    a line that is not one fails with its file and line number."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                yield {**record, "_id": str(record["_id"]), "text": str(record["text"])}
            except (ValueError, KeyError, TypeError) as e:
                raise InvalidRequest(f"{path}:{number}", f"not a {kind} record ({e})") from e


def load_jsonl(path: Path, options: LoadOptions) -> Iterator[Document]:
    """BEIR corpus layout: one {"_id", "title", "text", "metadata"?} object a line."""
    for record in jsonl_records(path, "corpus"):
        given = record.get("metadata")
        extra: dict[str, Any] = given if isinstance(given, dict) else {}
        yield Document(
            source_type=options.source_type or "knowledge",
            source_id=record["_id"],
            content=record["text"],
            title=str(record.get("title") or ""),
            metadata={**extra, **options.metadata},
            collection=options.collection,
        )


def markdown_title(content: str) -> str:
    for line in content.splitlines():
        if line.startswith("# "):
            return line[2:].strip().rstrip("#").strip()
    return ""


def html_to_markdown(html: str) -> tuple[str, str]:
    """(title, Markdown-like text): headings become # lines so chunks keep their path."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    body = "\n\n".join(parser.blocks)
    return parser.title.strip(), body


class _HTMLText(HTMLParser):
    SKIP = frozenset({"script", "style", "nav", "header", "footer", "noscript", "svg", "template"})
    BLOCK = frozenset(
        {
            "p",
            "div",
            "li",
            "pre",
            "blockquote",
            "td",
            "th",
            "tr",
            "section",
            "article",
            "br",
            "dd",
            "dt",
            "table",
            "ul",
            "ol",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.blocks: list[str] = []
        self._text: list[str] = []
        self._skipping = 0
        self._in_title = False
        self._heading = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
            self._flush()
            self._heading = int(tag[1])
        elif tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in {"h1", "h2", "h3", "h4", "h5", "h6"} or tag in self.BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self._text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        line = " ".join("".join(self._text).split())
        self._text.clear()
        if line:
            if self._heading:
                line = f"{'#' * self._heading} {line}"
                if self._heading == 1 and not self.title:
                    self.title = line[2:]
            self.blocks.append(line)
        self._heading = 0
