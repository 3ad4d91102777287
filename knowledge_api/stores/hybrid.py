"""The hybrid search every backend shares.

Backends provide two candidate lists (vector and keyword) and the shared
`HybridSearch.search` fuses them (stores/fusion.py), cuts by threshold and limit,
and hydrates hits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, Awaitable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import replace
from itertools import islice
from typing import Any, NamedTuple

import numpy as np

from knowledge_api import facets, tracing
from knowledge_api.facets import Facets
from knowledge_api.models import (
    Document,
    DocumentPage,
    DocumentSummary,
    Ranking,
    ReadableCount,
    SearchFilters,
    SearchHit,
    SearchMode,
)
from knowledge_api.principals import visible
from knowledge_api.registry import FromSettings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.fusion import (
    DEFAULT_TUNING,
    Candidate,
    SearchTuning,
    convex_fusion,
    feedback_vector,
    reciprocal_rank_fusion,
    relative_scores,
)

Fused = tuple[list[tuple[Hashable, float]], dict[Hashable, float]]
"""A fused ranking, best first, and the similarity of each of its keys."""


class Asked(NamedTuple):
    """What one search asks of the candidate lists."""

    query: str
    vector: np.ndarray | None
    n: int
    """Candidates each list hands to fusion."""
    filters: SearchFilters
    mode: SearchMode
    tuning: SearchTuning


class Ahead(NamedTuple):
    """A keyword list asked for before its search: the search asking the same uses it."""

    query: str
    n: int
    filters: SearchFilters
    candidates: asyncio.Future[list[Candidate]]


AHEAD: ContextVar[Ahead | None] = ContextVar("keyword_ahead", default=None)
"""The keyword list the request's next search may take (`HybridSearch.keywords_ahead`)."""

READ_PAGE = 500
"""Documents a listing page read to count them holds."""
DB_SYSTEMS = {"postgres": "postgresql", "supabase": "postgresql", "chroma": "chromadb"}
"""db.system.name of the backends whose name is not the semantic conventions' one."""


