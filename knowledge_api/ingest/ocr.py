"""Text of images and scanned PDF pages by OCR: the tesseract program (Debian
`tesseract-ocr`) through pytesseract and Pillow (the `ocr` extra). Without either, OCR
is off: such a file is skipped saying so, and /health and the ingest summary say why.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path
from typing import Any

from knowledge_api.errors import ExtractionError

OCR_EXTRA = "ocr"
IMAGES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
OFF = "OCR off"


@cache
def state() -> tuple[bool, str]:
    """(on, what /health says): the tesseract version, or why OCR is off."""
    try:
        pytesseract = importlib.import_module("pytesseract")
        importlib.import_module("PIL.Image")
    except ImportError:
        return (
            False,
            f"off: pytesseract is not installed (pip install 'knowledge-api[{OCR_EXTRA}]')",
        )
    try:
        version = pytesseract.get_tesseract_version()
    except (pytesseract.TesseractNotFoundError, OSError):
        return False, "off: tesseract is not installed (apt-get install tesseract-ocr)"
    return True, f"on (tesseract {version})"


def health() -> dict[str, str]:
    """The ingestion part of /health: OCR is optional, so off is no degradation."""
    return {"status": "ok", "ocr": state()[1]}


def require() -> None:
    on, said = state()
    if not on:
        raise ExtractionError(OFF, said.removeprefix("off: "))


def image_text(image: Any) -> str:
    """The words tesseract reads in a Pillow image."""
    pytesseract = importlib.import_module("pytesseract")
    try:
        text: str = pytesseract.image_to_string(image.convert("L"))
    except (pytesseract.TesseractError, RuntimeError) as e:
        raise ExtractionError("OCR failed", str(e).strip()) from e
    lines = (line.strip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def image_pages(path: Path) -> list[str]:
    """The text of each frame of an image file (a TIFF may hold several pages)."""
    require()
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return [image_text(frame) for frame in ImageSequence.Iterator(image)]
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ExtractionError("unreadable image", f"{type(e).__name__}: {e}") from e


def scanned_page(page: Any) -> str:
    """The text of a PDF page without a text layer: its images (a scan is one) read."""
    require()
    try:
        images = list(page.images)
    except Exception as e:  # pypdf raises many kinds on an image it cannot decode
        raise ExtractionError("unreadable PDF", f"{type(e).__name__}: {e}") from e
    return "\n\n".join(text for text in (image_text(found.image) for found in images) if text)


def has_images(page: Any) -> bool:
    """Whether a PDF page holds an image (a scan OCR would read)."""
    try:
        return len(page.images) > 0
    except Exception:  # an image pypdf cannot list: none to read either
        return False
