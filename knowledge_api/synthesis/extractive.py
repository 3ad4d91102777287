"""The offline synthesizer: the sentences of the results that best answer the query,
each cited as [n]. It only quotes; it never writes a claim of its own."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from knowledge_api import text
from knowledge_api.models import SearchHit
from knowledge_api.synthesis.base import Prompt, Synthesis, Usage

MAX_SENTENCES = 3
MAX_SENTENCE_CHARS = 320
NO_RESULTS = "The knowledge base has no passage relevant to this question."


class ExtractiveSynthesizer:
    name = "extractive"
    model = "extractive"
    temperature = 0.0
    timeout = None

    @classmethod
    def from_settings(cls, settings: Any) -> ExtractiveSynthesizer:
        return cls()

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Synthesis:
        return extract(query, hits)

    def unavailable(self) -> str | None:
        return None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        usage.tokens = 0
        yield extract(prompt.query, prompt.hits).text

    def health(self) -> dict[str, Any]:
        return {"name": self.name, "status": "available"}


def extract(query: str, hits: Sequence[SearchHit]) -> Synthesis:
    if not hits:
        return Synthesis(NO_RESULTS, ExtractiveSynthesizer.name)
    wanted = {text.stem(t) for t in text.content_terms(query)}
    scored = []
    for n, hit in enumerate(hits, start=1):
        for position, sentence in enumerate(text.sentences(hit.chunk.content)):
            found = wanted & {text.stem(w) for w in text.words(sentence)}
            if found:
                score = len(found) / len(wanted) + 0.1 * hit.similarity - 0.02 * (n + position)
                scored.append((score, n, found, sentence))
    chosen = pick(sorted(scored, key=lambda s: s[0], reverse=True))
    if not chosen:
        first = text.sentences(hits[0].chunk.content) or [hits[0].chunk.content]
        return Synthesis(f"Closest match: {shorten(first[0])} [1]", ExtractiveSynthesizer.name, [1])
    parts = [f"{shorten(sentence)} [{n}]" for n, sentence in chosen]
    return Synthesis(" ".join(parts), ExtractiveSynthesizer.name, sorted({n for n, _ in chosen}))


def pick(scored: list[tuple[float, int, set[str], str]]) -> list[tuple[int, str]]:
    """Best sentences first; later ones must bring a query term not yet covered."""
    covered: set[str] = set()
    chosen: list[tuple[int, str]] = []
    for _, n, found, sentence in scored:
        if len(chosen) == MAX_SENTENCES:
            break
        if chosen and not found - covered:
            continue
        covered |= found
        chosen.append((n, sentence))
    return chosen


def shorten(sentence: str) -> str:
    sentence = " ".join(sentence.split())
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return sentence
    return sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
