from pathlib import Path

import pytest

from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest.loaders import LoadOptions, html_to_markdown, load_paths


def test_folder_of_markdown_text_and_html(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "guide.md").write_text("# The Guide\n\nHello.")
    (tmp_path / "sub" / "notes.txt").write_text("Plain notes.")
    (tmp_path / "page.html").write_text("<html><title>Page</title><body><p>Hi</p></body></html>")
    (tmp_path / "ignored.png").write_bytes(b"\x89PNG")
    options = LoadOptions(metadata={"team": "qa"}, base_url="https://docs.example.com/")
    docs = {d.metadata["path"]: d for d in load_paths([tmp_path], options)}
    assert sorted(docs) == ["guide.md", "page.html", "sub/notes.txt"]
    guide = docs["guide.md"]
    assert guide.title == "The Guide" and guide.source_type == "wiki"
    assert guide.source_id == "https://docs.example.com/guide.md"
    assert guide.metadata == {
        "path": "guide.md",
        "format": "md",
        "team": "qa",
        "url": "https://docs.example.com/guide.md",
    }
    assert docs["sub/notes.txt"].title == "notes"
    assert docs["page.html"].title == "Page"


def test_html_keeps_headings_and_drops_scripts() -> None:
    title, text = html_to_markdown(
        "<h1>Main</h1><script>var x=1</script><p>One &amp; two</p>"
        "<nav>menu</nav><h2>Part</h2><ul><li>a</li><li>b</li></ul>"
    )
    assert title == "Main"
    assert text == "# Main\n\nOne & two\n\n## Part\n\na\n\nb"


def test_jsonl_corpus_records(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"_id": "d1", "title": "T", "text": "Body", "metadata": {"k": 1}}\n\n'
        '{"_id": 2, "text": "Other"}\n'
    )
    docs = list(load_paths([corpus], LoadOptions()))
    assert [(d.source_id, d.title, d.source_type) for d in docs] == [
        ("d1", "T", "knowledge"),
        ("2", "", "knowledge"),
    ]
    assert docs[0].metadata == {"k": 1}


def test_a_bad_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "ok"}\n{"title": "no id"}\n')
    with pytest.raises(InvalidRequest, match=r"corpus\.jsonl:2"):
        list(load_paths([corpus], LoadOptions()))


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="no such file"):
        list(load_paths([tmp_path / "nope"], LoadOptions()))
