"""The prompt every LLM link reads: answer only from the numbered passages, cite them,
say so when they do not hold the answer.

Passages are taken in rank order while they fit in the context budget (6,400
characters by default); a passage cut to fit ends with an ellipsis. Only the passages
in the prompt can be cited, by every link, so [n] always means the n-th result.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge_api.models import SearchHit
from knowledge_api.synthesis.base import Prompt

TEMPLATE = """\
You are a helpful assistant for {subject}.
Answer the user's question based ONLY on the provided context. Be concise and direct.
If the context doesn't contain relevant information, say so clearly.
Cite the passages you use by their numbers in square brackets, like [1] or [1][3], \
right after the sentence they support. Cite only the numbered passages of the context.

CONTEXT:
{context}

USER QUESTION: {query}

ANSWER:"""

MIN_CUT_PASSAGE = 200
"""A passage is cut to fit only if this much of it fits; otherwise it is left out."""


def build_prompt(query: str, hits: Sequence[SearchHit], subject: str, max_chars: int) -> Prompt:
    blocks: list[str] = []
    room = max_chars
    for n, hit in enumerate(hits, start=1):
        block = passage(n, hit)
        if len(block) > room:
            if room >= MIN_CUT_PASSAGE or not blocks:
                blocks.append(cut(block, room))
            break
        blocks.append(block)
        room -= len(block) + 2
    context = "\n\n".join(blocks)
    text = TEMPLATE.format(subject=subject, context=context, query=query)
    return Prompt(query=query, hits=tuple(hits[: len(blocks)]), text=text)


def passage(n: int, hit: SearchHit) -> str:
    chunk = hit.chunk
    heading = " > ".join(part for part in (chunk.title, chunk.section) if part)
    origin = f"{hit.source_type} {hit.source_id}"
    label = f"{heading} ({origin})" if heading else origin
    return f"[{n}] {label}\n{chunk.content.strip()}"


def cut(block: str, room: int) -> str:
    if room <= 2:
        return block[:room]
    return block[: room - 2].rsplit(" ", 1)[0] + " …"
