"""Markdown-aware chunking that keeps each passage's section hierarchy.

Blocks (paragraphs, lists, fenced code) are packed into chunks of at most
`max_chars` characters without crossing a heading, so every chunk belongs to
exactly one section path ("Install > Linux"). About 900 characters stays within
the 256 word pieces the local model reads, heading path included. A list packs to
half that (`LIST_CHARS`): each of its items is a fact of its own (a setting, a field,
an error), and the vector of a passage of many items is the mean of unrelated facts,
far from a question about any one of them, while a paragraph is about one thing.

Every chunk records where it sits in the document's text (`start`, `end`, code points):
the text there reads as the chunk's content with runs of whitespace as one space (a
block's lines keep their breaks, a cut sentence its words). A chunk of a PDF also
records its page: the `## Page N` heading the extractor put above the page's text.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from knowledge_api import text
from knowledge_api.models import Chunk, Document, chunk_id
from knowledge_api.spans import Squeezed, squeezed

MAX_CHARS = 900
LIST_CHARS = 450
"""The most characters of a passage that holds a list (module docstring)."""
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINE_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+|^\s*\|")
"""A list item or a table row: a line that starts a unit of a line-structured block."""
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_PAGE = re.compile(r"^## Page (\d+)[ \t\r]*$", re.MULTILINE)
PAGED = ("pages", "ocr_pages")
"""Metadata keys of a document extracted page by page (a PDF, a multi-page scan)."""


@dataclass(frozen=True, slots=True)
class Section:
    path: tuple[str, ...]
    blocks: tuple[str, ...]


def chunk_document(doc: Document, max_chars: int = MAX_CHARS, markdown: bool = True) -> list[Chunk]:
    pieces = [
        (" > ".join(section.path), piece)
        for section in sections(doc.content, doc.title, markdown)
        for piece in pack(section.blocks, max_chars)
    ]
    if not pieces and doc.content.strip():
        # only headings: index them as they are, so the document can still be found
        pieces = [("", piece) for piece in pack((doc.content.strip(),), max_chars)]
    spans = offsets(doc.content, [piece for _, piece in pieces])
    pages = page_starts(doc) if any(key in doc.metadata for key in PAGED) else None
    return [
        Chunk(
            id=chunk_id(doc.id, i),
            document_id=doc.id,
            chunk_index=i,
            content=piece,
            title=doc.title,
            section=path,
            chunk_count=len(pieces),
            start=span[0] if span else None,
            end=span[1] if span else None,
            page=page_at(pages, span[0]) if pages and span else None,
        )
        for i, ((path, piece), span) in enumerate(zip(pieces, spans, strict=True))
    ]


def offsets(content: str, pieces: Sequence[str]) -> list[tuple[int, int] | None]:
    """Where each piece (in document order) reads in `content`, whitespace runs as one
    space: each is looked for after the one before; None where none reads so."""
    stored = Squeezed(content)
    found: list[tuple[int, int] | None] = []
    cursor = 0
    for piece in pieces:
        wanted = squeezed(piece)
        at = stored.compact.find(wanted, cursor) if wanted else -1
        if at < 0 and wanted:
            at = stored.compact.find(wanted)
        if at < 0:
            found.append(None)
            continue
        cursor = at + len(wanted)
        found.append((stored.original(at), stored.original(cursor - 1) + 1))
    return found


def page_starts(doc: Document) -> list[tuple[int, int]]:
    """(offset, page number) of each `## Page N` heading of a paged document."""
    return [(m.start(), int(m.group(1))) for m in _PAGE.finditer(doc.content)]


def page_at(pages: list[tuple[int, int]], offset: int) -> int | None:
    k = bisect_right(pages, (offset, float("inf"))) - 1
    return pages[k][1] if k >= 0 else None


def sections(content: str, title: str, markdown: bool = True) -> Iterator[Section]:
    """Sections in document order; the heading that repeats the title is not a level."""
    path: list[tuple[int, str]] = []
    blocks: list[str] = []
    block: list[str] = []
    fenced = False

    def flush_block() -> None:
        if block and "".join(block).strip():
            blocks.append("\n".join(block).strip("\n"))
        block.clear()

    for line in content.splitlines():
        if markdown and _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced or not markdown else _HEADING.match(line)
        if heading:
            flush_block()
            if blocks:
                yield Section(tuple(name for _, name in path), tuple(blocks))
                blocks = []
            level, name = len(heading.group(1)), heading.group(2).strip()
            path = [(lvl, n) for lvl, n in path if lvl < level]
            if not (level == 1 and not path and name.strip() == title.strip()):
                path.append((level, name))
        elif not line.strip() and not fenced:
            flush_block()
        else:
            block.append(line)
    flush_block()
    if blocks:
        yield Section(tuple(name for _, name in path), tuple(blocks))


def pack(blocks: tuple[str, ...], max_chars: int) -> Iterator[str]:
    """Consecutive blocks joined up to max_chars, a passage that holds a list up to
    LIST_CHARS; a longer block is split first, a list between its items, which join
    the passage before them one by one: the sentence that introduces a list stays
    with its first items."""
    current, budget = "", max_chars
    for block in blocks:
        limit = budget_of(block, max_chars)
        for piece, separator in pieces(block, limit):
            budget = min(budget, limit)
            if current and len(current) + len(separator) + len(piece) > budget:
                yield current
                current, budget = "", limit
            current = f"{current}{separator}{piece}" if current else piece
    if current:
        yield current


def budget_of(block: str, max_chars: int) -> int:
    """The most characters of a passage holding `block`: fewer for a list (not a table,
    whose rows a header makes one unit, nor code)."""
    return min(max_chars, LIST_CHARS) if listed(block) else max_chars


def listed(block: str) -> bool:
    lines = block.split("\n")
    return not _FENCE.match(lines[0]) and any(_LIST_ITEM.match(line) for line in lines)


def pieces(block: str, limit: int) -> Iterator[tuple[str, str]]:
    """The pieces of a block, each with what joins it to the text before it."""
    if not listed(block) or len(block) <= limit:
        for piece in split_long(block, limit):
            yield piece, "\n\n"
        return
    for n, unit in enumerate(line_units(block.split("\n"), code=False)):
        parts = (unit,) if len(unit) <= limit else split_prose(unit, limit)
        for k, part in enumerate(parts):
            yield part, "\n\n" if n == k == 0 else "\n" if k == 0 else " "


def split_long(block: str, max_chars: int) -> Iterator[str]:
    """A block longer than max_chars in pieces: a list, table or code block between its
    items, rows or lines, keeping its line breaks; prose (and an item too long on its
    own) at sentence ends."""
    if len(block) <= max_chars:
        return iter((block,))
    lines = block.split("\n")
    if _FENCE.match(lines[0]) or any(_LINE_ITEM.match(line) for line in lines):
        units = line_units(lines, code=bool(_FENCE.match(lines[0])))
        parts = (
            part
            for unit in units
            for part in ((unit,) if len(unit) <= max_chars else split_prose(unit, max_chars))
        )
        return join_greedy(parts, max_chars, "\n")
    return split_prose(block, max_chars)


def line_units(lines: list[str], code: bool) -> Iterator[str]:
    """Every line of code; otherwise each item or row with its continuation lines."""
    unit: list[str] = []
    for line in lines:
        if unit and (code or _LINE_ITEM.match(line)):
            yield "\n".join(unit)
            unit = []
        unit.append(line)
    if unit:
        yield "\n".join(unit)


def split_prose(block: str, max_chars: int) -> Iterator[str]:
    """Prose cut at sentence ends, and a sentence longer than max_chars at spaces."""
    parts = (
        part
        for sentence in text.sentences(block)
        for part in join_greedy(sentence.split(), max_chars, " ")
    )
    return join_greedy(parts, max_chars, " ")


def join_greedy(pieces: Iterable[str], max_chars: int, separator: str) -> Iterator[str]:
    current = ""
    for piece in pieces:
        if current and len(current) + len(separator) + len(piece) > max_chars:
            yield current
            current = ""
        current = f"{current}{separator}{piece}" if current else piece
    if current:
        yield current
