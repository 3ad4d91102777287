from knowledge_api.ingest.chunker import LIST_CHARS, MAX_CHARS, chunk_document, sections
from knowledge_api.models import Document

GUIDE = """# Guide

Intro paragraph.

## Install

General install notes.

### Linux

Run the installer.

```bash
# not a heading
make install
```

### macOS

Use the package.

## Usage
"""


def test_sections_keep_the_heading_path_without_repeating_the_title() -> None:
    found = [(s.path, s.blocks) for s in sections(GUIDE, "Guide")]
    assert [path for path, _ in found] == [
        (),
        ("Install",),
        ("Install", "Linux"),
        ("Install", "macOS"),
    ]
    assert found[2][1][1].startswith("```bash\n# not a heading")


def test_chunks_carry_title_section_and_index() -> None:
    doc = Document("wiki", "guide.md", GUIDE, "Guide")
    chunks = chunk_document(doc)
    assert [c.section for c in chunks] == ["", "Install", "Install > Linux", "Install > macOS"]
    assert [c.chunk_index for c in chunks] == [0, 1, 2, 3]
    assert all(c.chunk_count == 4 and c.title == "Guide" for c in chunks)
    assert chunks[2].embedded_text.startswith("Guide > Install > Linux\nRun the installer.")
    assert [c.id for c in chunk_document(doc)] == [c.id for c in chunks]


def test_long_sections_split_under_the_limit_without_losing_words() -> None:
    paragraph = " ".join(f"Sentence number {i} is here." for i in range(200))
    doc = Document("wiki", "long.md", f"# Long\n\n{paragraph}\n\nShort tail.", "Long")
    chunks = chunk_document(doc, max_chars=300)
    assert len(chunks) > 5
    assert all(len(c.content) <= 300 for c in chunks)
    joined = " ".join(c.content for c in chunks).split()
    assert joined == (paragraph + " Short tail.").split()


def test_a_word_longer_than_the_limit_is_kept_whole() -> None:
    doc = Document("wiki", "x", "a" * 50 + " b", "X")
    assert [c.content for c in chunk_document(doc, max_chars=20)] == ["a" * 50, "b"]


def test_plain_text_has_no_headings() -> None:
    doc = Document("wiki", "notes.txt", "# not a heading\n\nbody", "notes")
    assert [c.section for c in chunk_document(doc, markdown=False)] == [""]
    assert chunk_document(doc, markdown=False)[0].content.startswith("# not a heading")


def test_empty_document_has_no_chunks() -> None:
    assert chunk_document(Document("wiki", "e", "  \n\n", "E")) == []


def test_a_long_list_splits_between_items_and_keeps_its_line_breaks() -> None:
    items = [f"- `SETTING_{i}` (default `{i}`): what it does.\n  More on {i}." for i in range(30)]
    doc = Document("wiki", "list.md", "# List\n\n" + "\n".join(items), "List")
    chunks = chunk_document(doc, max_chars=300)
    assert len(chunks) > 3 and all(len(c.content) <= 300 for c in chunks)
    assert all(c.content.startswith("- `SETTING_") for c in chunks)
    assert "\n".join(c.content for c in chunks) == "\n".join(items)


def test_a_long_code_block_splits_between_lines() -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(60)) + "\n```"
    chunks = chunk_document(Document("wiki", "c.md", code, "C"), max_chars=200)
    assert len(chunks) > 3 and all(len(c.content) <= 200 for c in chunks)
    assert "\n".join(c.content for c in chunks) == code


def test_a_list_item_longer_than_the_limit_splits_at_sentences() -> None:
    item = "- " + " ".join(f"Step {i} is done." for i in range(40))
    chunks = chunk_document(Document("wiki", "i.md", f"{item}\n- short", "I"), max_chars=120)
    assert all(len(c.content) <= 120 for c in chunks)
    assert " ".join(c.content for c in chunks).split() == f"{item}\n- short".split()


SETTINGS = [f"- `SETTING_{i}` (default `{i}`): what setting number {i} does." for i in range(24)]
PROSE = [f"Paragraph {i} says one thing about the topic, at some length." for i in range(24)]


def test_a_list_packs_to_fewer_characters_than_prose() -> None:
    listed = chunk_document(Document("wiki", "l.md", "\n".join(SETTINGS), "L"))
    assert all(len(c.content) <= LIST_CHARS for c in listed)
    assert "\n".join(c.content for c in listed) == "\n".join(SETTINGS)
    prose = chunk_document(Document("wiki", "p.md", "\n\n".join(PROSE), "P"))
    assert max(len(c.content) for c in prose) > LIST_CHARS
    assert all(len(c.content) <= MAX_CHARS for c in prose)


def test_a_paragraph_joined_to_a_list_keeps_to_the_list_budget() -> None:
    content = PROSE[0] + "\n\n" + "\n".join(SETTINGS[:10]) + "\n\n" + PROSE[1]
    chunks = chunk_document(Document("wiki", "m.md", content, "M"))
    assert chunks[0].content.startswith(PROSE[0] + "\n\n- `SETTING_0`")
    assert all(len(c.content) <= LIST_CHARS for c in chunks)
    assert " ".join(c.content for c in chunks).split() == content.split()


def test_a_table_and_code_keep_the_whole_budget() -> None:
    rows = "| name | value |\n|---|---|\n" + "\n".join(f"| row {i} | {i * 7} |" for i in range(40))
    code = "```text\n" + "\n".join(f"- line {i} of the listing" for i in range(30)) + "\n```"
    for content in (rows, code):
        chunks = chunk_document(Document("wiki", "t.md", content, "T"))
        assert max(len(c.content) for c in chunks) > LIST_CHARS
