"""The offline synthesizer: the sentences of the results that answer the query, each
cited as [n]. It only quotes; it never writes a claim of its own.

Each sentence of the results is scored against the query: by meaning (the cosine of
its embedding with the query's, read in its section, when the service hands over its
embedder) and by words (the share of the query's stemmed content words it contains,
those only its section's heading says counting half).
Boilerplate (navigation, copyright lines, code, headings alone, fragments) is never a
candidate, and a sentence that only repeats the question's words answers nothing; one
that completes them (with a command, a setting, a number) does. A question that names
something (Kestrel, PM2) is answered only from passages that name it, the line that
defines the name (the name before its colon) first. When no sentence
reaches the bar, the answer says the knowledge base has no relevant passage and cites
nothing, instead of quoting something weak.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import SearchHit, SentenceSupport
from knowledge_api.synthesis.base import Prompt, Synthesis, Usage
from knowledge_api.synthesis.quotes import Candidate, picked
from knowledge_api.synthesis.sentences import candidate_sentences

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
question's: below it, a sentence that does not complete the question repeats it (a
keyword-stuffed line, the question itself in an FAQ), and its score is scaled down in
proportion."""
NEW_NEEDED = 2
"""Distinct words of its own that complete the question in a sentence that says none
of the question's words twice."""
DEFINES = 0.1
"""Added to a sentence that defines what the question names, the name standing before
its colon ("421 `misdirected_request`: the `Host` header names a host ..."): in a
reference (a list of settings, errors, fields) that line is the answer, while the prose
around it only mentions the name."""
MAX_SUBJECT_CHARS = 60
"""Longest text before a colon that is a definition's subject, not a clause."""
HEADING_WORDS = 0.5
"""What a question's word counts when the sentence's title or section says it, not the
sentence: read in its section, a sentence answers in the section's terms."""
MAX_EMBEDDED = 12
"""Sentences embedded per answer at most; the model's cost grows with each."""
CACHED_SENTENCES = 20_000
CACHED_PASSAGES = 4096
"""Passages whose candidate sentences are kept (`sentences_of`)."""

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


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
        sentences = candidates(query, hits)
        meaning = await self.cosines(query, hits, sentences)
        return compose(score(query, hits, sentences, meaning), meaning is not None)

    def quotable(self, query: str, hits: Sequence[SearchHit]) -> bool:
        """Whether any sentence of `hits` is a candidate answer to the query: without
        one, the answer is refused whatever the passages' similarity."""
        return any(candidates(query, hits))

    async def support(
        self, query: str, hits: Sequence[SearchHit], words: float = 0.0
    ) -> list[SentenceSupport] | None:
        """Per result, how well its sentences answer the query (0 for a passage without
        candidates, and, unread, for one holding less than `words` of the query's
        content words, its title and section included); None without an embedder, or
        when it fails."""
        wanted = stems(query)
        sentences = [
            passage if not words or held(wanted, hit) >= words else []
            for hit, passage in zip(hits, candidates(query, hits), strict=True)
        ]
        meaning = await self.cosines(query, hits, sentences)
        if meaning is None:
            return None
        best = [0.0] * len(hits)
        for c in score(query, hits, sentences, meaning):
            best[c.n - 1] = max(best[c.n - 1], c.score + RANK_PENALTY * (c.n - 1))
        return [
            SentenceSupport(max(0.0, float(cosines.max())) if cosines.size else 0.0, answers)
            for cosines, answers in zip(meaning, best, strict=True)
        ]

    async def cosines(
        self, query: str, hits: Sequence[SearchHit], sentences: list[list[str]]
    ) -> list[np.ndarray] | None:
        """Per result, the cosine of each sentence with the query (0 for sentences past
        the MAX_EMBEDDED that share most words with it); None without an embedder, or
        when it fails: the words still answer. Vectors are kept per sentence, so a
        passage that answers often is embedded once, and so is the question's: an answer
        reads its passages' support before it is written, and the model is not called
        again for what the first reading embedded."""
        if self.embed is None or not any(sentences):
            return None
        headings = [heading(hit) for hit in hits]
        chosen = worth_embedding(query, headings, sentences)
        texts = {place: embedded(sentences[place[0]][place[1]]) for place in chosen}
        wanted = [query, *texts.values(), *(h for h in headings if h)]
        known = {t: self._vectors[t] for t in dict.fromkeys(wanted) if t in self._vectors}
        missing = [t for t in dict.fromkeys(wanted) if t not in known]
        try:
            vectors = await self.embed(missing) if missing else ()
        except EmbeddingError:
            return None
        for sentence, vector in zip(missing, vectors, strict=True):
            self._remember(sentence, vector)
            known[sentence] = vector
        query_vector = known[query]

        def cosine(passage: str) -> float:
            return float(known[passage] @ query_vector) if passage else 0.0

        def in_section(sentence: float, section: float) -> float:
            return (sentence + max(sentence, section)) / 2

        return [
            np.array(
                [
                    in_section(cosine(texts[(n, position)]), cosine(headings[n]))
                    if (n, position) in texts
                    else 0.0
                    for position in range(len(passage))
                ]
            )
            for n, passage in enumerate(sentences)
        ]

    def _remember(self, sentence: str, vector: np.ndarray) -> None:
        self._vectors[sentence] = vector
        self._vectors.move_to_end(sentence)
        while len(self._vectors) > CACHED_SENTENCES:
            self._vectors.popitem(last=False)