class HybridSearch(FromSettings):
    """Vector and keyword candidates fused (by score, or by rank with
    KNOWLEDGE_FUSION=rrf); similarity is the cosine."""

    name = "store"
    tuning: SearchTuning = DEFAULT_TUNING
    concurrent_candidates = False
    """Whether both candidate lists may be asked for at once (a database server that
    runs the two queries side by side, or a query sent off to a thread); otherwise one
    after the other."""
    keyword_aside = False
    """Whether the keyword query runs off the event loop (on a thread of the store's
    own), so that it can be sent off before the query's vector is known and run while
    the model embeds the query (`keywords_ahead`)."""

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        return {"tuning": SearchTuning.from_settings(settings)}

    async def generation(self) -> Hashable:
        raise NotImplementedError

    async def collection_generation(self, collection: str) -> Hashable:
        """The store's generation, where a backend counts no writes per collection:
        then any write empties every collection's cached answers."""
        return await self.generation()

    def reads(self) -> dict[str, int]:
        """Reads served by where they were served: a read replica's host:port, or ""
        for the primary; empty for a store without read replicas."""
        return {}

    async def search(self, request: SearchRequest) -> list[SearchHit]:
        query, vector, top_k, filters, threshold, mode, ranking = request
        with self.searching(filters) as readable:
            if readable is None:
                return []
            tuning = self.tuning.adjusted(ranking, query)
            asked = Asked(query, vector, self.depth(top_k, ranking), readable, mode, tuning)
            fused, similarity = await self.fused_candidates(asked)
            if mode == "hybrid" and vector is not None and tuning.feedback_docs > 0:
                feedback = {"knowledge.feedback.docs": tuning.feedback_docs}
                with tracing.span("knowledge.search.feedback", feedback) as round_:
                    fused, similarity = await self.with_feedback(vector, asked, fused, similarity)
                    round_.set_attribute("knowledge.search.hits", len(fused))
            # the first top_k that pass, as they are (a fused ranking holds a hundred or more)
            passing = (pair for pair in fused if similarity[pair[0]] >= threshold)
            return await self.hydrate(list(islice(passing, top_k)), similarity)

    def searching(self, filters: SearchFilters) -> AbstractContextManager[SearchFilters | None]:
        """What a search runs under, held while it runs: the filters it reads by (None:
        nothing passes them, there is nothing to search), and whatever the store keeps
        of the search under way."""
        return nullcontext(filters)

    def depth(self, top_k: int, ranking: Ranking) -> int:
        """Candidates each list hands to fusion for a search of `top_k` hits."""
        return max(self.tuning.adjusted(ranking).candidates, top_k)

    @contextlib.contextmanager
    def keywords_ahead(
        self, query: str, top_k: int, filters: SearchFilters, ranking: Ranking
    ) -> Iterator[None]:
        """The keyword list of the hybrid search to come, sent off now when the store
        runs it aside, so that it runs while the query is embedded; the search asking
        for it within the block takes it instead of asking again. Not taken by then
        (the embedding failed, say), it is cancelled."""
        if not self.keyword_aside:
            yield
            return
        n = self.depth(top_k, ranking)
        candidates = asyncio.ensure_future(self.keyword_candidates(query, n, filters))
        token = AHEAD.set(Ahead(query, n, filters, candidates))
        try:
            yield
        finally:
            AHEAD.reset(token)
            if not candidates.done():
                candidates.cancel()
            elif not candidates.cancelled():
                candidates.exception()  # its error, if any, was raised to no one

    def keyword_list(self, asked: Asked) -> Awaitable[list[Candidate]]:
        """The keyword list of `asked`: the one sent off ahead for it, or asked now."""
        ahead = AHEAD.get()
        if ahead is not None and ahead[:3] == (asked.query, asked.n, asked.filters):
            AHEAD.set(None)
            return ahead.candidates
        return self.keyword_candidates(asked.query, asked.n, asked.filters)

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        raise facets.unsupported(self.name, "it has no query that counts the matching passages")

    async def fused_candidates(self, asked: Asked) -> Fused:
        """Up to `asked.n` candidates of each ranking fused best first (as its tuning
        fuses), and the similarity of each."""
        _, vector, n, filters, mode, tuning = asked
        by_vector: list[Candidate] = []
        by_keyword: list[Candidate] = []
        if vector is not None and mode == "hybrid" and self.concurrent_candidates:
            keyword = self.traced("keyword", self.keyword_list(asked), asked)
            vectors = self.traced("vector", self.vector_candidates(vector, n, filters), asked)
            if isinstance(keyword, asyncio.Future):
                # sent off ahead and under way: no task around either list (if the vector
                # search fails, `keywords_ahead` cancels the keyword one)
                by_vector = await vectors
                by_keyword = await keyword
            else:
                # keyword first: a store whose vector search holds the event loop
                # (sqlite's runs in process) has sent its keyword query off by then
                by_keyword, by_vector = await asyncio.gather(keyword, vectors)
        else:
            if vector is not None and mode != "keyword":
                by_vector = await self.traced(
                    "vector", self.vector_candidates(vector, n, filters), asked
                )
            if mode != "vector":
                by_keyword = await self.traced("keyword", self.keyword_list(asked), asked)
        method = {"knowledge.fusion.method": tuning.fusion}
        with tracing.span("knowledge.search.fusion", method) as fusing:
            if vector is None:
                similarity = relative_scores(by_keyword)
            else:
                similarity = dict(by_vector)  # (key, score) pairs
                missing = [c.key for c in by_keyword if c.key not in similarity]
                similarity.update(await self.similarities(missing, vector))
            fused = self.fuse(by_vector, by_keyword, similarity, tuning)
            fusing.set_attribute("knowledge.search.hits", len(fused))
        return fused, similarity

    def db_attributes(self, operation: str, filters: SearchFilters, n: int) -> dict[str, Any]:
        """A store search's span attributes (database semantic conventions)."""
        return {
            "db.system.name": DB_SYSTEMS.get(self.name, self.name),
            "db.operation.name": operation,
            "db.collection.name": ",".join(filters.searched),
            "knowledge.search.sources": list(filters.source_types or ("all",)),
            "knowledge.search.candidates": n,
        }

    def traced(
        self, kind: str, candidates: Awaitable[list[Candidate]], asked: Asked
    ) -> Awaitable[list[Candidate]]:
        """One candidate list (`kind`: vector or keyword) to await in its span; as it
        is when no span is recorded."""
        if not tracing.recording():
            return candidates
        return self._traced(kind, candidates, asked)

    async def _traced(
        self, kind: str, candidates: Awaitable[list[Candidate]], asked: Asked
    ) -> list[Candidate]:
        attributes = self.db_attributes(f"{kind}_search", asked.filters, asked.n)
        with tracing.span(f"knowledge.search.{kind}", attributes) as searching:
            found = await candidates
            searching.set_attribute("knowledge.search.hits", len(found))
        return found

    def fuse(
        self,
        by_vector: Sequence[Candidate],
        by_keyword: Sequence[Candidate],
        similarity: dict[Hashable, float],
        tuning: SearchTuning,
    ) -> list[tuple[Hashable, float]]:
        """Both lists in one ranking, best first: by score (convex) when both lists
        have hits, otherwise (and with KNOWLEDGE_FUSION=rrf) by rank, which keeps the
        order of a single list."""
        if tuning.fusion == "convex" and by_vector and by_keyword:
            return convex_fusion(by_vector, by_keyword, similarity, tuning.vector_weight)
        return reciprocal_rank_fusion(
            [[c.key for c in by_vector], [c.key for c in by_keyword]], k=tuning.fusion_k
        )

    async def with_feedback(
        self,
        vector: np.ndarray,
        asked: Asked,
        fused: list[tuple[Hashable, float]],
        similarity: dict[Hashable, float],
    ) -> Fused:
        """The fused ranking fused again with a vector search for the query moved
        toward its best hits (pseudo-relevance feedback); similarity stays the cosine
        of the original query. Without stored vectors for those hits, nothing changes."""
        tuning = asked.tuning
        stored = await self.seed_vectors(fused[: tuning.feedback_docs], similarity)
        if not stored:
            return fused, similarity
        moved = feedback_vector(vector, stored, tuning.feedback_weight)
        by_feedback = await self.feedback_candidates(moved, asked.n, asked.filters)
        refused = reciprocal_rank_fusion(
            [[c.key for c in by_feedback], [key for key, _ in fused]],
            k=tuning.fusion_k,
            weights=[tuning.feedback_rank_weight, 1.0],
        )
        missing = [key for key, _ in refused if key not in similarity]
        similarity = {**similarity, **await self.similarities(missing, vector)}
        # a hit deleted since the feedback search found it has no similarity: left out
        return [pair for pair in refused if pair[0] in similarity], similarity

    async def seed_vectors(
        self, seeds: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[np.ndarray]:
        """The stored vectors of the feedback round's seeds (one per distinct text);
        none for a seed deleted since it was ranked."""
        hits = await self.hydrate(seeds, similarity)
        stored = await self.embeddings_by_hash([hit.chunk.content_hash for hit in hits])
        return list(stored.values())

    async def feedback_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        """The feedback search's best n, best first. Its ranking counts by rank alone,
        so a store may rank them by approximate scores."""
        return await self.vector_candidates(vector, n, filters)

    async def readable_counts(self, principals: frozenset[str]) -> list[ReadableCount]:
        """The documents `principals` may read and their passages, counted by collection
        and source (none counted: left out), by collection and source. Here by reading
        every listing page; a store that holds access lists in an index counts them in
        one query of its own."""
        counts: dict[tuple[str, str], tuple[int, int]] = {}
        for name in await self.collections():
            page = DocumentPage(name, READ_PAGE, readers=principals)
            while listed := await self.list_documents(page):
                for doc in listed:
                    if visible(doc.acl, principals):
                        documents, chunks = counts.get((name, doc.source), (0, 0))
                        counts[name, doc.source] = (documents + 1, chunks + doc.chunks)
                page = replace(page, after=listed[-1].id)
        return [ReadableCount(c, s, *counts[c, s]) for c, s in sorted(counts)]

    async def collections(self) -> dict[str, int]:
        raise NotImplementedError

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        raise NotImplementedError

    async def index_documents(self, documents: Sequence[Document]) -> None:
        raise NotImplementedError

    async def index_batches(
        self, batches: AsyncIterable[Sequence[Document]], expected: int = 0
    ) -> None:
        """Each set as `index_documents` writes it; a backend with a faster bulk path
        overrides this."""
        async for batch in batches:
            await self.index_documents(batch)

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors by chunk content hash (every KnowledgeStore has it)."""
        raise NotImplementedError

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        """Best n by cosine similarity (clipped to 0-1), best first."""
        raise NotImplementedError

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        """Best n by keyword relevance (higher is better), best first."""
        raise NotImplementedError

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        raise NotImplementedError

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        raise NotImplementedError
