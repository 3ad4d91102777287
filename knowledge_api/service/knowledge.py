"""KnowledgeService: the engine every use case goes through.

It owns the seams (store, embedder, reranker, synthesis chain, caches) and offers the
steps the use cases are made of: retrieve (embed through tier 2, search, rerank), write
an answer from passages, keep values in tier 1, ingest and read documents, report
health. It returns domain values; nothing here knows HTTP or which backend runs.

This module is the query pipeline; what the service holds is engine.py, and its other
concerns are parts it holds, a module each (retrieval.py, trail.py, catalog.py,
startup.py, health.py, sources.py, records.py, maintenance.py): the steps of theirs
that the doors take are offered here by name, each a `Step` (step.py) that calls the
part's own method.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager, aclosing
from functools import partial
from typing import Any, TypeVar

from knowledge_api import evidence, tracing
from knowledge_api.cache.base import COMPUTED, Event, Served
from knowledge_api.models import Evidence, Outcome, SearchHit, SentenceSupport
from knowledge_api.prefetch import Warm
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Engine
from knowledge_api.service.health import Health
from knowledge_api.service.maintenance import Maintenance
from knowledge_api.service.records import Records
from knowledge_api.service.retrieval import Asked, Plan, Retrieval, Retriever
from knowledge_api.service.sources import Sources
from knowledge_api.service.startup import Startup
from knowledge_api.service.step import Step
from knowledge_api.service.trail import Trail
from knowledge_api.synthesis.base import Synthesizer
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer

__all__ = [
    "COMPUTED",
    "Asked",
    "Event",
    "KnowledgeService",
    "Plan",
    "Retrieval",
    "Served",
]
log = logging.getLogger("knowledge_api")
T = TypeVar("T")


class KnowledgeService(Engine):
    """The query pipeline over what the service holds (engine.py): retrieve, route,
    keep values in tier 1, write answers from passages (trail.py records them). Its
    parts read the seams through the engine when called."""

    def hold_parts(self) -> None:
        """The parts, each over this engine (built by Engine.__init__ once the seams are set)."""
        self.trail = Trail(self)
        self.catalog = Catalog(self, self.trail)
        self.startup = Startup(self, self.catalog, self.trail)
        self.checks = Health(self)
        self.retriever = Retriever(self, self.trail)
        self.sources = Sources(self, self.catalog)
        self.records = Records(self)
        self.maintenance = Maintenance(self, self.catalog, self.trail)

    retrieve = Step("retriever", Retriever.retrieve)
    retrieve_asked = Step("retriever", Retriever.retrieve_asked)
    plan = Step("retriever", Retriever.plan)
    search = Step("retriever", Retriever.search)
    facets = Step("retriever", Retriever.facets)
    route = Step("retriever", Retriever.route)
    learn_routes = Step("retriever", Retriever.learn_routes)
    forget_query_embeddings = Step("retriever", Retriever.forget_query_embeddings)

    async def served(
        self,
        key: Hashable,
        compute: Callable[[], Awaitable[tuple[T, bool]]],
        collection: str | tuple[str, ...],
    ) -> Served[T]:
        """`key`'s value from tier 1 (kept under `collection`'s generation, or every
        one's of several searched as one), or computed (once for identical concurrent
        requests), in the tier-1 span. Several collections are each checked first."""
        if not isinstance(collection, str):
            await self.catalog.require_collections(collection)
        with tracing.span("knowledge.cache", {"knowledge.cache.tier": 1}) as span:
            served = await self.tier1.served(key, compute, collection)
            span.set_attribute("knowledge.cache.hit", served.cache_hit)
        return served

    def answering(self) -> AbstractContextManager[None]:
        """Marks a live query: no prefetch starts while one is being answered."""
        return self.prefetcher.answering()

    def cached(self, key: Hashable) -> Any:
        """The value tier 1 holds for `key` as the store is now, or None; no hit or miss
        is counted."""
        return self.tier1.peek(key)

    def follow_up(self, client: str, query: str, hits: Sequence[SearchHit], warm: Warm) -> None:
        """Note what `client` asked, and warm its likely follow-ups in the background
        (KNOWLEDGE_PREFETCH)."""
        self.prefetcher.after(client, query, hits, warm)

    def served_events(
        self,
        key: Hashable,
        run: AsyncGenerator[Event, None],
        replay: Callable[[Any], list[Event]],
        collection: str | tuple[str, ...],
    ) -> AsyncGenerator[Event, None]:
        """A stream from tier 1: a hit replayed, or `run`'s events as they come, its
        value kept under `collection`'s generation (every one's of several)."""
        return self.tier1.served_events(key, run, replay, collection)

    @property
    def embedder_name(self) -> str:
        return self.embedder.name

    @property
    def reranker_name(self) -> str:
        """The reranker configured ("none": no reranking)."""
        return self.reranker.name

    # -- answers from passages -------------------------------------------------------

    async def synthesis_events(
        self, query: str, hits: Sequence[SearchHit]
    ) -> AsyncGenerator[Event, None]:
        """The chain's events: ("delta", text) as text arrives, ("reset", why) when a
        link failed mid-answer, then ("done", Outcome) with the evidence of its
        citations."""
        async with aclosing(self.synthesizer.stream(query, hits)) as events:
            async for name, data in events:
                if name == "done":
                    data.evidence = await self.evidence(data)
                yield name, data

    async def evidence(self, outcome: Outcome) -> tuple[Evidence, ...]:
        """The words behind each citation marker of the outcome (knowledge_api.evidence),
        read in the stored text of the documents it cites."""
        passages = outcome.passages
        cited = list(dict.fromkeys(passages[n - 1].document_id for n in outcome.citations))
        if not cited:
            return ()
        return evidence.cite(outcome.text, passages, await self.store.document_texts(cited))

    async def sentence_support(
        self, query: str, hits: Sequence[SearchHit], words: float = 0.0
    ) -> list[SentenceSupport] | None:
        """Per passage, how well its sentences answer the question, as the offline link
        reads and scores them (its vectors kept for the answer; none for a passage
        holding less than `words` of the question's words); None without the model."""
        offline = self.synthesizer.links[-1]
        if not isinstance(offline, ExtractiveSynthesizer):
            return None
        return await offline.support(query, hits, words)

    def quotable(self, query: str, hits: Sequence[SearchHit]) -> bool:
        """Whether the offline link finds a sentence of `hits` it may quote for the
        question (True without that link)."""
        offline = self.synthesizer.links[-1]
        return not isinstance(offline, ExtractiveSynthesizer) or offline.quotable(query, hits)

    def ready_llm(self) -> Synthesizer | None:
        """The first LLM link that may be called now, for work outside an answer."""
        return self.synthesizer.ready_link()

    def llm_writer(self, link: Synthesizer, query: str) -> Callable[[str], Awaitable[str]]:
        """What `link` writes for a prompt, whole (outside an answer)."""
        return partial(self.synthesizer.written, link, query)

    def llm_called(self, link: Synthesizer, error: Exception | None) -> str:
        """Note how a call of `link` outside an answer went (a failing provider opens
        its circuit for answers too); how it failed, in words, or ""."""
        self.synthesizer.record(link, error)
        return "" if error is None else self.synthesizer.why(link, error)

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Outcome:
        """The chain's answer, whole."""
        async with aclosing(self.synthesis_events(query, hits)) as events:
            async for name, data in events:
                if name == "done":
                    outcome: Outcome = data
                    return outcome
        raise RuntimeError("the synthesis chain ended without an outcome")

    # -- the parts' steps, offered by name -------------------------------------------

    start = Step("startup", Startup.start)
    open = Step("startup", Startup.open)
    load = Step("startup", Startup.load)
    open_storage = Step("startup", Startup.open_storage)
    load_embedder = Step("startup", Startup.load_embedder)
    seed_in_background = Step("startup", Startup.seed_in_background)
    seeded = Step("startup", Startup.seeded)
    stop = Step("startup", Startup.stop)
    health = Step("checks", Health.health)
    readiness = Step("checks", Health.readiness)
    audit = Step("trail", Trail.audit)
    audit_page = Step("trail", Trail.audit_page)
    answered = Step("trail", Trail.answered)
    find_answered = Step("trail", Trail.find_answered)
    recorded = Step("trail", Trail.recorded)
    ingest = Step("catalog", Catalog.ingest)
    embed_documents = Step("catalog", Catalog.embed_documents)
    embed_sentences = Step("catalog", Catalog.embed_sentences)
    document = Step("catalog", Catalog.document)
    find_document = Step("catalog", Catalog.find_document)
    delete_document = Step("catalog", Catalog.delete_document)
    collections = Step("catalog", Catalog.collections)
    require_collection = Step("catalog", Catalog.require_collection)
    require_collections = Step("catalog", Catalog.require_collections)
    iter_documents = Step("catalog", Catalog.iter_documents)
    seed_path = Step("catalog", Catalog.seed_path)
