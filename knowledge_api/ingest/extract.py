"""Text of a file by its format, as Markdown the chunker can split by section.

Each extractor returns an `Extracted` (title, Markdown-like content, metadata of
its own) or raises `ExtractionError` with a reason short enough for the run's
summary. trafilatura finds the main content of an HTML page and pypdf reads PDF text
page by page (both part of the base install, imported only when a file of theirs comes
up); Word and PowerPoint files are read with the standard library (office.py).
"""

from __future__ import annotations

import logging
import re
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from knowledge_api.errors import ExtractionError
from knowledge_api.ingest import ocr, office
from knowledge_api.registry import import_extra

MARKDOWN = (".md", ".markdown")
TEXT = (".txt", ".text", ".rst")
HTML = (".html", ".htm", ".xhtml")
PDF = (".pdf",)
DOCX = (".docx",)
PPTX = (".pptx",)
IMAGES = ocr.IMAGES
DOCUMENTS_EXTRA = "documents"
SNIFF_BYTES = 8192
MAX_UNZIPPED_BYTES = 256 * 2**20
"""Most an Office file's parts may expand to (a 50 MB file of text and images expands
to about its own size; XML alone, about ten times)."""

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCE = re.compile(r"^\s*(```|~~~)")
_ANCHOR_MARKS = re.compile(r"^(#{1,6} )[ \t]*[§¶🔗]*[ \t]*(.*?)[ \t]*[§¶🔗]*[ \t]*$", re.MULTILINE)
"""A heading line with the permalink sign documentation generators add after it (Sphinx's
¶) or before it (rustdoc's §)."""
PERMALINK_SIGNS = " \t§¶🔗"
_MARKUP_START = re.compile(r"^(\s*)(#{1,6}(?=\s)|```|~~~)", re.MULTILINE)


for _library in ("pypdf", "trafilatura", "htmldate", "courlan"):
    # Their warnings about a damaged file repeat, less clearly, the reason a skipped file
    # is reported with; a file they recover from needs no warning either.
    logging.getLogger(_library).setLevel(logging.ERROR)


@dataclass(frozen=True)
class Extracted:
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


def is_binary(head: bytes) -> bool:
    """Text files hold no NUL byte; images, archives and executables almost always do
    within their first few kilobytes."""
    return b"\x00" in head[:SNIFF_BYTES]


def read_bytes(path: Path) -> bytes:
    """The file's bytes, or ExtractionError("binary") when they hold a NUL byte."""
    data = path.read_bytes()
    if is_binary(data):
        raise ExtractionError("binary", "NUL bytes in its content")
    return data


def read_text(path: Path) -> str:
    """UTF-8 text (a BOM is dropped); a binary file or another encoding is an
    ExtractionError."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ExtractionError("not UTF-8", f"undecodable byte at offset {e.start}") from e


Extractor = Callable[[Path, int | None], Extracted]
"""Reads a file's text; the second argument, the most characters it may hold (None: no
limit), lets the formats whose text can be far larger than the file (Office files,
PDF) stop reading once past it (`too_long`). The caller checks the others' length."""


def extractor(suffix: str) -> Extractor | None:
    """The extractor of a file suffix (lower case, with its dot); None if unknown."""
    table: dict[tuple[str, ...], Extractor] = {
        MARKDOWN: markdown_file,
        TEXT: text_file,
        HTML: html_file,
        PDF: pdf_file,
        DOCX: docx_file,
        PPTX: pptx_file,
        IMAGES: image_file,
    }
    for suffixes, function in table.items():
        if suffix in suffixes:
            return function
    return None


def text_file(path: Path, max_chars: int | None = None) -> Extracted:
    return Extracted("", read_text(path))


def markdown_file(path: Path, max_chars: int | None = None) -> Extracted:
    content = strip_comments(read_text(path))
    return Extracted(markdown_title(content), content)


def markdown_title(content: str) -> str:
    for line in content.splitlines():
        if line.startswith("# "):
            return line[2:].strip().rstrip("#").strip()
    return ""


def strip_comments(markdown: str) -> str:
    """Markdown without `<!-- ... -->` comments, except inside fenced code, where a
    comment is an example the reader should see."""
    parts: list[str] = []
    prose: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            if not fenced:
                parts.append(_COMMENT.sub("", "".join(prose)))
                prose = []
            fenced = not fenced
            parts.append(line)
        elif fenced:
            parts.append(line)
        else:
            prose.append(line)
    parts.append(_COMMENT.sub("", "".join(prose)))
    return "".join(parts)


