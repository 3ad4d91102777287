"""KnowledgeService: the engine every use case goes through.

It owns the seams (store, embedder, reranker, synthesis chain, caches) and offers the
steps the use cases are made of: retrieve (embed through tier 2, search, rerank), write
an answer from passages, keep values in tier 1, ingest and read documents, report
health. It returns domain values; nothing here knows HTTP or which backend runs.

This module is the query pipeline; what the service holds is engine.py, and its other
concerns are parts it holds, a module each (trail.py, catalog.py, startup.py,
health.py): the steps of theirs that the doors take are offered here by name.
"""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Sequence,
)
from contextlib import AbstractContextManager, aclosing
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api import evidence, tracing
from knowledge_api.cache.base import COMPUTED, Event, Served
from knowledge_api.embeddings.base import Embedder
from knowledge_api.facets import Facets
from knowledge_api.ledger import Actor, Answered, AuditEntry, AuditQuery
from knowledge_api.models import (
    SETTINGS_RANKING,
    Document,
    Evidence,
    IndexSummary,
    Outcome,
    Progress,
    Ranking,
    SearchFilters,
    SearchHit,
    SearchMode,
    SearchParams,
)
from knowledge_api.prefetch import Warm
from knowledge_api.rerankers.base import Reranker
from knowledge_api.routing import Centroids, Route
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Body, Engine
from knowledge_api.service.health import Health
from knowledge_api.service.maintenance import Maintenance
from knowledge_api.service.records import Records
from knowledge_api.service.retrieval import Plan, Retrieval, Retriever
from knowledge_api.service.sources import Sources
from knowledge_api.service.startup import Startup
from knowledge_api.service.trail import Trail
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.synthesis.base import Synthesizer
from knowledge_api.synthesis.chain import SynthesisChain
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer

__all__ = [
    "COMPUTED",
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

    def __init__(
        self,
        settings: Settings,
        store: KnowledgeStore,
        embedder: Embedder,
        synthesizer: SynthesisChain | Synthesizer,
        reranker: Reranker | None = None,
    ) -> None:
        super().__init__(settings, store, embedder, synthesizer, reranker)
        self.trail = Trail(self)
        self.catalog = Catalog(self, self.trail)
        self.startup = Startup(self, self.catalog, self.trail)
        self.checks = Health(self)
        self.retriever = Retriever(self, self.trail)
        self.sources = Sources(self, self.catalog)
        self.records = Records(self)
        self.maintenance = Maintenance(self, self.catalog, self.trail)

    async def retrieve(
        self,
        query: str,
        limit: int,
        filters: SearchFilters,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        rerank: bool = True,
        route: bool = False,
        ranking: Ranking = SETTINGS_RANKING,
        offset: int = 0,
    ) -> Retrieval:
        """Embed (through tier 2), search, rerank: the step every use case shares."""
        return await self.retriever.retrieve(
            query, limit, filters, threshold, mode, rerank, route, ranking, offset
        )

    async def plan(self, query: str, filters: SearchFilters, route: bool = False) -> Plan:
        return await self.retriever.plan(query, filters, route)

    async def search(
        self,
        plan: Plan,
        query: str,
        limit: int,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        rerank: bool = True,
        ranking: Ranking = SETTINGS_RANKING,
        offset: int = 0,
    ) -> Retrieval:
        return await self.retriever.search(
            plan, query, limit, threshold, mode, rerank, ranking, offset
        )

    async def facets(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets | None:
        return await self.retriever.facets(filters, fields)

    async def route(self, query: str, vector: np.ndarray | None, collection: str) -> Route:
        return await self.retriever.route(query, vector, collection)

    async def learn_routes(self, collection: str) -> Centroids:
        return await self.retriever.learn_routes(collection)

    def forget_query_embeddings(self) -> None:
        self.retriever.forget_query_embeddings()

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

    async def sentence_support(self, query: str, hits: Sequence[SearchHit]) -> list[float] | None:
        """Per passage, the cosine with the question of its sentence closest to it, as
        the offline link reads sentences (its vectors kept for the answer); None
        without the model."""
        offline = self.synthesizer.links[-1]
        if not isinstance(offline, ExtractiveSynthesizer):
            return None
        return await offline.support(query, hits)

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

    # -- the parts' steps --------------------------------------------------------------

    async def start(self) -> None:
        await self.startup.start()

    async def open(self) -> None:
        await self.startup.open()

    async def load(self) -> None:
        await self.startup.load()

    async def open_storage(self) -> None:
        await self.startup.open_storage()

    async def load_embedder(self) -> None:
        await self.startup.load_embedder()

    async def seed_in_background(self) -> None:
        await self.startup.seed_in_background()

    async def seeded(self) -> None:
        await self.startup.seeded()

    async def stop(self) -> None:
        await self.startup.stop()

    async def health(self) -> Body:
        return await self.checks.health()

    async def readiness(self) -> dict[str, str]:
        return await self.checks.readiness()

    async def audit(
        self, actor: Actor, action: str, collection: str | None, changed: dict[str, Any]
    ) -> None:
        await self.trail.audit(actor, action, collection, changed)

    async def audit_page(self, query: AuditQuery) -> list[AuditEntry]:
        return await self.trail.audit_page(query)

    async def answered(
        self, kind: str, params: SearchParams, hits: Sequence[SearchHit], cited: Sequence[int] = ()
    ) -> str:
        return await self.trail.answered(kind, params, hits, cited)

    async def find_answered(self, query_id: str) -> Answered | None:
        return await self.trail.find_answered(query_id)

    async def recorded(self) -> None:
        await self.trail.recorded()

    async def ingest(
        self,
        documents: Iterable[Document],
        progress: Progress | None = None,
        source: str | None = None,
    ) -> IndexSummary:
        return await self.catalog.ingest(documents, progress, source)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self.catalog.embed_documents(texts)

    async def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        return await self.catalog.embed_sentences(texts)

    async def document(
        self, doc_id: str, principals: frozenset[str] | None = None
    ) -> Document | None:
        return await self.catalog.document(doc_id, principals)

    async def find_document(
        self,
        source_type: str,
        key: str,
        collection: str,
        source: str | None = None,
        principals: frozenset[str] | None = None,
    ) -> Document | None:
        return await self.catalog.find_document(source_type, key, collection, source, principals)

    async def delete_document(self, doc_id: str) -> bool:
        return await self.catalog.delete_document(doc_id)

    async def collections(self, principals: frozenset[str] | None = None) -> dict[str, int]:
        return await self.catalog.collections(principals)

    async def require_collection(
        self, collection: str, principals: frozenset[str] | None = None
    ) -> None:
        await self.catalog.require_collection(collection, principals)

    async def require_collections(
        self, collections: Sequence[str], principals: frozenset[str] | None = None
    ) -> None:
        await self.catalog.require_collections(collections, principals)

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        return self.catalog.iter_documents(collection)

    def seed_path(self) -> Path:
        return self.catalog.seed_path()