def worth_embedding(
    query: str, headings: list[str], sentences: list[list[str]]
) -> set[tuple[int, int]]:
    """The places (result, sentence) of the MAX_EMBEDDED sentences sharing most words
    with the query, their section's included: each result's best first, then the
    others (earlier results and earlier sentences first on ties). The model's time goes
    where an answer can be, and no result goes without its best sentence."""
    wanted = stems(query)
    ranked = []
    for n, passage in enumerate(sentences):
        heading = stems(headings[n])
        shared = [-len(wanted & (stems(s) | heading)) for s in passage]
        best = min(range(len(passage)), key=lambda i: shared[i], default=-1)
        ranked += [
            (position != best, shared[position], n, position) for position in range(len(passage))
        ]
    return {(n, position) for *_, n, position in sorted(ranked)[:MAX_EMBEDDED]}


def held(wanted: set[str], hit: SearchHit) -> float:
    """The share of `wanted` (stemmed words) a passage holds, its title and section
    included."""
    chunk = hit.chunk
    found = stems(" ".join((chunk.title, chunk.section, chunk.content)))
    return len(wanted & found) / len(wanted) if wanted else 0.0


def heading(hit: SearchHit) -> str:
    """The heading a passage's sentences are read under: its section, or, before the
    document's first section, its title ("The Python client: knowledge_api.client")."""
    return hit.chunk.section or hit.chunk.title


def embedded(sentence: str) -> str:
    """What is embedded of a sentence: as much as an answer quotes of it."""
    return sentence[:MAX_SENTENCE_CHARS]


def stems(passage: str) -> set[str]:
    """Stemmed content words; a name in snake case gives its parts too
    (`KNOWLEDGE_API_HOST`: knowledge_api_host, api, host), so "the API host" finds it."""
    terms = text.content_terms(passage)
    parts = [p for t in terms if "_" in t for p in t.split("_") if p not in text.STOPWORDS]
    return {text.stem(t) for t in [*terms, *parts] if t}


def extract(query: str, hits: Sequence[SearchHit]) -> Synthesis:
    """The answer by words alone (no embedder)."""
    return compose(score(query, hits, candidates(query, hits), None), False)


def candidates(query: str, hits: Sequence[SearchHit]) -> list[list[str]]:
    """Per result, the sentences that may answer. When the question names something
    (Kestrel, PM2, /livez), none from a passage that does not name it (asked about
    Kestrel, Osprey's steps are not an answer), and none that holds no word of what
    is asked of it besides the name ("Run `kestrel apply`" does not say how to roll
    Kestrel back), or holds it only denied ("without a restart" does not say how to
    restart it)."""
    names = named(query)
    asked = stems(query) - stems(" ".join(names))
    return [
        [
            sentence
            for sentence in sentences_of(hit.chunk.content)
            if not names or not asked or asked & stems(_NEGATED.sub(" ", sentence))
        ]
        if names_any(hit, names)
        else []
        for hit in hits
    ]


@lru_cache(maxsize=CACHED_PASSAGES)
def sentences_of(passage: str) -> tuple[str, ...]:
    """A passage's candidate sentences, kept: the same passages answer many questions,
    and an answer reads its passages twice (whether any sentence may be quoted, then
    the answer), three times when it reads below its threshold (their support)."""
    return tuple(candidate_sentences(passage))


_NEGATED = re.compile(r"\b(?:without|no|not|never)\s+(?:(?:a|an|the|any)\s+)?[\w-]+", re.IGNORECASE)
"""A word denied: what a sentence says does not happen."""
_NAME = re.compile(r"[A-Za-z0-9_$/.-]*[A-Za-z0-9_$]")


