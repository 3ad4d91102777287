"""Word (.docx) and PowerPoint (.pptx) files read with the standard library: both are zip
archives of XML parts (Office Open XML), and the text this service needs (paragraphs
with their style, tables, slides in order with their titles and notes) is a few
elements of them. python-docx and python-pptx read the same, but python-pptx brings
Pillow and XlsxWriter (about 30 MB installed) for images and charts never read here.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
TITLE_PLACEHOLDERS = ("title", "ctrTitle")
WORD_MARKS = {f"{W}tab": "\t", f"{W}br": "\n", f"{W}cr": "\n"}
DRAWING_MARKS = {f"{A}br": "\n"}
"""The elements of a paragraph that stand for a tab or a line break, in Word and in slides."""
_HEADING_ID = re.compile(r"^heading(\d)$", re.IGNORECASE)
MAX_COLUMNS = 64
"""Most cells a table row is read as: Word's grid has at most 63 columns, PowerPoint's
75 less often used. A cell spanning more (`<w:gridSpan w:val="10000000"/>` in a file of
a few hundred bytes) or a row of more cells is no table either program makes."""


@dataclass(frozen=True)
class Paragraph:
    text: str
    style: str
    """The style's name in lower case ("heading 1", "title", "list bullet"), or ""."""


@dataclass(frozen=True)
class Table:
    rows: list[list[str]]


@dataclass(frozen=True)
class Slide:
    title: str
    blocks: list[Paragraph | Table]
    """The text of its shapes other than the title, paragraph by paragraph, and its
    tables, in the order of the slide's shapes."""
    notes: str


