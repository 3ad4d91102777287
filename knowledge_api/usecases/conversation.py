"""A conversation's latest question made standalone, for the chat routes and the MCP
`answer` tool with a history. The service keeps no conversation: everything comes from
the messages the client sends back, the titles of the sources its earlier answers
listed included.

With an LLM link ready (the synthesis chain's first link with a key and a closed
circuit), one short call rewrites the question; it is cached in tier 1 and bounded by
KNOWLEDGE_REWRITE_TIMEOUT, and when it fails or is late the offline rewrite answers and
the rewrite says why (`fallback`). Offline, references are resolved to the subjects of
earlier turns (`references.py`), and the documents of the sources cited in the answer
to the turn referred to are searched with the question.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_api.models import DEFAULT_COLLECTION, normalize_query
from knowledge_api.service import KnowledgeService
from knowledge_api.timing import elapsed_ms
from knowledge_api.usecases.references import MAX_TURNS, Turn, resolve

MAX_QUESTION = 500
CITED_TITLES = 2
"""Titles of cited sources searched with a resolved reference."""

TEMPLATE = """\
Rewrite the user's last question in this conversation about {subject} as one \
standalone search question: replace every reference to earlier turns ("it", "the \
first one", "and X?") by what it refers to, keep the user's own words otherwise, and \
add nothing the conversation does not say.

CONVERSATION:
{conversation}

Reply with the standalone question only, on one line."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The question searched for the latest turn, and how it was made."""

    question: str
    """The standalone question."""
    by: str
    """none (a first question), offline, or the LLM link that wrote it."""
    cited: tuple[str, ...] = ()
    """The documents of the sources cited earlier that go with the question's subject,
    searched with it."""
    fallback: str | None = None
    """Why the LLM rewrite was not used, when one was tried."""
    cache_hit: bool = False
    rewrite_ms: float = 0.0

    @property
    def context(self) -> str:
        """The cited documents, as many as fit after the question."""
        room = MAX_QUESTION - len(self.question) - 1
        return " ".join(self.cited)[: max(room, 0)].strip()

    @property
    def searched(self) -> str:
        """What retrieval reads: the question, then the cited documents."""
        return f"{self.question} {self.context}" if self.context else self.question

    def view(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "by": self.by,
            "cited_sources": list(self.cited),
            "fallback": self.fallback,
            "cache_hit": self.cache_hit,
            "rewrite_ms": self.rewrite_ms,
        }


# -- offline ------------------------------------------------------------------------------


def offline(turns: Sequence[Turn]) -> Rewrite:
    """The latest user question with its references resolved, without a model."""
    resolved = resolve(turns)
    if not resolved:
        return Rewrite("", "none")
    latest = resolved[-1]
    question = latest.question[-MAX_QUESTION:]  # a long message: its end, as it is searched
    if len(resolved) == 1:
        return Rewrite(question, "none")
    return Rewrite(question, "offline", latest.cited[:CITED_TITLES])


# -- with an LLM link -------------------------------------------------------------------


async def standalone(service: KnowledgeService, turns: Sequence[Turn]) -> Rewrite:
    """The question to search for the latest user turn: as asked when it is the first,
    else rewritten by the first ready LLM link (cached), else offline."""
    started = time.perf_counter()
    local = offline(turns)
    if local.by == "none":
        return local
    link = service.ready_llm()
    if link is None:
        return timed(local, started)
    conversation = transcript(turns)
    key = ("ConversationRewrite", link.name, link.model, normalize_query(conversation))
    tried: list[str] = []

    async def compute() -> tuple[Rewrite, bool]:
        try:
            question = await asyncio.wait_for(
                rewritten(
                    service.llm_writer(link, conversation),
                    conversation,
                    service.settings.llm_subject,
                ),
                service.settings.rewrite_timeout,
            )
        except Exception as e:
            failed = service.llm_called(link, e)
            if isinstance(e, TimeoutError):
                why = f"no rewrite within {service.settings.rewrite_timeout:g} s"
            else:
                why = failed.removeprefix("failed: ")
            tried.append(f"{link.name}: {why}")
            return Rewrite(local.question, "offline", local.cited, tried[-1]), False
        service.llm_called(link, None)
        return Rewrite(question, link.name), True

    # a rewrite reads the conversation alone, no stored passage: it is kept under the
    # default collection's generation, whichever collection the question searches
    served = await service.served(key, compute, DEFAULT_COLLECTION)
    rewrite = served.value
    if served.cache_hit:
        rewrite = Rewrite(rewrite.question, rewrite.by, rewrite.cited, None, True)
    return timed(rewrite, started)


def timed(rewrite: Rewrite, started: float) -> Rewrite:
    return Rewrite(
        rewrite.question,
        rewrite.by,
        rewrite.cited,
        rewrite.fallback,
        rewrite.cache_hit,
        round(elapsed_ms(started), 3),
    )


async def rewritten(write: Callable[[str], Awaitable[str]], conversation: str, subject: str) -> str:
    """The standalone question a link (`write`: its answer to a prompt) makes of the
    conversation."""
    text = TEMPLATE.format(subject=subject or "a knowledge base", conversation=conversation)
    written = await write(text)
    line = next((line for line in written.splitlines() if line.strip()), "")
    question = line.strip().strip('"').removeprefix("QUESTION:").strip()
    if not question:
        raise ValueError("the rewrite was empty")
    return question[:MAX_QUESTION]


def transcript(turns: Sequence[Turn]) -> str:
    """The latest turns as the LLM reads them; an answer shows the sources it listed."""
    users = [i for i, turn in enumerate(turns) if turn.role == "user"]
    start = users[-(MAX_TURNS + 1)] if len(users) > MAX_TURNS else 0
    lines = []
    for turn in turns[start:]:
        if turn.role not in ("user", "assistant"):
            continue
        text = " ".join(turn.text.split())[:600]
        if turn.cited:
            text += " (sources: " + "; ".join(turn.cited) + ")"
        lines.append(f"{turn.role.upper()}: {text}")
    return "\n".join(lines)
