"""Atlassian's rich text as the Markdown the chunker splits: Jira Cloud's Atlassian
Document Format (JSON), Jira Server's wiki markup, and Confluence's storage format
(XHTML). Lists stay lists (`- `, `1. `), code stays fenced, tables become Markdown
tables and headings `#` lines; emphasis and colours are dropped, links keep their text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from knowledge_api.ingest.extract import markdown_table

# -- Atlassian Document Format (Jira Cloud, REST API 3) --------------------------------


def adf_text(node: Any) -> str:
    """A document of Atlassian Document Format as Markdown; a plain string (what API 2
    and some custom fields answer) as it is."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node.strip()
    if not isinstance(node, dict):
        return ""
    return _blocks(node.get("content") or [], "").strip()


def _blocks(nodes: Iterable[Any], indent: str) -> str:
    parts = [_block(node, indent) for node in nodes if isinstance(node, dict)]
    return "\n\n".join(part for part in parts if part.strip())


def _block(node: dict[str, Any], indent: str) -> str:
    kind = node.get("type")
    content = node.get("content") or []
    attrs = node.get("attrs") or {}
    if kind == "paragraph":
        return indent + _inlines(content).strip().replace("\n", "\n" + indent)
    if kind == "heading":
        level = min(max(int(attrs.get("level") or 1), 1), 6)
        return "#" * level + " " + " ".join(_inlines(content).split())
    if kind in ("bulletList", "orderedList", "taskList", "decisionList"):
        return _list(node, indent)
    if kind == "codeBlock":
        code = "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return f"{indent}```{attrs.get('language') or ''}\n{code}\n{indent}```"
    if kind == "blockquote":
        inner = _blocks(content, "")
        return "\n".join(f"{indent}> {line}".rstrip() for line in inner.splitlines())
    if kind == "rule":
        return indent + "---"
    if kind == "table":
        rows = [
            [" ".join(_blocks(cell.get("content") or [], "").split()) for cell in row["content"]]
            for row in content
            if isinstance(row, dict) and isinstance(row.get("content"), list)
        ]
        return markdown_table(rows)
    if kind in ("expand", "nestedExpand"):
        title = str(attrs.get("title") or "").strip()
        inner = _blocks(content, indent)
        return f"{indent}{title}\n\n{inner}" if title else inner
    if kind in ("mediaSingle", "mediaGroup", "media"):
        return ""
    if "text" in node or kind in _INLINE:
        return indent + _inlines([node])
    return _blocks(content, indent)  # panels, layouts and what comes next


def _list(node: dict[str, Any], indent: str) -> str:
    kind = node.get("type")
    start = int((node.get("attrs") or {}).get("order") or 1)
    lines: list[str] = []
    for number, item in enumerate(
        (i for i in node.get("content") or [] if isinstance(i, dict)), start
    ):
        if kind == "orderedList":
            mark = f"{number}. "
        elif item.get("type") == "taskItem":
            done = (item.get("attrs") or {}).get("state") == "DONE"
            mark = "- [x] " if done else "- [ ] "
        else:
            mark = "- "
        children = item.get("content") or []
        inline = [c for c in children if isinstance(c, dict) and c.get("type") in _INLINE]
        blocks = [c for c in children if isinstance(c, dict) and c.get("type") not in _INLINE]
        first = _inlines(inline).strip() if inline else ""
        rest: list[str] = []
        for child in blocks:
            if child.get("type") in ("bulletList", "orderedList", "taskList") or first:
                rest.append(_block(child, indent + "  "))
            else:
                first = _block(child, "").strip()
        text = first.replace("\n", "\n" + indent + "  ")
        lines.append(f"{indent}{mark}{text}".rstrip())
        lines.extend(part for part in rest if part.strip())
    return "\n".join(lines)


_INLINE = {"text", "hardBreak", "mention", "emoji", "inlineCard", "status", "date", "placeholder"}


def _inlines(nodes: Iterable[Any]) -> str:
    parts: list[str] = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        attrs = node.get("attrs") or {}
        if kind == "text":
            text = str(node.get("text", ""))
            marks = {m.get("type"): m.get("attrs") or {} for m in node.get("marks") or []}
            if "code" in marks:
                text = f"`{text}`"
            href = marks.get("link", {}).get("href")
            if href and href != text:
                text = f"{text} ({href})"
            parts.append(text)
        elif kind == "hardBreak":
            parts.append("\n")
        elif kind == "mention":
            parts.append(str(attrs.get("text") or "@someone"))
        elif kind == "emoji":
            parts.append(str(attrs.get("text") or attrs.get("shortName") or ""))
        elif kind == "inlineCard":
            parts.append(str(attrs.get("url") or ""))
        elif kind in ("status", "placeholder"):
            parts.append(str(attrs.get("text") or ""))
        elif kind == "date":
            parts.append(str(attrs.get("timestamp") or ""))
        else:
            parts.append(_inlines(node.get("content") or []))
    return "".join(parts)