def html_file(path: Path, max_chars: int | None = None) -> Extracted:
    """Bytes, not text: the page's own <meta charset> says how to decode it."""
    return html_to_markdown(read_bytes(path))


_KEPT = {
    "include_comments": False,
    "include_tables": True,
    "include_images": False,
    "include_links": False,
    "include_formatting": True,
    "favor_recall": True,
    "deduplicate": False,
}
"""What trafilatura keeps of a page: tables and formatting (headings as `#` lines), not
comments, images or links; recall before precision, and no passage dropped as a repeat."""


def html_to_markdown(html: str | bytes) -> Extracted:
    """The main content of a page as Markdown: navigation, header, footer, scripts and
    comments are left out, headings become `#` lines so chunks keep their section.

    The title is the main content's first `# ` heading: the page's metadata title can
    come from a menu or a dialog (mdBook's "Keyboard shortcuts"), the heading cannot."""
    trafilatura = import_extra("trafilatura", DOCUMENTS_EXTRA)
    redirect = _refresh_target(html)
    if redirect is not None:
        raise ExtractionError("redirect page", f"to {redirect}")
    try:
        found = trafilatura.bare_extraction(html, **_KEPT, config=_trafilatura_config())
    except Exception as e:  # lxml and trafilatura raise many kinds on odd markup
        raise ExtractionError("unreadable HTML", f"{type(e).__name__}: {e}") from e
    body = getattr(found, "body", None)
    content = plain_markdown(body) if body is not None else ""
    if not content.strip():
        raise ExtractionError("no main content", "no text outside navigation and boilerplate")
    content = _ANCHOR_MARKS.sub(r"\1\2", content.strip())
    title = markdown_title(content)
    if not title:
        metadata = trafilatura.extract_metadata(html)
        title = str(metadata.title or "") if metadata is not None else ""
    return Extracted(title.strip(PERMALINK_SIGNS), content)


def plain_markdown(body: Any) -> str:
    r"""trafilatura's tree of the main content as plain text with Markdown's structure
    only: headings as `#` lines, list items as `- `, tables as Markdown tables. Its own
    Markdown output escapes every `_` and `*` (`HERON\_MAX\_MB`) and marks emphasis,
    which a passage shown or quoted would carry."""
    blocks: list[str] = []
    for element in body:
        tag = element.tag
        if tag == "head":
            level = str(element.get("rend", "h2")).lstrip("h")
            marks = "#" * min(int(level), 6) if level.isdigit() else "##"
            blocks.append(f"{marks} {_one_line(_inline(element))}")
        elif tag == "list":
            blocks.append("\n".join(f"- {_one_line(_inline(item))}" for item in element))
        elif tag == "table":
            rows = [[_one_line(_inline(cell)) for cell in row] for row in element.iter("row")]
            blocks.append(markdown_table(rows))
        else:
            text = "\n".join(_one_line(line) for line in _inline(element).split("\n"))
            blocks.append(literal(text.strip()))
    return "\n\n".join(block for block in blocks if block.strip())


def _inline(element: Any) -> str:
    """An element's text, its descendants' included, with a line break where it has one."""
    parts = [element.text or ""]
    for child in element:
        parts.append("\n" if child.tag == "lb" else _inline(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def markdown_table(rows: list[list[str]]) -> str:
    """Rows of cell texts as a Markdown table, the first row its header (Word and
    PowerPoint tables, like most, head their columns in the first row)."""
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)

    def line(cells: list[str]) -> str:
        cells = [cell.replace("|", "\\|") for cell in cells] + [""] * (width - len(cells))
        return "| " + " | ".join(cells) + " |"

    separator = "|" + "|".join(["---"] * width) + "|"
    return "\n".join([line(rows[0]), separator, *(line(row) for row in rows[1:])])


def _refresh_target(html: str | bytes) -> str | None:
    """Where a `<meta http-equiv="refresh">` page sends the reader, if it is one: such a
    stub says only "Redirecting..." and its target is indexed on its own."""
    from lxml import html as lxml_html

    try:
        tree = lxml_html.document_fromstring(html)
    except Exception:  # lxml rejects empty or odd documents; trafilatura decides then
        return None
    for meta in tree.iter("meta"):
        if str(meta.get("http-equiv", "")).lower() == "refresh":
            content = str(meta.get("content", ""))
            return content.partition("=")[2].strip() or content
    return None


@cache
def _trafilatura_config() -> Any:
    """trafilatura's defaults are tuned for news articles: below 250 characters of main
    text it falls back to a whole-page extraction that keeps menus and drops headings.
    A documentation page is often that short, so any main text found is kept."""
    from trafilatura.settings import use_config

    config = use_config()
    config.set("DEFAULT", "MIN_EXTRACTED_SIZE", "1")
    return config


def literal(text: str) -> str:
    """Plain text that the Markdown chunker reads as it is: a line of a PDF or a Word
    paragraph that starts with "# " or a code fence is not a heading or code."""
    return _MARKUP_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text)


