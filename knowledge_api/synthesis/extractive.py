"""The offline synthesizer: the sentences of the results that answer the query, each
cited as [n]. It only quotes; it never writes a claim of its own.

Each sentence of the results is scored against the query: by meaning (the cosine of
its embedding with the query's, when the service hands over its embedder) and by
words (the share of the query's stemmed content words it contains). Boilerplate
(navigation, copyright lines, code, headings alone, fragments) is never a candidate,
and a sentence that only repeats the question's words answers nothing. When no
sentence reaches the bar, the answer says the knowledge base has no relevant passage
and cites nothing, instead of quoting something weak.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import SearchHit
from knowledge_api.synthesis.base import Prompt, Synthesis, Usage
from knowledge_api.synthesis.sentences import candidate_sentences

MAX_SENTENCES = 3
MAX_SENTENCE_CHARS = 320
NO_RESULTS = "The knowledge base has no passage relevant to this question."

MEANING_WEIGHT = 0.6
"""Score = 0.6 x cosine + 0.4 x word coverage, with the embedder; words alone without."""
RANK_PENALTY = 0.01
"""Per place below the first result: the top-ranked passage wins a near tie, and only
that (at 0.03 the fifth result started 0.12 behind, more than most gaps in meaning)."""
BAR_WITH_MEANING = 0.36
BAR_WORDS_ONLY = 0.5
"""The score a sentence needs to be quoted; chosen from data (docs/answers.md)."""
KEEP_WITHIN = 0.1
"""Further sentences are kept when they score within this of the best one."""
MIN_NEW_WORDS = 0.5
"""Share of a sentence's content words (counted with repeats) that are not the
question's: below it, the sentence repeats the question instead of answering it, and
its score is scaled down in proportion."""
MAX_EMBEDDED = 12
"""Sentences embedded per answer at most; the model's cost grows with each."""
CACHED_SENTENCES = 20_000

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


@dataclass(frozen=True, slots=True)
class Candidate:
    score: float
    n: int
    """1-based position of its result."""
    position: int
    """Its place among the result's sentences: reading order."""
    sentence: str


class ExtractiveSynthesizer:
    name = "extractive"
    model = "extractive"
    temperature = 0.0
    timeout = None

    def __init__(self) -> None:
        self.embed: Embed | None = None
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: Any) -> ExtractiveSynthesizer:
        return cls()

    def use_embedder(self, embed: Embed) -> None:
        """Score sentences by meaning too, with vectors from `embed`."""
        self.embed = embed

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Synthesis:
        return await self.extract(query, hits)

    def unavailable(self) -> str | None:
        return None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        usage.tokens = 0
        yield (await self.extract(prompt.query, prompt.hits)).text

    def health(self) -> dict[str, Any]:
        return {"name": self.name, "status": "available"}

    async def extract(self, query: str, hits: Sequence[SearchHit]) -> Synthesis:
        sentences = [candidate_sentences(hit.chunk.content) for hit in hits]
        meaning = await self.cosines(query, hits, sentences)
        return compose(score(query, sentences, meaning), meaning is not None)

    async def cosines(
        self, query: str, hits: Sequence[SearchHit], sentences: list[list[str]]
    ) -> list[np.ndarray] | None:
        """Per result, the cosine of each sentence with the query (0 for sentences past
        the MAX_EMBEDDED that share most words with it); None without an embedder, or
        when it fails: the words still answer. Vectors are kept per sentence, so a
        passage that answers often is embedded once."""
        if self.embed is None or not any(sentences):
            return None
        chosen = worth_embedding(query, sentences)
        missing = list(dict.fromkeys(embedded(s) for s in chosen))
        missing = [s for s in missing if s not in self._vectors]
        try:
            vectors = await self.embed([query, *missing])
        except EmbeddingError:
            return None
        for sentence, vector in zip(missing, vectors[1:], strict=True):
            self._remember(sentence, vector)
        query_vector = vectors[0]
        return [
            np.array(
                [
                    float(self._vectors[embedded(s)] @ query_vector) if s in chosen else 0.0
                    for s in passage
                ]
            )
            for passage in sentences
        ]

    def _remember(self, sentence: str, vector: np.ndarray) -> None:
        self._vectors[sentence] = vector
        self._vectors.move_to_end(sentence)
        while len(self._vectors) > CACHED_SENTENCES:
            self._vectors.popitem(last=False)


