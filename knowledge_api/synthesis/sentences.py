"""The sentences of a passage that could answer a question: its prose without the page
furniture that real documentation carries (navigation, "Edit this page", copyright
lines, HTML comments, reStructuredText directives, code, headings alone, lists of links,
references, fragments of a few words).

A sentence that introduces code ("Limit the threads in one block:") is kept with the
code's first statement quoted after it: in documentation the answer to "how do I" is
often that line, and the sentence alone promises it without giving it. Prose that holds
inline code (`systemctl restart falcon`, `KNOWLEDGE_FUSION=rrf` fuses by rank) is prose,
not code: the command, the setting or the value is the answer. A list item short enough
to quote whole is one sentence: "`threshold` (default 0.2): from 0 to 1." cut after
"0.2)" would leave "from 0 to 1." without what it is about.
"""

from __future__ import annotations

import re

from knowledge_api import text

MIN_WORDS = 4
"""Fewer words than this is a fragment (a label, a link), not an answer."""
MAX_CODE_CHARS = 100
"""Longest code statement quoted after the sentence that introduces it."""
MAX_ITEM_CHARS = 320
"""A list item up to this long is one sentence (as long as an answer quotes one)."""

_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
_FENCE = re.compile(r"^(```|~~~).*?(^\1[^\n]*$|\Z)", re.DOTALL | re.MULTILINE)
_UNDERLINE = re.compile(r"^\s*([=\-~^*+#\"'])\1{2,}\s*$")
"""The line under (or over) a Markdown setext or reStructuredText heading."""
_DIRECTIVE = re.compile(r"^\s*(\.\.\s|\.\.$|:[\w-]+:(\s|$))")
"""reStructuredText markup: `.. code:: python`, `.. _target: url`, `:alt: logo`."""
_NAVIGATION = re.compile(
    r"^\W*(next|previous|prev|up|home|back to top|top|index|modules|contents|"
    r"table of contents|on this page|edit this page|edit on \w+|view (page )?source|"
    r"show source|skip to (main )?content|navigation|search|quick search|this page|"
    r"report a bug|improve this page|(next|previous|prev) (topic|page|chapter))\W*$"
    r"|^\W*(next|previous|prev|up)( topic| page| chapter)?\s*[:»›→]",
    re.IGNORECASE,
)
_NAV_TOKENS = re.compile(r"[«»←→|]|\b(next|previous|prev|up)\b\s*[:|]", re.IGNORECASE)
_COPYRIGHT = re.compile(r"©|\(c\)\s*\d{4}|\bcopyright\b|all rights reserved", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6}\s|[=\-~^*+#]{3,}\s*$)")
_PROMPT = re.compile(r"^(\$|>>>|\.\.\.|%|#!)\s")
_CODE_CHARS = set("{}[]()<>;=_$\\/|*&")
_QUOTE = re.compile(r"^\s*(>\s)+")
"""Blockquote markers (not a `>>>` prompt)."""
_STATEMENT = re.compile(
    r"^[\w.]+\(.*\)\s*;?$|^[\w.\[\]'\"]+\s*=\s*\S"
    r"|^import [\w.]+(\s+as\s+\w+)?(\s*,\s*[\w.]+)*$|^from [\w.]+ import "
    r"|^(async )?(def|class) \w+\s*[(:]|^(try|else|finally):$|^(elif|while) .*:$"
    r"|^(async )?(for \w+(\s*,\s*\w+)* in |with \S.*( as \w+|\)):$)"
    r"|^if [^,]*(==|!=|\(|\bnot\b|\bis\b|\bin\b)[^,]*:$|^return\b|^await \w"
)
"""A line of Python; a prose line that starts with "from", "for" or "if" is not one."""
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"(?<!`)<?\bhttps?://[^\s`]+")
"""A bare address; one in inline code (`https://`) is what the sentence is about."""
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
"""The marker of a list item."""
_EMPHASIS = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_POINTER = re.compile(
    r"^\W*(see|for details|for (more|further|additional|full|complete) (information|info|details"
    r"|examples|documentation)|please (see|refer|read|check)"
    r"|refer to|check out|read more|learn more|more (information|details) (is|are|can)"
    r"|the following( \w+)*? (are|is) (a |some )?(great |good |useful )?"
    r"(resources?|tutorials?|links?|articles?|references?))\b",
    re.IGNORECASE,
)
"""A sentence that sends the reader elsewhere ("For details, see ...") answers nothing."""
_ABBREVIATION = re.compile(r"(\bet al|\be\.g|\bi\.e|\bcf|\bvs|\bpp?|\bfig|\bapprox|\b[A-Z])\.$")
"""A sentence 'ending' in one of these was cut after an abbreviation or an initial."""
_CODE_OPENER = re.compile(r"^\s*(```|~~~|\.\. (code|code-block|sourcecode)::)|^\s*(>>>|\$) ")
_SKIPPED_CODE = re.compile(r"^(import|from) \w|^#|^(```|~~~)|^\.\. |^pip |^print\(|`")
_FENCE_OPEN = re.compile(r"^\s*(```|~~~)")
_CALL = re.compile(r"\w\(")
_PROMPT_MARK = re.compile(r"^(>>>|\.\.\.|\$)\s?")


