"""The KnowledgeStore protocol, and the hybrid search every backend shares.

A store keeps documents, their chunks and the chunks' vectors; it never embeds
(the service does), so a collection can move between backends with its vectors.
Backends provide two candidate lists (vector and keyword) and the shared
`HybridSearch.search` fuses them (stores/fusion.py), cuts by threshold and limit,
and hydrates hits.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Hashable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from knowledge_api import facets, tracing
from knowledge_api.errors import BackendConnectionError, EmbedderMismatchError
from knowledge_api.facets import Facets
from knowledge_api.models import (
    SETTINGS_RANKING,
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    EmbedderIdentity,
    Ranking,
    SearchFilters,
    SearchHit,
    SearchMode,
    SourceInfo,
)
from knowledge_api.registry import FromSettings
from knowledge_api.stores.audit import AuditLog, SQLiteAudit
from knowledge_api.stores.feedback import FeedbackLog, SQLiteFeedback
from knowledge_api.stores.fusion import (
    DEFAULT_TUNING,
    Candidate,
    SearchTuning,
    convex_fusion,
    feedback_vector,
    reciprocal_rank_fusion,
    relative_scores,
)
from knowledge_api.stores.jobs import JobStore, SQLiteJobs
from knowledge_api.stores.keys import KeyStore, SQLiteKeys

__all__ = [
    "Candidate",
    "HybridSearch",
    "KnowledgeStore",
    "SearchMode",
    "cosine_to_similarity",
]


class KnowledgeStore(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def index_document(self, document: Document) -> None:
        """Insert or replace a document and its embedded chunks, atomically."""

    async def index_documents(self, documents: Sequence[Document]) -> None:
        """Index many; each document is atomic on its own."""

    async def index_batches(
        self, batches: AsyncIterable[Sequence[Document]], expected: int = 0
    ) -> None:
        """Index a stream of document sets (a migration); `expected`: the passages at
        least coming, for a backend that loads differently in bulk."""

    async def search(
        self,
        query: str,
        vector: np.ndarray | None,
        top_k: int,
        filters: SearchFilters,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        ranking: Ranking = SETTINGS_RANKING,
    ) -> list[SearchHit]:
        """Hits fused from vector and keyword rankings (or one of them, by `mode`), as
        the request's `ranking` (fusion, vector weight, feedback round) asks."""

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        """How many passages `filters` lets through hold each value of each field
        (knowledge_api.facets), counted in the backend's own query."""

    async def get_by_id(self, doc_id: str) -> Document | None: ...

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        """A document by source id, document id or the id of one of its chunks."""

    async def delete(self, doc_id: str) -> bool: ...

    async def health_check(self) -> dict[str, Any]: ...

    async def count(self) -> int:
        """Number of documents stored."""

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]: ...

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    async def generation(self) -> Hashable:
        """A token that changes whenever the stored content changes."""

    async def collection_generation(self, collection: str) -> Hashable:
        """A token that changes whenever a document of `collection` changes, by a write
        of any process; a write to another collection may leave it be."""

    async def check_embedder(self, name: str, dimension: int) -> None:
        """Record the embedder on first use; refuse a different one later."""

    async def collections(self) -> dict[str, int]:
        """Document count of every collection that holds documents."""

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        """Every document of a collection with its chunks and their embeddings."""
        ...

    def key_store(self, sqlite_path: Path) -> KeyStore:
        """Where the deployment keeps its API keys (see stores/keys.py)."""
        ...

    def audit_log(self, sqlite_path: Path) -> AuditLog:
        """Where the deployment keeps its audit trail (see stores/audit.py)."""
        ...

    def feedback_log(self, sqlite_path: Path) -> FeedbackLog:
        """Where the deployment keeps answered queries and their ratings (stores/feedback.py)."""
        ...

    def job_store(self, sqlite_path: Path) -> JobStore:
        """Where the deployment keeps its upload jobs (see stores/jobs.py)."""
        ...

    # -- sources and listings ------------------------------------------------------

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        """Document id -> source id of every document `source` produced in `collection`."""

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        """Delete these documents with their chunks; how many existed."""

    async def record_source(self, collection: str, source: str) -> None:
        """Note that `source` ran now (its documents are those indexed with its name)."""

    async def delete_source(self, collection: str, source: str) -> int:
        """Delete every document of the source, and the source; how many documents went."""

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        """The sources (of one collection, or all), by collection and name."""

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        """One page of a collection's documents, in id order (a keyset: ids after
        `page.after`), without their text."""

    async def collection_stats(self) -> list[CollectionInfo]:
        """Every collection holding documents or sources, by name."""


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

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        return {"tuning": SearchTuning.from_settings(settings)}

    def key_store(self, sqlite_path: Path) -> KeyStore:
        """Where this store's deployment keeps its API keys: by default a table of the
        SQLite file at `sqlite_path` (the sqlite store's own file)."""
        return SQLiteKeys(sqlite_path)

    async def generation(self) -> Hashable:
        raise NotImplementedError

    async def collection_generation(self, collection: str) -> Hashable:
        """The store's generation, where a backend counts no writes per collection:
        then any write empties every collection's cached answers."""
        return await self.generation()

    def audit_log(self, sqlite_path: Path) -> AuditLog:
        """Where this store's deployment keeps its audit trail: beside its API keys."""
        return SQLiteAudit(sqlite_path)

    def feedback_log(self, sqlite_path: Path) -> FeedbackLog:
        """Answered queries and their ratings: beside the API keys too."""
        return SQLiteFeedback(sqlite_path)

    def job_store(self, sqlite_path: Path) -> JobStore:
        """Where this store's deployment keeps its upload jobs: by default a table of
        the SQLite file at `sqlite_path`, like the keys."""
        return SQLiteJobs(sqlite_path)

    async def search(
        self,
        query: str,
        vector: np.ndarray | None,
        top_k: int,
        filters: SearchFilters,
        threshold: float = 0.0,
        mode: SearchMode = "hybrid",
        ranking: Ranking = SETTINGS_RANKING,
    ) -> list[SearchHit]:
        tuning = self.tuning.adjusted(ranking)
        n = max(tuning.candidates, top_k)
        fused, similarity = await self.fused_candidates(query, vector, n, filters, mode, tuning)
        if mode == "hybrid" and vector is not None and tuning.feedback_docs > 0:
            feedback = {"knowledge.feedback.docs": tuning.feedback_docs}
            with tracing.span("knowledge.search.feedback", feedback) as round_:
                fused, similarity = await self.with_feedback(
                    vector, n, filters, fused, similarity, tuning
                )
                round_.set_attribute("knowledge.search.hits", len(fused))
        kept = [(key, score) for key, score in fused if similarity[key] >= threshold][:top_k]
        return await self.hydrate(kept, similarity)

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        raise facets.unsupported(self.name, "it has no query that counts the matching passages")

    async def fused_candidates(
        self,
        query: str,
        vector: np.ndarray | None,
        n: int,
        filters: SearchFilters,
        mode: SearchMode,
        tuning: SearchTuning,
    ) -> tuple[list[tuple[Hashable, float]], dict[Hashable, float]]:
        """Up to n candidates of each ranking fused best first (as `tuning` fuses), and
        the similarity of each."""
        by_vector: list[Candidate] = []
        by_keyword: list[Candidate] = []
        if vector is not None and mode == "hybrid" and self.concurrent_candidates:
            # keyword first: a store whose vector search holds the event loop (sqlite's
            # runs in process) has sent its keyword query off to its thread by then
            by_keyword, by_vector = await asyncio.gather(
                self.traced_keyword(query, n, filters),
                self.traced_vector(vector, n, filters),
            )
        else:
            if vector is not None and mode != "keyword":
                by_vector = await self.traced_vector(vector, n, filters)
            if mode != "vector":
                by_keyword = await self.traced_keyword(query, n, filters)
        method = {"knowledge.fusion.method": tuning.fusion}
        with tracing.span("knowledge.search.fusion", method) as fusing:
            if vector is None:
                similarity = relative_scores(by_keyword)
            else:
                similarity = {c.key: c.score for c in by_vector}
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
            "db.collection.name": filters.collection,
            "knowledge.search.sources": list(filters.source_types or ("all",)),
            "knowledge.search.candidates": n,
        }

    async def traced_vector(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        """`vector_candidates` in its span."""
        if not tracing.recording():
            return await self.vector_candidates(vector, n, filters)
        attributes = self.db_attributes("vector_search", filters, n)
        with tracing.span("knowledge.search.vector", attributes) as searching:
            found = await self.vector_candidates(vector, n, filters)
            searching.set_attribute("knowledge.search.hits", len(found))
        return found

    async def traced_keyword(self, query: str, n: int, filters: SearchFilters) -> list[Candidate]:
        """`keyword_candidates` in its span."""
        if not tracing.recording():
            return await self.keyword_candidates(query, n, filters)
        attributes = self.db_attributes("keyword_search", filters, n)
        with tracing.span("knowledge.search.keyword", attributes) as searching:
            found = await self.keyword_candidates(query, n, filters)
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
        n: int,
        filters: SearchFilters,
        fused: list[tuple[Hashable, float]],
        similarity: dict[Hashable, float],
        tuning: SearchTuning,
    ) -> tuple[list[tuple[Hashable, float]], dict[Hashable, float]]:
        """The fused ranking fused again with a vector search for the query moved
        toward its best hits (pseudo-relevance feedback); similarity stays the cosine
        of the original query. Without stored vectors for those hits, nothing changes."""
        seeds = await self.hydrate(fused[: tuning.feedback_docs], similarity)
        stored = await self.embeddings_by_hash([hit.chunk.content_hash for hit in seeds])
        if not stored:
            return fused, similarity
        moved = feedback_vector(vector, list(stored.values()), tuning.feedback_weight)
        by_feedback = await self.feedback_candidates(moved, n, filters)
        refused = reciprocal_rank_fusion(
            [[c.key for c in by_feedback], [key for key, _ in fused]],
            k=tuning.fusion_k,
            weights=[tuning.feedback_rank_weight, 1.0],
        )
        missing = [key for key, _ in refused if key not in similarity]
        similarity = {**similarity, **await self.similarities(missing, vector)}
        # a hit deleted since the feedback search found it has no similarity: left out
        return [(key, score) for key, score in refused if key in similarity], similarity

    async def feedback_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        """The feedback search's best n, best first. Its ranking counts by rank alone,
        so a store may rank them by approximate scores."""
        return await self.vector_candidates(vector, n, filters)

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