# -- Jira wiki markup (Jira Server and Data Center, REST API 2) ----------------------

_WIKI_HEADING = re.compile(r"^h([1-6])\.\s+(.*)$")
_WIKI_ITEM = re.compile(r"^([*#-]+)\s+(.*)$")
_WIKI_BLOCK = re.compile(r"^\{(code|noformat)(?::([^}]*))?\}(.*)$")
_WIKI_QUOTE = re.compile(r"^bq\.\s+(.*)$")
_WIKI_LINK = re.compile(r"\[([^|\]]+)\|([^\]]+)\]")
_WIKI_BARE_LINK = re.compile(r"\[((?:https?|mailto):[^\]]+)\]")
_WIKI_USER = re.compile(r"\[~(?:accountid:)?([^\]]+)\]")
_WIKI_MONO = re.compile(r"\{\{(.+?)\}\}")
_WIKI_EMPHASIS = re.compile(r"(?<![\w*])([*_+\-^~?]{1,2})(\S(?:.*?\S)?)\1(?![\w*])")
_WIKI_COLOR = re.compile(r"\{color(?::[^}]*)?\}")
_WIKI_IMAGE = re.compile(r"!([^!\s|]+)(?:\|[^!]*)?!")


def wiki_text(markup: Any) -> str:
    """Jira's wiki markup as Markdown: `h2.` headings, `*`/`#` lists, `{code}` and
    `{noformat}` blocks, `||head||` and `|cell|` tables, `bq.` and `{quote}`."""
    if not isinstance(markup, str):
        return adf_text(markup)
    out: list[str] = []
    lines = markup.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        block = _WIKI_BLOCK.match(stripped)
        if block:
            name, options, rest = block.group(1), block.group(2) or "", block.group(3)
            language = options.split("|")[0] if name == "code" and "=" not in options else ""
            body: list[str] = []
            closing = "{" + name + "}"
            if closing in rest:
                body.append(rest[: rest.index(closing)])
            else:
                if rest:
                    body.append(rest)
                i += 1
                while i < len(lines) and closing not in lines[i]:
                    body.append(lines[i])
                    i += 1
                if i < len(lines) and lines[i].split(closing)[0].strip():
                    body.append(lines[i].split(closing)[0])
            out.extend(["", f"```{language}", *body, "```", ""])
            i += 1
            continue
        if stripped.startswith("|"):
            rows: list[list[str]] = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                row = lines[i].strip().replace("||", "|").strip("|")
                rows.append([_wiki_inline(cell).strip() for cell in row.split("|")])
                i += 1
            out.extend(["", markdown_table(rows), ""])
            continue
        if stripped == "{quote}":
            i += 1
            while i < len(lines) and lines[i].strip() != "{quote}":
                out.append("> " + _wiki_inline(lines[i]).strip())
                i += 1
            i += 1
            continue
        heading = _WIKI_HEADING.match(stripped)
        item = _WIKI_ITEM.match(stripped)
        quote = _WIKI_QUOTE.match(stripped)
        if heading:
            out.extend(["", "#" * int(heading.group(1)) + " " + _wiki_inline(heading.group(2))])
            out.append("")
        elif item and stripped != "----":
            marks = item.group(1)
            bullet = "1." if marks[-1] == "#" else "-"
            out.append("  " * (len(marks) - 1) + f"{bullet} {_wiki_inline(item.group(2))}")
        elif quote:
            out.append("> " + _wiki_inline(quote.group(1)))
        elif stripped == "----":
            out.extend(["", "---", ""])
        else:
            out.append(_wiki_inline(line).rstrip())
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _wiki_inline(text: str) -> str:
    text = _WIKI_COLOR.sub("", text)
    text = _WIKI_IMAGE.sub("", text)
    text = _WIKI_USER.sub(r"@\1", text)
    text = _WIKI_LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", text)
    text = _WIKI_BARE_LINK.sub(r"\1", text)
    text = _WIKI_MONO.sub(r"`\1`", text)
    return _WIKI_EMPHASIS.sub(r"\2", text)
