"""Office files that break the limits of the readers, each a few kilobytes, written part
by part as no Office suite would: for the tests of every door that reads files
(`load_paths`, uploads)."""

from __future__ import annotations

import zipfile
from pathlib import Path

WORD_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
SLIDE_NS = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)
RELS_NS = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
SLIDE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide"


def bare_docx(path: Path, body: str) -> Path:
    """A Word file of one part, the body given as XML: what a hostile one needs."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            "word/document.xml", f"<w:document {WORD_NS}><w:body>{body}</w:body></w:document>"
        )
    return path


def spanning_docx(path: Path, span: int) -> Path:
    """One table cell that says it spans `span` columns."""
    cell = (
        f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>'
        "<w:p><w:r><w:t>spanned</w:t></w:r></w:p></w:tc>"
    )
    return bare_docx(path, f"<w:tbl><w:tr>{cell}</w:tr></w:tbl>")


def repeated_slide_pptx(path: Path, times: int) -> Path:
    """A presentation listing its one slide `times` times."""
    ids = "".join(f'<p:sldId id="{256 + n}" r:id="rId1"/>' for n in range(times))
    slide = (
        f"<p:sld {SLIDE_NS}><p:cSld><p:spTree><p:sp><p:nvSpPr><p:cNvPr id='1' name='t'/>"
        '<p:cNvSpPr/><p:nvPr><p:ph type="title"/></p:nvPr></p:nvSpPr>'
        "<p:txBody><a:p><a:r><a:t>Only slide</a:t></a:r></a:p></p:txBody></p:sp>"
        "</p:spTree></p:cSld></p:sld>"
    )
    rels = (
        f'<Relationships {RELS_NS}><Relationship Id="rId1" Type="{SLIDE_REL}" '
        'Target="slides/slide1.xml"/></Relationships>'
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        presentation = f"<p:presentation {SLIDE_NS}><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>"
        archive.writestr("ppt/presentation.xml", presentation)
        archive.writestr("ppt/_rels/presentation.xml.rels", rels)
        archive.writestr("ppt/slides/slide1.xml", slide)
    return path
