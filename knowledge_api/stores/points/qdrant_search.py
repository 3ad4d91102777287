"""Hybrid search as Qdrant runs it: each side as one query on a collection's named
vectors, both fused by Qdrant itself where it can (see `qdrant`), and similarities
scored on a server without moving vectors."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from knowledge_api import facets
from knowledge_api.facets import Facets
from knowledge_api.models import SearchFilters
from knowledge_api.stores.fusion import Candidate, cosine_to_similarity
from knowledge_api.stores.hybrid import Asked, Fused
from knowledge_api.stores.keyword import sparse_query
from knowledge_api.stores.points.base import PointStore, best_of
from knowledge_api.stores.points.engine import by_collection
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


class QdrantSearch(PointStore):
    """The search half of the Qdrant store; the store supplies the client calls."""

    url: str
    server_fusion: bool
    _m: Any  # qdrant_client.models

    async def _chunks(self, collection: str, create: bool = False) -> str | None:
        """The Qdrant collection of a knowledge collection (None if it does not exist)."""
        raise NotImplementedError

    async def _read(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a client method that reads; engine failures become store errors."""
        raise NotImplementedError

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
        found = await self._query(filters, dense(vector), DENSE, n)
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
        found = await self._query(filters, sparse(self._m, terms), KEYWORDS, n)
        return best_of(
            ([Candidate((name, str(p.id)), p.score) for p in points] for name, points in found), n
        )

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
        self, filters: SearchFilters, query: Any, using: str, n: int
    ) -> list[tuple[str, list[Any]]]:
        """The n best points of each collection searched, by collection."""
        found: list[tuple[str, list[Any]]] = []
        for collection in filters.searched:
            name = await self._chunks(collection)
            if name is None:
                continue
            points = await self._read(
                "search",
                "query_points",
                name,
                query=query,
                using=using,
                query_filter=search_filter(self._m, filters),
                limit=n,
                with_payload=False,
            )
            found.append((collection, list(points.points)))
        return found

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        """A server scores the points itself (no vectors travel); local mode, which would
        test every point against an id filter in Python, reads the vectors by id."""
        if not self.url:
            return await super().similarities(keys, vector)
        scores: dict[Hashable, float] = {}
        for collection, ids in by_collection(keys).items():
            name = await self._chunks(collection)
            if name is None:
                continue
            scored = await self._read(
                "similarity lookup",
                "query_points",
                name,
                query=dense(vector),
                using=DENSE,
                query_filter=self._m.Filter(must=[self._m.HasIdCondition(has_id=ids)]),
                limit=len(ids),
                with_payload=False,
            )
            for point in scored.points:
                scores[(collection, str(point.id))] = cosine_to_similarity(point.score)
        return scores