def candidate_sentences(passage: str) -> list[str]:
    """The passage's sentences, in order, that are prose."""
    lines = without_headings(_COMMENT.sub(" ", passage).splitlines())
    lines = with_code_quoted(lines)
    prose = _FENCE.sub("\n\n", "\n".join(lines))
    kept = (_QUOTE.sub("", line) for line in prose.splitlines())
    kept = (line for line in kept if not boilerplate_line(line))
    found = (readable(s) for s in joined_abbreviations(split(list(kept))))
    return [s for s in found if not boilerplate_sentence(s)]


def split(lines: list[str]) -> list[str]:
    """The sentences of prose lines, a list item short enough to quote whole as one."""
    parts: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        joined = "\n".join(block)
        if _ITEM.match(block[0]) and len(" ".join(joined.split())) <= MAX_ITEM_CHARS:
            parts.append(joined)
        else:
            parts.extend(text.sentences(joined))
        block.clear()

    for line in lines:
        if not line.strip() or _ITEM.match(line):
            flush()
        if line.strip():
            block.append(line)
    flush()
    return parts


def without_headings(lines: list[str]) -> list[str]:
    """Lines without setext and reStructuredText headings: the title and its underline
    (and overline). Left in, a title glues itself to the next sentence, and an
    underline of `~~~` reads as the opening of a code fence."""
    dropped: set[int] = set()
    for i, line in enumerate(lines):
        if i == 0 or not _UNDERLINE.match(line):
            continue
        title = lines[i - 1].strip()
        if title and not _UNDERLINE.match(title) and underlines(line.strip(), title):
            dropped.update((i - 1, i))
            if i >= 2 and _UNDERLINE.match(lines[i - 2]):
                dropped.add(i - 2)
    return [line for i, line in enumerate(lines) if i not in dropped]


def underlines(line: str, title: str) -> bool:
    """`===` and `---` under any text (Markdown); other marks as long as the title
    (reStructuredText), so that a `~~~` fence after a line stays a fence."""
    return line[0] in "=-" or len(line) >= len(title)


def with_code_quoted(lines: list[str]) -> list[str]:
    """Each line ending in ':' that is followed by code gets the code's first statement
    (not an import, comment or install line) appended in backticks, unless the line
    already names what it calls."""
    result = list(lines)
    for i, line in enumerate(lines):
        if not line.rstrip().endswith(":") or code_like(line.strip()):
            continue
        statement = first_statement(lines[i + 1 :])
        if statement and statement.split("(")[0].strip() not in line:
            result[i] = f"{line.rstrip()} `{statement}`"
    return result