def cosine_to_similarity(cosine: float) -> float:
    """Similarity 0-1: opposite and unrelated passages are both simply 0."""
    return min(max(cosine, 0.0), 1.0)


def embedder_mismatch(
    where: str, stored: EmbedderIdentity, configured: EmbedderIdentity, remedy: str
) -> EmbedderMismatchError:
    """The error of a store asked to take vectors of another embedder than its own."""
    return EmbedderMismatchError(
        f"{where} holds vectors of embedder {stored.name!r} ({stored.dimension}-d); the "
        f"configured embedder is {configured.name!r} ({configured.dimension}-d). Mixing "
        f"vector spaces would return nonsense: use the original embedder, or {remedy}.",
        stored=stored.name,
        configured=configured.name,
    )


RECONNECT_SECONDS = 5.0
log = logging.getLogger("knowledge_api")


class Reconnect:
    """When a backend that failed to open is tried again: at most every
    RECONNECT_SECONDS, one attempt at a time; in between, requests fail at once with
    the reason it failed. The log says when the reason changes and when it answers
    again, not at every request refused meanwhile."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.error = ""
        self.next_attempt = 0.0
        self.lock = asyncio.Lock()
        self.opened = False

    def attempting(self) -> None:
        self.next_attempt = time.monotonic() + RECONNECT_SECONDS

    def failed(self, error: str) -> BackendConnectionError:
        # the first failure of a store never opened is the service's to report, at start
        if error != self.error and (self.error or self.opened):
            log.warning(
                "store unavailable: %s (trying again at most every %g s)", error, RECONNECT_SECONDS
            )
        self.error = error
        return BackendConnectionError(error, backend=self.backend)

    def succeeded(self) -> None:
        """Connected: a connection lost later may be reopened at once."""
        if self.error:
            log.info("store available again (it failed with: %s)", self.error)
        self.error = ""
        self.next_attempt = 0.0
        self.opened = True

    def check(self) -> None:
        """Fail at once while the last attempt is recent (or still under way)."""
        if time.monotonic() < self.next_attempt:
            reason = self.error or "reconnecting (an attempt is under way)"
            raise BackendConnectionError(f"store unavailable: {reason}", backend=self.backend)


def reason(error: BaseException) -> str:
    """What went wrong, never empty (a timeout's message is)."""
    return str(error) or f"{type(error).__name__} (no message)"


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
