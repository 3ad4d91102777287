"""Atlassian's rich text as the Markdown the chunker splits: Jira Cloud's Atlassian
Document Format (JSON), Jira Server's wiki markup, and Confluence's storage format
(XHTML). Lists stay lists (`- `, `1. `), code stays fenced, tables become Markdown
tables and headings `#` lines; emphasis and colours are dropped, links keep their text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
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


# -- Confluence storage format (XHTML with ac: and ri: elements) ----------------------


@dataclass
class Element:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Element | str] = field(default_factory=list)


_VOID = {"br", "hr", "img", "col", "input", "meta", "link", "wbr"}


class _Tree(HTMLParser):
    """Storage XHTML as a tree of elements; CDATA (a code macro's body) as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("root")
        self.open: list[Element] = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.open[-1].children.append(element)
        if tag not in _VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {n: v or "" for n, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)

    def unknown_decl(self, data: str) -> None:
        if data.startswith("CDATA["):
            self.open[-1].children.append(data[6:])


def storage_text(xhtml: str, shift: int = 0) -> str:
    """A Confluence page's storage format as Markdown, its headings `shift` levels
    deeper (under the headings of the page's ancestors), at most level 6."""
    tree = _Tree()
    tree.feed(xhtml or "")
    tree.close()
    text = _xblocks(tree.root.children, shift, "")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_BLOCK_TAGS = {
    "p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "table", "pre",
    "blockquote", "hr", "ac:structured-macro", "ac:task-list", "section", "ac:layout",
    "ac:layout-section", "ac:layout-cell", "tbody", "thead",
}  # fmt: skip


def _xblocks(nodes: list[Element | str], shift: int, indent: str) -> str:
    parts: list[str] = []
    run: list[Element | str] = []

    def flush() -> None:
        text = " ".join(_xinline(run).split(" ")).strip()
        if text:
            parts.append(indent + text.replace("\n", "\n" + indent))
        run.clear()

    for node in nodes:
        if isinstance(node, Element) and node.tag in _BLOCK_TAGS:
            flush()
            parts.append(_xblock(node, shift, indent))
        else:
            run.append(node)
    flush()
    return "\n\n".join(part for part in parts if part.strip())


def _xblock(node: Element, shift: int, indent: str) -> str:
    tag = node.tag
    if len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
        level = min(int(tag[1]) + shift, 6)
        return "#" * level + " " + " ".join(_xinline(node.children).split())
    if tag in ("ul", "ol"):
        return _xlist(node, shift, indent)
    if tag == "table":
        rows = [
            [" ".join(_xblocks(cell.children, shift, "").split()) for cell in _cells(row)]
            for row in _rows(node)
        ]
        return markdown_table(rows)
    if tag == "pre":
        return f"{indent}```\n{_plain(node)}\n{indent}```"
    if tag == "blockquote":
        inner = _xblocks(node.children, shift, "")
        return "\n".join(f"{indent}> {line}".rstrip() for line in inner.splitlines())
    if tag == "hr":
        return indent + "---"
    if tag == "ac:task-list":
        lines = []
        for task in _children(node, "ac:task"):
            status = next(iter(_children(task, "ac:task-status")), None)
            body = next(iter(_children(task, "ac:task-body")), None)
            done = status is not None and _plain(status).strip() == "complete"
            text = " ".join(_xinline(body.children).split()) if body else ""
            lines.append(f"{indent}- [{'x' if done else ' '}] {text}")
        return "\n".join(lines)
    if tag == "ac:structured-macro":
        name = node.attrs.get("ac:name", "")
        if name in ("code", "noformat"):
            language = next(
                (_plain(p) for p in _children(node, "ac:parameter")
                 if p.attrs.get("ac:name") == "language"),
                "",
            )  # fmt: skip
            body = next(iter(_children(node, "ac:plain-text-body")), None)
            code = _plain(body).strip("\n") if body else ""
            return f"{indent}```{language}\n{code}\n{indent}```"
        bodies = _children(node, "ac:rich-text-body")
        title = next(
            (
                _plain(p)
                for p in _children(node, "ac:parameter")
                if p.attrs.get("ac:name") == "title"
            ),
            "",
        )
        inner = "\n\n".join(_xblocks(b.children, shift, indent) for b in bodies)
        return f"{indent}{title}\n\n{inner}" if title and inner else inner
    return _xblocks(node.children, shift, indent)


def _xlist(node: Element, shift: int, indent: str) -> str:
    lines: list[str] = []
    for number, item in enumerate(_children(node, "li"), 1):
        mark = f"{number}. " if node.tag == "ol" else "- "
        inline = [c for c in item.children if not (isinstance(c, Element) and c.tag in _BLOCK_TAGS)]
        nested = [c for c in item.children if isinstance(c, Element) and c.tag in _BLOCK_TAGS]
        first = " ".join(_xinline(inline).split())
        rest = []
        for child in nested:
            if child.tag in ("ul", "ol"):
                rest.append(_xlist(child, shift, indent + "  "))
            elif not first:
                first = " ".join(_xblock(child, shift, "").split())
            else:
                rest.append(_xblock(child, shift, indent + "  "))
        lines.append(f"{indent}{mark}{first}".rstrip())
        lines.extend(part for part in rest if part.strip())
    return "\n".join(lines)


def _xinline(nodes: list[Element | str]) -> str:
    parts: list[str] = []
    for node in nodes:
        if isinstance(node, str):
            parts.append(" ".join(node.split("\n")) if node.strip() else (" " if node else ""))
            continue
        tag = node.tag
        if tag == "br":
            parts.append("\n")
        elif tag == "code":
            parts.append(f"`{_plain(node)}`")
        elif tag == "a":
            text, href = " ".join(_xinline(node.children).split()), node.attrs.get("href", "")
            parts.append(f"{text} ({href})" if href and text and href != text else text or href)
        elif tag == "ac:link":
            parts.append(_link(node))
        elif tag == "ri:user":
            parts.append(
                "@" + (node.attrs.get("ri:username") or node.attrs.get("ri:account-id", ""))
            )
        elif tag in ("ac:image", "ac:emoticon", "ac:parameter", "ac:placeholder"):
            continue
        elif tag == "ac:structured-macro":
            bodies = _children(node, "ac:rich-text-body") + _children(node, "ac:plain-text-body")
            parts.append(" ".join(_xinline(b.children) for b in bodies))
        else:
            parts.append(_xinline(node.children))
    return "".join(parts)


def _link(node: Element) -> str:
    """An `ac:link`: its own text, else what it links to (a page, a user, a file)."""
    for body in node.children:
        if isinstance(body, Element) and body.tag in ("ac:plain-text-link-body", "ac:link-body"):
            return " ".join(_xinline(body.children).split())
    for target in node.children:
        if isinstance(target, Element):
            if target.tag == "ri:user":
                return "@" + (
                    target.attrs.get("ri:username") or target.attrs.get("ri:account-id", "")
                )
            for name in ("ri:content-title", "ri:filename", "ri:value", "ri:space-key"):
                if target.attrs.get(name):
                    return target.attrs[name]
    return ""


def _children(node: Element, tag: str) -> list[Element]:
    return [c for c in node.children if isinstance(c, Element) and c.tag == tag]


def _rows(table: Element) -> list[Element]:
    rows: list[Element] = []
    for child in table.children:
        if isinstance(child, Element):
            if child.tag == "tr":
                rows.append(child)
            elif child.tag in ("tbody", "thead", "tfoot"):
                rows.extend(_rows(child))
    return rows


def _cells(row: Element) -> list[Element]:
    return [c for c in row.children if isinstance(c, Element) and c.tag in ("th", "td")]


def _plain(node: Element | str) -> str:
    if isinstance(node, str):
        return node
    return "".join(_plain(child) for child in node.children)