class Package:
    """The parts of an Office file, read on demand."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive
        self.names = frozenset(archive.namelist())

    def xml(self, name: str) -> ElementTree.Element:
        return ElementTree.fromstring(self.archive.read(name))

    def has(self, name: str) -> bool:
        return name in self.names

    def title(self) -> str:
        if not self.has("docProps/core.xml"):
            return ""
        found = self.xml("docProps/core.xml").find(DC_TITLE)
        return (found.text or "").strip() if found is not None else ""

    def related(self, part: str) -> dict[str, tuple[str, str]]:
        """The relationships of `part`: id -> (type, the target part's name)."""
        folder, name = posixpath.split(part)
        rels = posixpath.join(folder, "_rels", f"{name}.rels")
        if not self.has(rels):
            return {}
        return {
            rel.get("Id", ""): (
                rel.get("Type", ""),
                posixpath.normpath(posixpath.join(folder, rel.get("Target", ""))),
            )
            for rel in self.xml(rels).iter(f"{RELS}Relationship")
        }


# -- Word -----------------------------------------------------------------------------------


@contextmanager
def opened(path: Path) -> Iterator[Package]:
    with zipfile.ZipFile(path) as archive:
        yield Package(archive)


def docx_blocks(package: Package) -> Iterator[Paragraph | Table]:
    """The document's body: paragraphs and tables in the order they appear, each read
    as the parser reaches its end and then dropped, so a body of millions of paragraphs
    is never held whole and its reader can stop at any of them."""
    styles = style_names(package)
    for child in body_children(package, "word/document.xml", f"{W}body"):
        if child.tag == f"{W}p":
            yield Paragraph(paragraph_text(child), paragraph_style(child, styles))
        elif child.tag == f"{W}tbl":
            yield Table([_docx_row(row) for row in child.findall(f"{W}tr")])


def body_children(package: Package, part: str, body: str) -> Iterator[ElementTree.Element]:
    """The children of the part's `body` element (the root's child), each whole."""
    depth = 0
    parent: ElementTree.Element | None = None
    with package.archive.open(part) as source:
        for event, element in ElementTree.iterparse(source, events=("start", "end")):
            if event == "start":
                depth += 1
                if depth == 2 and element.tag == body:
                    parent = element
                continue
            depth -= 1
            if depth == 2 and parent is not None:
                yield element
                parent.remove(element)
            elif depth == 1:
                parent = None


def style_names(package: Package) -> dict[str, str]:
    """Style id -> name in lower case ("Heading1" -> "heading 1")."""
    if not package.has("word/styles.xml"):
        return {}
    names = {}
    for style in package.xml("word/styles.xml").iter(f"{W}style"):
        name = style.find(f"{W}name")
        if name is not None:
            names[style.get(f"{W}styleId", "")] = name.get(f"{W}val", "").lower()
    return names


def paragraph_text(paragraph: ElementTree.Element) -> str:
    """Its runs' text (hyperlinks' too), tabs and line breaks kept; deleted text left out."""
    return runs_text(paragraph, f"{W}t", WORD_MARKS)


def runs_text(paragraph: ElementTree.Element, text: str, marks: dict[str, str]) -> str:
    """The text of its `text` elements, each of `marks`' elements as the mark it stands for."""
    return "".join(
        (element.text or "") if element.tag == text else marks.get(element.tag, "")
        for element in paragraph.iter()
    )


def paragraph_style(paragraph: ElementTree.Element, styles: dict[str, str]) -> str:
    found = paragraph.find(f"{W}pPr/{W}pStyle")
    style_id = found.get(f"{W}val", "") if found is not None else ""
    if not style_id:
        return ""
    heading = _HEADING_ID.match(style_id)
    fallback = f"heading {heading.group(1)}" if heading else style_id.lower()
    return styles.get(style_id, fallback)


def _docx_row(row: ElementTree.Element) -> list[str]:
    """A row's cells; a cell spanning several columns counts for each, as in Word's grid
    (up to MAX_COLUMNS)."""
    cells: list[str] = []
    for cell in row.findall(f"{W}tc"):
        text = "\n".join(paragraph_text(p) for p in cell.iter(f"{W}p"))
        span = cell.find(f"{W}tcPr/{W}gridSpan")
        columns = int(span.get(f"{W}val", "1")) if span is not None else 1
        cells += [text] * max(1, min(columns, MAX_COLUMNS - len(cells)))
    return clamped(cells)


def clamped(cells: list[str]) -> list[str]:
    """A row of at most MAX_COLUMNS cells: the text of any further cells joins the last."""
    if len(cells) <= MAX_COLUMNS:
        return cells
    return [*cells[: MAX_COLUMNS - 1], " ".join(cells[MAX_COLUMNS - 1 :])]


# -- PowerPoint -------------------------------------------------------------------------------


def slides(package: Package) -> Iterator[Slide]:
    """The presentation's slides, in order, each read when its reader reaches it. A
    slide listed again (a file may list one part 100,000 times; PowerPoint never lists
    one twice) is read once, where it first comes."""
    presentation = "ppt/presentation.xml"
    related = package.related(presentation)
    seen = set()
    for slide_id in package.xml(presentation).iter(f"{P}sldId"):
        _, part = related[slide_id.get(f"{R}id", "")]
        if part not in seen:
            seen.add(part)
            yield read_slide(package, part)


def read_slide(package: Package, part: str) -> Slide:
    tree = package.xml(part).find(f"{P}cSld/{P}spTree")
    title = ""
    blocks: list[Paragraph | Table] = []
    for shape in tree if tree is not None else ():
        if shape.tag == f"{P}sp":
            body = shape.find(f"{P}txBody")
            if body is None:
                continue
            paragraphs = [drawing_text(p) for p in body.findall(f"{A}p")]
            if not title and placeholder(shape) in TITLE_PLACEHOLDERS:
                title = "\n".join(paragraphs).strip()
            else:
                blocks += [Paragraph(text, "") for text in paragraphs]
        elif shape.tag == f"{P}graphicFrame":
            for table in shape.iter(f"{A}tbl"):
                rows = [
                    clamped([cell_text(cell) for cell in row.findall(f"{A}tc")])
                    for row in table.findall(f"{A}tr")
                ]
                blocks.append(Table(rows))
    return Slide(title, blocks, notes_text(package, part))


def cell_text(cell: ElementTree.Element) -> str:
    return "\n".join(drawing_text(p) for p in cell.iter(f"{A}p"))


def placeholder(shape: ElementTree.Element) -> str:
    """The placeholder type of a shape ("title", "body", ...), or "" if it is none."""
    found = shape.find(f"{P}nvSpPr/{P}nvPr/{P}ph")
    if found is None:
        return ""
    return found.get("type", "obj")


def drawing_text(paragraph: ElementTree.Element) -> str:
    return runs_text(paragraph, f"{A}t", DRAWING_MARKS)


def notes_text(package: Package, slide: str) -> str:
    """The speaker notes: the text of the notes page's body placeholder."""
    for kind, part in package.related(slide).values():
        if kind.endswith("/notesSlide") and package.has(part):
            tree = package.xml(part).find(f"{P}cSld/{P}spTree")
            for shape in tree.iter(f"{P}sp") if tree is not None else ():
                body = shape.find(f"{P}txBody")
                if placeholder(shape) == "body" and body is not None:
                    return "\n".join(drawing_text(p) for p in body.findall(f"{A}p")).strip()
    return ""
