"""Listwise reranking by an LLM: the first link of the synthesis chain that is ready
(Gemini, Groq or the openai link, skipping links without a key or with an open circuit) reads the
numbered passages and answers with their order as JSON, `{"ranking": [3, 1, 2]}`.

The answer must be exactly that object, its numbers a permutation of some of the
passages' numbers (passages left out follow the listed ones in their fused order); a
Markdown code fence around it is tolerated. Anything else, an error or no answer
within KNOWLEDGE_RERANK_TIMEOUT keeps the fused order. A provider that fails here
counts toward its circuit in the chain, so answers skip it too.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any

from knowledge_api.models import SearchHit
from knowledge_api.rerankers.base import OrderingReranker, RerankError
from knowledge_api.synthesis.base import Prompt, Synthesizer, Usage
from knowledge_api.synthesis.chain import SynthesisChain, describe, within
from knowledge_api.synthesis.prompt import MIN_CUT_PASSAGE, cut, passage

TEMPLATE = """\
You rank search results for {subject}.
Order the numbered passages by how well each answers the question, most useful first. \
Leave out passages that do not help answer it.

PASSAGES:
{passages}

QUESTION: {query}

Reply with JSON only, in exactly this form and with nothing else: \
{{"ranking": [numbers of the passages, most useful first]}}"""

FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class LLMReranker(OrderingReranker):
    name = "llm"

    settings_fields = "rerank_timeout llm_context_chars llm_subject"

    def __init__(
        self,
        timeout: float,
        context_chars: int,
        subject: str,
        chain: SynthesisChain | None = None,
    ) -> None:
        super().__init__()
        self.timeout = timeout
        self.context_chars = context_chars
        self.subject = subject
        self.chain = chain or SynthesisChain([])

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        """The chain the service answers with: its links and their circuits are shared."""
        chain = next((c for c in context if isinstance(c, SynthesisChain)), None)
        return {"chain": chain}

    def unavailable(self) -> str | None:
        if not self.remote_links():
            return "the synthesis chain has no LLM link (KNOWLEDGE_SYNTHESIZER)"
        return None

    def remote_links(self) -> list[Synthesizer]:
        return self.chain.links[:-1]

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        link = self.chain.ready_link()
        if link is None:
            raise RerankError("no LLM link is ready (no key, or its circuit is open)")
        prompt = ranking_prompt(query, hits, self.subject, self.context_chars)
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                text = await answer_of(link, prompt)
        except Exception as e:
            self.chain.record(link, e)
            if deadline.expired():
                raise RerankError(f"{link.name}: no ranking within {self.timeout:g} s") from e
            why = describe(e, link.timeout).removeprefix("failed: ")
            raise RerankError(f"{link.name}: {why}") from e
        self.chain.record(link, None)  # it answered: what it said is checked below
        try:
            return parse_ranking(text, len(hits))
        except RerankError as e:
            raise RerankError(f"{link.name}: {e}") from e

    def details(self) -> dict[str, Any]:
        return {"links": [link.name for link in self.remote_links()]}


async def answer_of(link: Synthesizer, prompt: Prompt) -> str:
    """The link's whole answer (its own timeout between pieces applies)."""
    parts: list[str] = []
    async with aclosing(within(link.generate(prompt, Usage()), link.timeout)) as pieces:
        async for piece in pieces:
            parts.append(piece)
    return "".join(parts)


def ranking_prompt(query: str, hits: Sequence[SearchHit], subject: str, max_chars: int) -> Prompt:
    """Every passage is shown, each cut to an equal share of the context budget."""
    share = max(MIN_CUT_PASSAGE, max_chars // max(len(hits), 1))
    blocks = [cut_to(passage(n, hit), share) for n, hit in enumerate(hits, start=1)]
    text = TEMPLATE.format(subject=subject, passages="\n\n".join(blocks), query=query)
    return Prompt(query=query, hits=tuple(hits), text=text)


def cut_to(block: str, room: int) -> str:
    return block if len(block) <= room else cut(block, room)


def parse_ranking(text: str, count: int) -> list[int]:
    """0-based positions from `{"ranking": [n, ...]}` with 1-based passage numbers;
    RerankError for anything else (checked_order then rejects repeats and unknown
    numbers)."""
    body = text.strip()
    if fenced := FENCE.match(body):
        body = fenced.group(1)
    try:
        value = json.loads(body)
    except ValueError as e:
        raise RerankError(f"the answer is not JSON: {text[:120]!r}") from e
    if not isinstance(value, dict) or set(value) != {"ranking"}:
        raise RerankError(f'the answer is not {{"ranking": [...]}}: {text[:120]!r}')
    ranking = value["ranking"]
    if not isinstance(ranking, list) or any(type(n) is not int for n in ranking):
        raise RerankError(f"the ranking is not a list of passage numbers: {text[:120]!r}")
    if any(not 1 <= n <= count for n in ranking):
        raise RerankError(f"the ranking names a passage that does not exist: {ranking}")
    return [n - 1 for n in ranking]