def named(query: str) -> set[str]:
    """What a question names: words capitalised past its first (Kestrel, SQLite),
    acronyms (PM2, HTTP) and words shaped like code (/livez, store_read_only)."""
    found = set()
    for i, word in enumerate(_NAME.findall(query)):
        if len(word) < 2 or word.casefold() in text.STOPWORDS or not re.search("[A-Za-z]", word):
            continue
        if (i > 0 and word[0].isupper()) or word.isupper() or any(c in word for c in "_/$."):
            found.add(word.casefold())
    return found


def names_any(hit: SearchHit, names: set[str]) -> bool:
    """Whether the passage, its title or its section holds one of `names` (or there are
    none)."""
    if not names:
        return True
    passage = " ".join((hit.chunk.title, hit.chunk.section, hit.chunk.content)).casefold()
    return any(name in passage for name in names)


def score(
    query: str,
    hits: Sequence[SearchHit],
    sentences: list[list[str]],
    meaning: list[np.ndarray] | None,
) -> list[Candidate]:
    """Every candidate sentence with its score, best first."""
    wanted = stems(query)
    names = named(query)
    scored = []
    for n, passage in enumerate(sentences, start=1):
        context = stems(heading(hits[n - 1]))
        for position, sentence in enumerate(passage):
            words = stems(sentence)
            found = len(wanted & words) + HEADING_WORDS * len(wanted & context - words)
            coverage = found / len(wanted) if wanted else 0.0
            value = coverage
            if meaning is not None:
                cosine = max(0.0, float(meaning[n - 1][position]))
                value = MEANING_WEIGHT * cosine + (1 - MEANING_WEIGHT) * coverage
            if defines(sentence, names):
                value += DEFINES
            value *= novelty(sentence, query, wanted)
            value -= RANK_PENALTY * (n - 1)
            scored.append(Candidate(value, n, position, sentence))
    return sorted(scored, key=lambda c: (-c.score, c.n, c.position))


def novelty(sentence: str, question: str, wanted: set[str]) -> float:
    """1 for a sentence that says something beyond the question's words, less for one
    that mostly repeats them. Repeating them is no fault when the sentence completes
    them: with a value the question does not hold ("Restart Falcon with `systemctl
    restart falcon`."), or with words of its own, saying none of the question's twice
    ("Posting the same source again replaces that document.")."""
    if values(sentence) - values(question):
        return 1.0
    tokens = [text.stem(w) for w in text.words(sentence) if w not in text.STOPWORDS]
    if not tokens:
        return 0.0
    repeated = [token for token in tokens if token in wanted]
    own = set(tokens) - wanted
    if len(own) >= NEW_NEEDED and len(repeated) == len(set(repeated)):
        return 1.0
    return min(1.0, (len(tokens) - len(repeated)) / len(tokens) / MIN_NEW_WORDS)


def defines(sentence: str, names: set[str]) -> bool:
    """Whether the sentence is the definition of one of `names`: it stands in the text
    before the sentence's first colon, short enough to be a subject ("`KNOWLEDGE_API_HOST`
    (default `127.0.0.1`): the interface ...")."""
    subject, colon, _ = sentence.partition(": ")
    if not colon or len(subject) > MAX_SUBJECT_CHARS:
        return False
    subject = subject.casefold()
    return any(name in subject for name in names)


_VALUE = re.compile(r"`[^`\n]+`|\b\d[\d.,:]*\b")


def values(passage: str) -> set[str]:
    """The inline code and numbers of a text: commands, settings, defaults, limits."""
    return {v.strip("`").casefold() for v in _VALUE.findall(passage)}


def bar(by_meaning: bool) -> float:
    return BAR_WITH_MEANING if by_meaning else BAR_WORDS_ONLY


def compose(scored: list[Candidate], by_meaning: bool) -> Synthesis:
    """The best sentence and those close to it, in reading order; or no answer."""
    if not scored or scored[0].score < bar(by_meaning):
        return Synthesis(NO_RESULTS, ExtractiveSynthesizer.name)
    floor = max(bar(by_meaning), scored[0].score - KEEP_WITHIN)
    chosen = picked([c for c in scored if c.score >= floor])
    chosen.sort(key=lambda c: (c.n, c.position))
    parts = [f"{shorten(c.sentence)} [{c.n}]" for c in chosen]
    return Synthesis(" ".join(parts), ExtractiveSynthesizer.name, sorted({c.n for c in chosen}))


def shorten(sentence: str) -> str:
    sentence = " ".join(sentence.split())
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return sentence
    return sentence[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
