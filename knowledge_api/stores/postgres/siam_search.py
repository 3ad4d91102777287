"""The search of the Postgres and Supabase stores, over the primitives each backend
provides (see stores/postgres/siam.py): the candidates and facets by SQL function, the
hits read back by id, each lookup of a search where its candidates were read."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from knowledge_api.errors import KnowledgeStoreError, SearchError
from knowledge_api.facets import Facets
from knowledge_api.models import SearchFilters, SearchHit
from knowledge_api.stores.fusion import Candidate, cosine_to_similarity
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.stores.postgres.acl_estimate import AclEstimate
from knowledge_api.stores.postgres.facets import facet_arguments, facets_of
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION, Reading
from knowledge_api.stores.postgres.rows import (
    Condition,
    FunctionCall,
    Passage,
    Row,
    Selection,
    as_vector,
    hit_from_row,
    lookup_parts,
    search_params,
)

SEARCHED: ContextVar[Reading | None] = ContextVar("searched", default=None)
"""The collection a search under way reads: its lookups by passage or content hash
(similarities, the feedback round's vectors) may be read where its candidates are."""


class SiamSearch(HybridSearch):
    """The primitives `call`, `select` and `delete_rows`, and the search built on them;
    a backend runs the first two as `run_function` and `read_rows`."""

    concurrent_candidates = True  # two pooled connections (or HTTP requests) at once
    ef_search: int
    acl_estimate: AclEstimate

    # -- transport, provided by the backends ---------------------------------------

    async def call(
        self,
        function: str,
        params: Mapping[str, Any],
        error: type[KnowledgeStoreError],
        on: Reading | None = None,
    ) -> list[Row]:
        """Rows of a set-returning SQL function called with named parameters; `on`: a
        read a read replica may serve (None: the primary answers)."""
        return await self.run_function(FunctionCall(function, params, error), on)

    async def run_function(self, call: FunctionCall, on: Reading | None) -> list[Row]:
        """The rows `call` returns, as the backend runs it."""
        raise NotImplementedError

    async def select(
        self,
        table: str,
        columns: str,
        *conditions: Condition,
        order: str = "",
        limit: int = 0,
        on: Reading | None = None,
    ) -> list[Row]:
        """Rows of `table` that meet every condition, ordered by `order` (a column; empty:
        in any order), at most `limit` of them (0: all); `on` as for `call`."""
        return await self.read_rows(Selection(table, columns, conditions, order, limit), on)

    async def read_rows(self, selection: Selection, on: Reading | None) -> list[Row]:
        """The rows `selection` names, as the backend reads them."""
        raise NotImplementedError

    async def delete_rows(self, table: str, *conditions: Condition) -> int:
        raise NotImplementedError

    # -- search ---------------------------------------------------------------------

    @contextmanager
    def searching(self, filters: SearchFilters) -> Iterator[SearchFilters]:
        """Its lookups by passage or content hash read where its candidates are."""
        searched = SEARCHED.set(reading(filters))
        try:
            yield filters
        finally:
            SEARCHED.reset(searched)

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        params = {
            "query_embedding": vector,
            "match_threshold": -1.0,
            "match_count": n,
            "ef_search": self.ef_search,
        }
        rows = await self.call(
            "match_siam_vectors_gemini",
            {**params, **await self.search_arguments(filters)},
            SearchError,
            on=reading(filters),
        )
        return [
            Candidate(Passage(str(r["id"]), r), cosine_to_similarity(r["similarity"])) for r in rows
        ]

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        rows = await self.call(
            "knowledge_facets",
            facet_arguments(filters, fields),
            SearchError,
            on=reading(filters),
        )
        return facets_of(rows, fields)

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        params = {"query_text": query, "match_count": n, **await self.search_arguments(filters)}
        rows = await self.call("search_siam_vectors_text", params, SearchError, on=reading(filters))
        return [Candidate(Passage(str(r["id"]), r), float(r["rank"])) for r in rows]

    async def search_arguments(self, filters: SearchFilters) -> dict[str, Any]:
        """The search functions' filter arguments (`search_params`), with how many
        passages the reader's principals allow as the statistics have it."""
        params = search_params(filters)
        if params["filter_acl"] is not None:
            params["filter_acl_rows"] = await self.acl_estimate.allowed(
                lambda: self.call("knowledge_acl_statistics", {}, SearchError, on=reading(filters)),
                params["filter_acl"],
                params["filter_collections"],
            )
        return params

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        if not keys:
            return {}
        by_id = {key.id: key for key in keys if isinstance(key, Passage)}
        rows = await self.call(
            "knowledge_chunk_similarities",
            {"query_embedding": vector, "chunk_ids": list(by_id)},
            SearchError,
            on=SEARCHED.get(),
        )
        found = {by_id[str(r["id"])]: cosine_to_similarity(r["similarity"]) for r in rows}
        return {key: found.get(key, 0.0) for key in by_id.values()}  # a passage deleted meanwhile

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        """The hits, each with its place in its document: read by id for the hits alone
        (the search functions return what ranking needs)."""
        ids = [key.id for key, _ in ranked if isinstance(key, Passage)]
        columns = "id,start_offset,end_offset,page"
        rows = await self._lookup("siam_vectors", columns, "id", ids, on=SEARCHED.get())
        placed = {str(row["id"]): row for row in rows}
        return [
            hit_from_row({**key.row, **placed.get(key.id, {})}, score, similarity[key])
            for key, score in ranked
            if isinstance(key, Passage)
        ]

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = await self._lookup(
            "siam_vectors",
            "content_hash,embedding",
            "content_hash",
            list(dict.fromkeys(hashes)),
            on=SEARCHED.get(),
        )
        return {r["content_hash"]: as_vector(r["embedding"]) for r in rows}

    async def _lookup(
        self, table: str, columns: str, key: str, values: list[str], on: Reading | None = None
    ) -> list[Row]:
        rows: list[Row] = []
        for part in lookup_parts(values):
            rows.extend(await self.select(table, columns, (key, "in", part), on=on))
        return rows


def reading(filters: SearchFilters) -> Reading:
    """The read a search is: of its collection, or of every one when it looks in several
    (a replica that has replayed every write serves it)."""
    return EVERY_COLLECTION if filters.collections else Reading(filters.collection)