def first_statement(following: list[str]) -> str | None:
    """The first call in the code block that starts the following lines (setup such as
    imports, comments and plain assignments passed over), if short enough to quote."""
    block = code_block(following)
    for line in block[:12]:
        statement = _PROMPT_MARK.sub("", line.strip())
        if _CALL.search(statement) and not _SKIPPED_CODE.match(statement):
            return statement if len(statement) <= MAX_CODE_CHARS else None
    return None


def code_block(following: list[str]) -> list[str]:
    """The lines of the code block that opens `following` (after blank lines): a fence
    up to its end, or a prompt or indented block up to the next prose line."""
    start = next((i for i, line in enumerate(following) if line.strip()), None)
    if start is None:
        return []
    first = following[start]
    fence = _FENCE_OPEN.match(first)
    if fence:
        block = following[start + 1 :]
        end = next((i for i, line in enumerate(block) if line.startswith(fence[1])), len(block))
        return block[:end]
    if not _CODE_OPENER.match(first) and not first.startswith(("    ", "\t")):
        return []
    block = []
    for line in following[start + 1 if first.lstrip().startswith("..") else start :]:
        if line.strip() and not line.startswith((" ", "\t")) and not _PROMPT.match(line):
            break
        block.append(line)
    return block


def joined_abbreviations(parts: list[str]) -> list[str]:
    """Sentences re-joined where they were cut after `et al.`, `e.g.` or an initial."""
    joined: list[str] = []
    for part in parts:
        if joined and _ABBREVIATION.search(joined[-1]):
            joined[-1] = f"{joined[-1]} {part}"
        else:
            joined.append(part)
    return joined


def readable(sentence: str) -> str:
    """Links as their text, images, bare addresses, list markers and bold left out."""
    plain = _URL.sub("", _LINK.sub(r"\1", _IMAGE.sub("", sentence)))
    return _EMPHASIS.sub(r"\1", _ITEM.sub("", plain.strip())).strip()


def boilerplate_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    return bool(
        _HEADING.match(stripped)
        or _DIRECTIVE.match(stripped)
        or _NAVIGATION.match(stripped)
        or _COPYRIGHT.search(stripped)
        or _PROMPT.match(stripped)
        or code_like(stripped)
        or len(_NAV_TOKENS.findall(stripped)) >= 2
    )


def boilerplate_sentence(sentence: str) -> bool:
    """A fragment, a heading left alone, a list of links and references, or a pointer
    to somewhere else."""
    words = text.words(sentence)
    if len(words) < MIN_WORDS or not text.content_terms(sentence):
        return True
    return heading_alone(sentence, words) or reference(sentence) or bool(_POINTER.match(sentence))


def reference(sentence: str) -> bool:
    """A bibliography entry or a list of names: long, and nearly every word of it
    capitalised or a number."""
    tokens = sentence.split()
    named = sum(not t[:1].islower() for t in tokens)
    return len(tokens) > 8 and named / len(tokens) > 0.7


def heading_alone(sentence: str, words: list[str]) -> bool:
    """A short title-cased line without a sentence's closing punctuation."""
    stripped = sentence.strip()
    if stripped[-1] in ".!?:;)\"'`" or len(words) > 8 or "\n" in stripped:
        return False
    capitalised = [w for w in stripped.split() if w[:1].isalpha()]
    return bool(capitalised) and all(w[0].isupper() for w in capitalised if len(w) > 3)


def code_like(line: str) -> bool:
    """Mostly symbols, or a statement/call rather than words; in a line with inline code
    and a sentence's words around it, the words around it."""
    line = _LINK.sub(r"\1", line)
    if "`" in line and "```" not in line:
        around = _INLINE_CODE.sub(" ", line)
        if len(text.words(around)) >= MIN_WORDS:
            line = around  # the prose around the spans is judged, not the code in them
    line = line.replace("`", "")
    symbols = sum(ch in _CODE_CHARS for ch in line)
    letters = sum(ch.isalpha() for ch in line)
    if letters == 0 or symbols / max(1, len(line)) > 0.2:
        return True
    return bool(_STATEMENT.match(line))