def pdf_file(path: Path, max_chars: int | None = None) -> Extracted:
    """One document per PDF, each page under a `## Page N` heading: a passage's section
    then says which page to open, and the chunker never joins text of two pages. A page
    without a text layer (a scan) is read by OCR when it is on."""
    pypdf = import_extra("pypdf", DOCUMENTS_EXTRA)
    budget = Budget(max_chars)
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            raise ExtractionError("encrypted PDF")
        pages = []
        for page in reader.pages:
            pages.append(literal(page.extract_text() or "").strip())
            budget.spend(len(pages[-1]) + 2)
        info = reader.metadata
    except ExtractionError:
        raise
    except Exception as e:  # pypdf raises many kinds on a damaged file
        raise ExtractionError("unreadable PDF", f"{type(e).__name__}: {e}") from e
    metadata: dict[str, Any] = {"pages": len(pages)}
    scanned = [n for n, text in enumerate(pages) if not text]
    if scanned and ocr.state()[0]:
        for n in scanned:
            pages[n] = literal(ocr.scanned_page(reader.pages[n]))
        metadata["ocr_pages"] = len(scanned)
    elif scanned and any(pages):
        metadata["pages_without_text"] = len(scanned)  # OCR is off: the text pages are kept
    if not any(pages):
        if not ocr.state()[0] and any(ocr.has_images(reader.pages[n]) for n in scanned):
            ocr.require()  # "OCR off", saying why
        raise ExtractionError("no text", "no page holds text, nor words OCR could read")
    body = "\n\n".join(f"## Page {n}\n\n{text}" for n, text in enumerate(pages, 1) if text)
    title = str(info.title or "").strip() if info is not None else ""
    return Extracted(title, body, metadata)


def image_file(path: Path, max_chars: int | None = None) -> Extracted:
    """An image's words by OCR, a page of a multi-page TIFF under `## Page N` (the
    caller holds the text to `max_chars`: OCR makes a few thousand per page)."""
    pages = [literal(text) for text in ocr.image_pages(path)]
    if not any(pages):
        raise ExtractionError("no text", "OCR found no words in the image")
    if len(pages) == 1:
        return Extracted("", pages[0], {"ocr_pages": 1})
    body = "\n\n".join(f"## Page {n}\n\n{text}" for n, text in enumerate(pages, 1) if text)
    return Extracted("", body, {"ocr_pages": len(pages)})


def check_zip(path: Path, kind: str) -> None:
    """An Office file is a zip archive that python-docx and python-pptx unpack in memory:
    one that would expand past MAX_UNZIPPED_BYTES (a zip bomb) is refused unread."""
    try:
        with zipfile.ZipFile(path) as archive:
            expanded = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError) as e:
        raise ExtractionError(f"unreadable {kind}", f"not a zip archive ({e})") from e
    except NotImplementedError as e:  # a zip version or compression Python does not read
        raise ExtractionError(f"unreadable {kind}", f"an unsupported zip archive ({e})") from e
    if expanded > MAX_UNZIPPED_BYTES:
        raise ExtractionError(
            "zip bomb",
            f"its parts expand to {expanded // 2**20} MiB, more than "
            f"{MAX_UNZIPPED_BYTES // 2**20} MiB",
        )