def worth_embedding(query: str, sentences: list[list[str]]) -> set[str]:
    """The MAX_EMBEDDED sentences sharing most words with the query (earlier results and
    earlier sentences first on ties): the model's time goes where an answer can be."""
    wanted = stems(query)
    ranked = sorted(
        (-len(wanted & stems(s)), n, position, s)
        for n, passage in enumerate(sentences)
        for position, s in enumerate(passage)
    )
    return {s for *_, s in ranked[:MAX_EMBEDDED]}


def embedded(sentence: str) -> str:
    """What is embedded of a sentence: as much as an answer quotes of it."""
    return sentence[:MAX_SENTENCE_CHARS]


def stems(passage: str) -> set[str]:
    return {text.stem(t) for t in text.content_terms(passage)}


def extract(query: str, hits: Sequence[SearchHit]) -> Synthesis:
    """The answer by words alone (no embedder)."""
    sentences = [candidate_sentences(hit.chunk.content) for hit in hits]
    return compose(score(query, sentences, None), False)


def score(
    query: str, sentences: list[list[str]], meaning: list[np.ndarray] | None
) -> list[Candidate]:
    """Every candidate sentence with its score, best first."""
    wanted = stems(query)
    scored = []
    for n, passage in enumerate(sentences, start=1):
        for position, sentence in enumerate(passage):
            words = stems(sentence)
            coverage = len(wanted & words) / len(wanted) if wanted else 0.0
            value = coverage
            if meaning is not None:
                cosine = max(0.0, float(meaning[n - 1][position]))
                value = MEANING_WEIGHT * cosine + (1 - MEANING_WEIGHT) * coverage
            value *= novelty(sentence, wanted)
            value -= RANK_PENALTY * (n - 1)
            scored.append(Candidate(value, n, position, sentence))
    return sorted(scored, key=lambda c: (-c.score, c.n, c.position))


def novelty(sentence: str, wanted: set[str]) -> float:
    """1 for a sentence that says something beyond the question's words, less for one
    that mostly repeats them (a keyword-stuffed line, a heading)."""
    tokens = [text.stem(w) for w in text.words(sentence) if w not in text.STOPWORDS]
    if not tokens:
        return 0.0
    new = sum(token not in wanted for token in tokens) / len(tokens)
    return min(1.0, new / MIN_NEW_WORDS)


def bar(by_meaning: bool) -> float:
    return BAR_WITH_MEANING if by_meaning else BAR_WORDS_ONLY


def compose(scored: list[Candidate], by_meaning: bool) -> Synthesis:
    """The best sentence and those close to it, in reading order; or no answer."""
    if not scored or scored[0].score < bar(by_meaning):
        return Synthesis(NO_RESULTS, ExtractiveSynthesizer.name)
    floor = max(bar(by_meaning), scored[0].score - KEEP_WITHIN)
    chosen: list[Candidate] = []
    for candidate in scored:
        if len(chosen) == MAX_SENTENCES or candidate.score < floor:
            break
        if not any(same_sentence(candidate.sentence, c.sentence) for c in chosen):
            chosen.append(candidate)
    chosen.sort(key=lambda c: (c.n, c.position))
    parts = [f"{shorten(c.sentence)} [{c.n}]" for c in chosen]
    return Synthesis(" ".join(parts), ExtractiveSynthesizer.name, sorted({c.n for c in chosen}))


def same_sentence(a: str, b: str) -> bool:
    """The same text found in two passages (a page ingested twice, say)."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def shorten(sentence: str) -> str:
    sentence = " ".join(sentence.split())
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return sentence
    return sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
