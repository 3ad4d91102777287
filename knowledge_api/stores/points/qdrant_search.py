"""Hybrid search as Qdrant runs it: each side as one query on a collection's named
vectors, both fused by Qdrant itself where it can (see `qdrant`), and similarities
scored on a server without moving vectors."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from knowledge_api import facets
from knowledge_api.facets import Facets
from knowledge_api.models import SearchFilters
from knowledge_api.stores.fusion import Candidate, cosine_to_similarity
from knowledge_api.stores.hybrid import Asked, Fused
from knowledge_api.stores.keyword import sparse_query
from knowledge_api.stores.points.base import best_of
from knowledge_api.stores.points.engine import by_collection
from knowledge_api.stores.points.qdrant_calls import QdrantCalls
from knowledge_api.stores.points.qdrant_points import (
    DENSE,
    KEYWORDS,
    dense,
    fusion_query,
    search_filter,
    sparse,
)

FACET_PAGE = 1000
"""Points read per page when counting facets."""


class QdrantSearch(QdrantCalls):
    """The search half of the Qdrant store."""

    server_fusion: bool

    async def fused_candidates(self, asked: Asked) -> Fused:
        query, vector, n, filters, mode, tuning = asked
        # the server fuses by rank, when the settings chose it and the request kept it
        if (
            not self.server_fusion
            or tuning.fusion != "rrf"
            or vector is None
            or mode != "hybrid"
            or filters.collections  # several engine collections: fused here
        ):
            return await super().fused_candidates(asked)
        name = await self._chunks(filters.collection)
        if name is None:
            return [], {}
        fusion = fusion_query(self._m, query, vector, search_filter(self._m, filters), n)
        k = self._m.Rrf(k=tuning.fusion_k + 1)  # Qdrant ranks from 0, we from 1
        found = await self._read(
            "hybrid search", "query_points", name, query=self._m.RrfQuery(rrf=k), **fusion
        )
        fused: list[tuple[Hashable, float]] = [
            ((filters.collection, str(p.id)), p.score) for p in found.points
        ]
        return fused, await self.similarities([key for key, _ in fused], vector)

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        query = dense(vector)
        found = await self._query(filters, lambda _: query, DENSE, n)
        return best_of(
            (
                [Candidate((name, str(p.id)), cosine_to_similarity(p.score)) for p in points]
                for name, points in found
            ),
            n,
        )

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        terms = sparse_query(query)
        if not terms:
            return []
        weights = await self._union_weights(filters, terms) if filters.collections else {}
        found = await self._query(
            filters, lambda name: sparse(self._m, weights.get(name, terms)), KEYWORDS, n
        )
        return best_of(
            ([Candidate((name, str(p.id)), p.score) for p in points] for name, points in found), n
        )

    async def _union_weights(
        self, filters: SearchFilters, terms: dict[int, float]
    ) -> dict[str, dict[int, float]]:
        """Each collection's query weights that make its BM25 scores the union's: Qdrant
        weighs a term by the IDF of one engine collection (one per knowledge collection),
        so a term's weight becomes the union's IDF over the collection's own. A
        collection's document frequency of a term is read back from the IDF Qdrant gives
        its best passage (the score of a one-term query over that passage's own BM25
        weight), beside the collection's count of passages."""
        stats: dict[str, tuple[int, dict[int, int]]] = {}
        for collection in filters.searched:
            name = await self._chunks(collection)
            if name is None:
                continue
            points = int((await self._read("counting chunks", "count", name, exact=True)).count)
            found = await asyncio.gather(*(self._frequency(name, term, points) for term in terms))
            stats[collection] = (points, dict(zip(terms, found, strict=True)))
        total = sum(points for points, _ in stats.values())
        union = {term: sum(df[term] for _, df in stats.values()) for term in terms}
        return {
            collection: {term: idf(union[term], total) / idf(df[term], points) for term in terms}
            for collection, (points, df) in stats.items()
        }

    async def _frequency(self, name: str, term: int, points: int) -> int:
        """The passages of the engine collection `name` that hold `term`."""
        found = await self._read(
            "search",
            "query_points",
            name,
            query=sparse(self._m, {term: 1.0}),
            using=KEYWORDS,
            limit=1,
            with_payload=False,
            with_vectors=[KEYWORDS],
        )
        if not found.points:
            return 0
        best = found.points[0]
        weights = best.vector[KEYWORDS]
        own = weights.values[list(weights.indices).index(term)]
        return document_frequency(best.score / own, points)

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        """Counted over the payload of every point the search's filter passes, a page at
        a time (Qdrant's own facets count keywords and integers, not every value)."""
        passages: list[dict[str, Any]] = []
        where = search_filter(self._m, filters)
        for collection in filters.searched:
            name, offset = await self._chunks(collection), None
            while name is not None:
                points, offset = await self._read(
                    "counting facets",
                    "scroll",
                    name,
                    scroll_filter=where,
                    limit=FACET_PAGE,
                    offset=offset,
                    with_payload=["metadata", "source_type", "source_id"],
                    with_vectors=False,
                )
                passages.extend(
                    {**p.payload["metadata"], **{k: p.payload[k] for k in facets.OWN_FIELDS}}
                    for p in points
                )
                if offset is None:
                    break
        return facets.count(fields, passages)

    async def _query(
        self, filters: SearchFilters, query: Callable[[str], Any], using: str, n: int
    ) -> list[tuple[str, list[Any]]]:
        """The n best points of each collection searched (`query(collection)` the query
        of each), by collection."""
        where = search_filter(self._m, filters)
        return [
            (
                collection,
                await self._best_points("search", collection, query(collection), using, where, n),
            )
            for collection in filters.searched
        ]

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        """A server scores the points itself (no vectors travel); local mode, which would
        test every point against an id filter in Python, reads the vectors by id."""
        if not self.url:
            return await super().similarities(keys, vector)
        scores: dict[Hashable, float] = {}
        query = dense(vector)
        for collection, ids in by_collection(keys).items():
            where = self._m.Filter(must=[self._m.HasIdCondition(has_id=ids)])
            scored = await self._best_points(
                "similarity lookup", collection, query, DENSE, where, len(ids)
            )
            for point in scored:
                scores[(collection, str(point.id))] = cosine_to_similarity(point.score)
        return scores

    async def _best_points(
        self, what: str, collection: str, query: Any, using: str, where: Any, limit: int
    ) -> list[Any]:
        """The `limit` points of a collection that `query` (on the vector `using`) scores
        best among those `where` lets through, without payload; none where the
        collection has no engine collection."""
        name = await self._chunks(collection)
        if name is None:
            return []
        found = await self._read(
            what,
            "query_points",
            name,
            query=query,
            using=using,
            query_filter=where,
            limit=limit,
            with_payload=False,
        )
        return list(found.points)


def idf(frequency: int, points: int) -> float:
    """BM25's inverse document frequency as Qdrant computes it."""
    return math.log((points - frequency + 0.5) / (frequency + 0.5) + 1)


def document_frequency(weight: float, points: int) -> int:
    """The document frequency whose `idf` among `points` passages is `weight`."""
    ratio = math.exp(weight) - 1
    return max(0, min(points, round((points + 0.5 - 0.5 * ratio) / (ratio + 1))))