UNREADABLE_OFFICE = (
    KeyError,
    ValueError,
    EOFError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    zipfile.BadZipFile,
    ElementTree.ParseError,
)
"""What reading an Office file's parts raises when the file is damaged: a part missing
(KeyError), a bad CRC (BadZipFile), compressed data cut or corrupted (EOFError,
zlib.error), a compression method Python does not read (NotImplementedError), an
encrypted part (zipfile's RuntimeError), XML that does not parse."""


def docx_file(path: Path, max_chars: int | None = None) -> Extracted:
    """Word's heading styles become Markdown headings, list styles list items, and
    tables Markdown tables, in the order they appear."""
    check_zip(path, "DOCX")
    budget = Budget(max_chars)
    try:
        with office.opened(path) as package:
            title = package.title()
            blocks = [text for b in office.docx_blocks(package) if (text := _docx_block(b, budget))]
    except UNREADABLE_OFFICE as e:
        raise ExtractionError("unreadable DOCX", f"{type(e).__name__}: {e}") from e
    title_blocks = [text[2:] for text in blocks if text.startswith("# ")]
    if not title and title_blocks:
        title = title_blocks[0]
    return Extracted(title.strip(), "\n\n".join(blocks))


def _docx_block(block: office.Paragraph | office.Table, budget: Budget) -> str:
    if isinstance(block, office.Table):
        return _table(block, budget)
    text = block.text.strip()
    budget.spend(len(text) + 2)
    return _docx_paragraph(text, block.style) if text else ""


def _table(table: office.Table, budget: Budget) -> str:
    """The table in Markdown, its size counted before it is written out."""
    rows = [[_one_line(cell) for cell in row] for row in table.rows]
    width = max((len(row) for row in rows), default=0)
    budget.spend(sum(3 * width + 2 + sum(map(len, row)) for row in rows))
    return markdown_table(rows)


def _docx_paragraph(text: str, style: str) -> str:
    text = literal(text)
    if style == "title":
        return f"# {text}"
    if style.startswith("heading "):
        level = style.removeprefix("heading ").strip()
        if level.isdigit():
            return f"{'#' * min(int(level) + 1, 6)} {text}"
    if style.startswith("list"):
        return f"- {text}"
    return text


def pptx_file(path: Path, max_chars: int | None = None) -> Extracted:
    """Each slide under a `## Slide N: title` heading with its text, its tables and its
    speaker notes, so a passage cites its slide."""
    check_zip(path, "PPTX")
    budget = Budget(max_chars)
    title, first, slides = "", "", []
    try:
        with office.opened(path) as package:
            title = package.title()
            for number, slide in enumerate(office.slides(package), 1):
                first = first or (slide.title if number == 1 else "")
                slides.append(_pptx_slide(number, slide, budget))
    except UNREADABLE_OFFICE as e:
        raise ExtractionError("unreadable PPTX", f"{type(e).__name__}: {e}") from e
    return Extracted((title or first).strip(), "\n\n".join(slides), {"slides": len(slides)})


def _pptx_slide(number: int, slide: office.Slide, budget: Budget) -> str:
    lines = [f"## Slide {number}: {slide.title}" if slide.title else f"## Slide {number}"]
    budget.spend(len(lines[0]) + len(slide.notes) + 2)
    for block in slide.blocks:
        if isinstance(block, office.Table):
            lines.append(_table(block, budget))
        elif text := block.text.strip():
            budget.spend(len(text) + 2)
            lines.append(literal(text))
    if slide.notes:
        lines.append(f"Notes: {slide.notes}")
    return "\n\n".join(lines)


MAX_FILE_CHARS_SETTING = "KNOWLEDGE_MAX_FILE_CHARS"


def too_long(max_chars: int) -> ExtractionError:
    """The error of a file whose text would be longer than `max_chars`."""
    return ExtractionError(
        "too long",
        f"its text is longer than {max_chars:,} characters ({MAX_FILE_CHARS_SETTING})",
    )


class Budget:
    """The characters a file's text may still take, counted as it is read (each
    paragraph, empty or not, with the line break that ends it): a file whose text would
    pass `max_chars` stops being read there. None: no limit."""

    def __init__(self, max_chars: int | None) -> None:
        self.max_chars = max_chars
        self.left = max_chars

    def spend(self, chars: int) -> None:
        if self.left is None or self.max_chars is None:
            return
        self.left -= chars
        if self.left < 0:
            raise too_long(self.max_chars)
