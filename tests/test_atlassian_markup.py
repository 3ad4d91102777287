"""Atlassian's rich text as Markdown: lists, code and tables kept, emphasis dropped."""

from __future__ import annotations

from typing import Any

from knowledge_api.connectors.markup import adf_text, wiki_text


def text(value: str, *marks: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "text", "text": value}
    if marks:
        node["marks"] = list(marks)
    return node


def paragraph(*content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "paragraph", "content": list(content)}


def item(*content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "listItem", "content": list(content)}


def cell(kind: str, value: str) -> dict[str, Any]:
    return {"type": kind, "attrs": {}, "content": [paragraph(text(value))]}


def test_atlassian_document_format_keeps_headings_lists_code_and_tables() -> None:
    doc = {
        "type": "doc",
        "version": 1,
        "content": [
            {"type": "heading", "attrs": {"level": 2}, "content": [text("Rollback")]},
            paragraph(
                text("Ask "),
                {"type": "mention", "attrs": {"id": "5b10", "text": "@Grace Hopper"}},
                text(" first, see "),
                text("the runbook", {"type": "link", "attrs": {"href": "https://r.example"}}),
                text(" and run "),
                text("deploy --undo", {"type": "code"}),
                {"type": "hardBreak"},
                text("then wait.", {"type": "strong"}),
            ),
            {
                "type": "orderedList",
                "attrs": {"order": 1},
                "content": [
                    item(
                        paragraph(text("stop the workers")),
                        {
                            "type": "bulletList",
                            "content": [item(paragraph(text("eu"))), item(paragraph(text("us")))],
                        },
                    ),
                    item(paragraph(text("restore the snapshot"))),
                ],
            },
            {
                "type": "codeBlock",
                "attrs": {"language": "sql"},
                "content": [text("SELECT 1;\nSELECT 2;")],
            },
            {
                "type": "table",
                "content": [
                    {
                        "type": "tableRow",
                        "content": [cell("tableHeader", "Region"), cell("tableHeader", "Owner")],
                    },
                    {
                        "type": "tableRow",
                        "content": [cell("tableCell", "eu"), cell("tableCell", "Ada | Grace")],
                    },
                ],
            },
            {
                "type": "taskList",
                "content": [
                    {"type": "taskItem", "attrs": {"state": "DONE"}, "content": [text("page")]},
                    {"type": "taskItem", "attrs": {"state": "TODO"}, "content": [text("fix")]},
                ],
            },
            {
                "type": "panel",
                "attrs": {"panelType": "warning"},
                "content": [paragraph(text("Never on Fridays."))],
            },
            {"type": "mediaSingle", "content": [{"type": "media", "attrs": {"id": "x"}}]},
        ],
    }
    assert adf_text(doc) == (
        "## Rollback\n\n"
        "Ask @Grace Hopper first, see the runbook (https://r.example) and run `deploy --undo`\n"
        "then wait.\n\n"
        "1. stop the workers\n"
        "  - eu\n"
        "  - us\n"
        "2. restore the snapshot\n\n"
        "```sql\nSELECT 1;\nSELECT 2;\n```\n\n"
        "| Region | Owner |\n|---|---|\n| eu | Ada \\| Grace |\n\n"
        "- [x] page\n- [ ] fix\n\n"
        "Never on Fridays."
    )


def test_absent_or_plain_descriptions() -> None:
    assert adf_text(None) == "" and adf_text("  plain  ") == "plain"
    assert adf_text({"type": "doc", "content": []}) == ""
    assert wiki_text(None) == ""


def test_wiki_markup_quotes_and_unclosed_code() -> None:
    markup = (
        "bq. Said on the bridge call.\n"
        "{quote}\nline one\nline two\n{quote}\n"
        "Call [~grace] with *urgency* and -not- _panic_.\n"
        "{noformat}raw {{text}}{noformat}\n"
        "{code:java}\nint x = 1;"
    )
    assert wiki_text(markup) == (
        "> Said on the bridge call.\n"
        "> line one\n"
        "> line two\n"
        "Call @grace with urgency and not panic.\n\n"
        "```\nraw {{text}}\n```\n\n"
        "```java\nint x = 1;\n```"
    )
