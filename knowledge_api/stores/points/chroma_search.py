"""Hybrid search as Chroma runs it: vectors ranked by Chroma (cosine space, HNSW), and
keyword relevance, which Chroma does not rank, from a `KeywordIndex` built from the same
chunks when the store opens and kept current by every write (see `chroma`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from knowledge_api.errors import KnowledgeStoreError, SearchError
from knowledge_api.facets import Facets
from knowledge_api.models import Document, SearchFilters
from knowledge_api.stores.fusion import Candidate, cosine_to_similarity
from knowledge_api.stores.keyword import KeywordEntry, KeywordIndex
from knowledge_api.stores.points.base import PointStore, best_of
from knowledge_api.stores.points.chroma_filter import chroma_where
from knowledge_api.stores.points.chroma_points import PAGE, counted_facets, keyword_entries
from knowledge_api.stores.points.engine import Record

T = TypeVar("T")


class ChromaSearch(PointStore):
    """The search half of the Chroma store; the store supplies the client calls."""

    keywords: KeywordIndex

    async def _run(self, error: type[KnowledgeStoreError], what: str, call: Callable[[], T]) -> T:
        """Run a client call on a worker thread; engine failures become store errors."""
        raise NotImplementedError

    def _chunks(self, collection: str, create: bool = False) -> Any:
        """The Chroma collection of a knowledge collection (None if it does not exist)."""
        raise NotImplementedError

    def _all_chunks(self) -> list[Any]:
        raise NotImplementedError

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        where = chroma_where(filters.source_types, filters.where)  # a refusal is a 400

        def query(collection: str) -> list[Candidate]:
            chunks = self._chunks(collection)
            if chunks is None:
                return []
            found = chunks.query(
                query_embeddings=[np.asarray(vector, dtype=np.float32)],
                n_results=n,
                where=where,
                include=["distances"],
            )
            ids, distances = found["ids"][0], found["distances"][0]
            if where is not None and len(ids) < n:
                # a filtered HNSW walk can stop short of n when few chunks pass: the
                # passing chunks are then few enough to measure each one
                ids, distances = exact_nearest(chunks, vector, n, where)
            return [
                Candidate((collection, key), cosine_to_similarity(1.0 - distance))
                for key, distance in zip(ids, distances, strict=True)
            ]

        def union() -> list[Candidate]:
            return best_of([query(collection) for collection in filters.searched], n)

        return await self._run(SearchError, "vector search", union)

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        """Counted over the metadata of every chunk the search's `where` passes, a page
        at a time (Chroma counts no groups itself). A filter Chroma cannot express is
        the request's 400, raised before the worker thread (whose failures are the
        store's)."""
        where = chroma_where(filters.source_types, filters.where)

        def read() -> Facets:
            return counted_facets([self._chunks(name) for name in filters.searched], where, fields)

        return await self._run(SearchError, "counting facets", read)

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        await self._ready()  # the index mirrors Chroma: no answers while Chroma is away
        return self.keywords.search(query, n, filters)

    async def _opened(self, record: Record) -> None:
        await self._load_keywords()

    async def _changed(self) -> None:
        await self._load_keywords()

    def _indexed(self, documents: Sequence[Document]) -> None:
        entries = [
            KeywordEntry.of(chunk, doc.collection, doc.source_type, doc.metadata, doc)
            for doc in documents
            for chunk in doc.chunks
        ]
        self.keywords.replace([doc.id for doc in documents], entries)

    def _deleted(self, doc_id: str) -> None:
        self.keywords.replace([doc_id], [])

    async def _load_keywords(self) -> None:
        """Rebuild the keyword index from every chunk stored in Chroma."""

        entries = await asyncio.to_thread(lambda: keyword_entries(self._all_chunks()))
        self.keywords.clear()
        self.keywords.replace([], entries)


def exact_nearest(
    chunks: Any, vector: np.ndarray, n: int, where: dict[str, Any]
) -> tuple[list[str], list[float]]:
    """The n chunks nearest `vector` among those `where` passes, by cosine distance
    measured for each (read a page at a time)."""
    query = np.asarray(vector, dtype=np.float32)
    query = query / (np.linalg.norm(query) or 1.0)
    ids: list[str] = []
    vectors: list[np.ndarray] = []
    offset = 0
    while True:
        got = chunks.get(where=where, include=["embeddings"], limit=PAGE, offset=offset)
        if not got["ids"]:
            break
        ids += got["ids"]
        vectors.append(np.asarray(got["embeddings"], dtype=np.float32))
        offset += len(got["ids"])
    if not ids:
        return [], []
    matrix = np.concatenate(vectors)
    norms = np.linalg.norm(matrix, axis=1)
    distances = 1.0 - (matrix @ query) / np.where(norms == 0, 1.0, norms)
    order = np.argsort(distances, kind="stable")[:n]
    return [ids[i] for i in order], [float(distances[i]) for i in order]
