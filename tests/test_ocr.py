"""Images and scanned PDF pages read by OCR (tesseract), and what happens without it.
The images are rendered here from known text, and the words must come back."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.cli import main
from knowledge_api.ingest import ocr
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from tests.cli_env import cli_home
from tests.documents import pdf_bytes

Image = pytest.importorskip("PIL.Image", reason="pip install 'knowledge-api[ocr]'")
pytest.importorskip("pytesseract", reason="pip install 'knowledge-api[ocr]'")
needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="OCR needs the tesseract program: apt-get install tesseract-ocr",
)
WORDS = ["Invoice 4711", "Renewal due in October"]


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    ocr.state.cache_clear()
    yield
    ocr.state.cache_clear()


def scan(lines: list[str]) -> object:
    """A page as a scanner gives it: black text on white, no text layer."""
    from PIL import ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    image = Image.new("RGB", (900, 80 + 70 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(lines):
        draw.text((40, 40 + 70 * n), line, fill="black", font=font)
    return image


@needs_tesseract
def test_the_words_of_an_image_come_back(tmp_path: Path) -> None:
    scan(WORDS).save(tmp_path / "invoice.png")  # type: ignore[attr-defined]
    scan(["Backup runs at midnight"]).save(tmp_path / "note.jpg")  # type: ignore[attr-defined]
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    docs = {doc.metadata["path"]: doc for doc in loaded}
    assert "Invoice 4711" in docs["invoice.png"].content
    assert "Renewal due in October" in docs["invoice.png"].content
    assert docs["invoice.png"].metadata["ocr_pages"] == 1
    assert "Backup runs at midnight" in docs["note.jpg"].content


@needs_tesseract
def test_a_scanned_pdf_page_is_read_by_ocr_beside_a_text_page(tmp_path: Path) -> None:
    first = scan(["Page one was scanned"])
    second = scan(["So was page two"])
    first.save(tmp_path / "scan.pdf", save_all=True, append_images=[second])  # type: ignore[attr-defined]
    (tmp_path / "text.pdf").write_bytes(pdf_bytes([["A page with its text layer."]]))
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    docs = {doc.metadata["path"]: doc for doc in loaded}
    scanned = docs["scan.pdf"]
    assert "## Page 1\n\nPage one was scanned" in scanned.content
    assert "## Page 2\n\nSo was page two" in scanned.content
    assert scanned.metadata["ocr_pages"] == 2
    assert "ocr_pages" not in docs["text.pdf"].metadata


def test_without_tesseract_images_are_skipped_and_the_summary_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    docs = tmp_path / "docs"
    docs.mkdir()
    scan(WORDS).save(docs / "invoice.png")  # type: ignore[attr-defined]
    scan(WORDS).save(docs / "scan.pdf")  # type: ignore[attr-defined]
    (docs / "a.md").write_text("# Alpha\n\nAlpha rotates the keys.")
    assert main(["ingest", "docs"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "2 files skipped: docs/invoice.png (OCR off), docs/scan.pdf (OCR off)"
    assert out[2] == "OCR is off: tesseract is not installed (apt-get install tesseract-ocr)"


def test_health_says_whether_ocr_is_on(client: TestClient) -> None:
    report = client.get("/health").json()["ingest"]
    assert report["status"] == "ok"
    if shutil.which("tesseract"):
        assert report["ocr"].startswith("on (tesseract ")
    else:
        assert report["ocr"] == "off: tesseract is not installed (apt-get install tesseract-ocr)"
