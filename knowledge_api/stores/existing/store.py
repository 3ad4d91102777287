"""The store on a database other pipelines fill (KNOWLEDGE_SCHEMA_MODE adopted or read_only).

`siam_vectors` and `wiki_documents` keep the spec's shape: one row per passage, no
parent document table, no chunk hashes, no record of the embedder. The store reads
them through the primitives of the postgres or supabase store it wraps (`call`,
`select`), fuses vector and keyword candidates of both tables in the shared
`HybridSearch`, and never writes: the rows belong to the pipelines that made them.

- adopted: searches with the `knowledge_*` functions and indexes `knowledge-api migrate
  --adopt` added (cosine over siam_vectors, full text over both tables, wiki pages by
  meaning too once `migrate --wiki-vectors` ran).
- read_only: the tables and functions as they are, for credentials that allow no DDL:
  vectors through the existing RPC `match_siam_vectors_gemini(query_embedding,
  match_threshold, match_count)`, keywords by ILIKE; /health names what that leaves out.

A document is a source (source_type, source_id): its passages are the rows sharing both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.errors import ConfigurationError, KnowledgeStoreError, SearchError
from knowledge_api.models import SearchFilters
from knowledge_api.stores.existing.adopt import (
    ACL_STEP,
    RECORD,
    SEARCH_STEP,
    WIKI_ACL_VECTORS,
    WIKI_VECTORS,
)
from knowledge_api.stores.existing.base import ExistingTables
from knowledge_api.stores.existing.rows import (
    SIAM,
    SIAM_COLUMNS,
    WIKI,
    WIKI_COLUMNS,
    Found,
    best,
    found_row,
    row_matches,
    same_app,
    siam_conditions,
    siam_filter,
    with_keyword_similarity,
)
from knowledge_api.stores.fusion import Candidate, SearchTuning, cosine_to_similarity
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION
from knowledge_api.stores.postgres.rows import Row
from knowledge_api.stores.postgres.siam import SiamStore

READ_ONLY_TERMS = 3
"""Query words searched by ILIKE in read-only mode (the longest): one query each."""
READ_ONLY_WIDEN = 4
"""Read-only vector search asks the RPC for this many times the candidates when filters
apply: the RPC has no filter arguments, so filters cut its answer afterwards."""

FACETS_LEFT_OUT = "facets (a request with `facets` is a 400: no function counts the passages)"
ACL_LEFT_OUT = (
    "document permissions (the tables keep no access lists: every row is public, and "
    "changing one is a 400)"
)
ACL_NOT_ADDED = (
    "document permissions (the adoption has not added access lists yet: every row is "
    "public, and changing one is a 400; run `knowledge-api migrate --adopt`)"
)
ACL_FIXED = (
    "cannot be changed: the tables of KNOWLEDGE_SCHEMA_MODE=read_only keep no access lists, "
    "every row is public"
)
ACL_TO_ADD = (
    "cannot be changed yet: the adopted tables keep no access lists until `knowledge-api "
    "migrate --adopt` adds them (every row is public until then)"
)
DATES_LEFT_OUT = (
    "recency on created_at or updated_at (the tables' functions return no dates: every "
    "passage counts as undated in metrics.ranking.recency; rank by a metadata date)"
)


def existing_tables(store: Any, settings: Any) -> ExistingTables:
    """The store of KNOWLEDGE_SCHEMA_MODE over the postgres or supabase store `store`."""
    if not isinstance(store, SiamStore):
        raise ConfigurationError(
            f"KNOWLEDGE_SCHEMA_MODE={settings.schema_mode} serves existing Postgres tables: "
            f"it needs KNOWLEDGE_STORE=postgres or supabase, not {store.name!r}"
        )
    modes = {"adopted": AdoptedTables, "read_only": ReadOnlyTables}
    return modes[settings.schema_mode](store, SearchTuning.from_settings(settings))


class AdoptedTables(ExistingTables):
    mode = "adopted"
    acl_missing = ACL_TO_ADD

    async def open(self) -> None:
        await super().open()
        await self.refresh()

    async def refresh(self) -> None:
        try:
            steps = {r["name"] for r in await self.tables.select(RECORD, "name")}
        except KnowledgeStoreError as e:
            steps = set()
            reason = e.message
        else:
            reason = "its record holds no search functions"
        if SEARCH_STEP not in steps:
            raise ConfigurationError(
                "KNOWLEDGE_SCHEMA_MODE=adopted but the database is not adopted "
                f"({reason}): run `knowledge-api migrate --adopt`, or serve it with "
                "KNOWLEDGE_SCHEMA_MODE=read_only"
            )
        self.acl_kept = ACL_STEP in steps
        # within access lists, wiki pages are searched by meaning by their own function
        self.wiki_vectors = WIKI_VECTORS in steps and (
            not self.acl_kept or WIKI_ACL_VECTORS in steps
        )

    async def read_generation(self) -> int:
        rows = await self.tables.call("knowledge_adopted_generation", {}, SearchError)
        return int(rows[0]["generation"])

    def capabilities(self) -> dict[str, str]:
        return {
            "vector_search": "siam_vectors by cosine (knowledge_match_siam_vectors)",
            "keyword_search": "full text over siam_vectors and wiki_documents",
            "wiki_search": "meaning and keyword" if self.wiki_vectors else "keyword",
            "writes": "refused: the tables belong to their pipelines",
            "permissions": (
                "access lists (knowledge_acl) in both searches, reads and listings"
                if self.acl_kept
                else "none: every row is public"
            ),
        }

    def left_out(self) -> list[str]:
        missing = ["writes through the service", FACETS_LEFT_OUT, DATES_LEFT_OUT]
        if not self.acl_kept:
            missing.append(ACL_NOT_ADDED)
        if not self.wiki_vectors:
            missing.append("wiki search by meaning (run `knowledge-api migrate --wiki-vectors`)")
        return missing

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        wiki = "knowledge_match_wiki_documents" if self.wiki_vectors else None
        params = {"query_embedding": vector, "match_count": n}
        found = await self._candidates(
            filters, params, "knowledge_match_siam_vectors", wiki, similarity_of
        )
        return best(found, n)

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        params = {"query_text": query, "match_count": n}
        found = await self._candidates(
            filters,
            params,
            "knowledge_search_siam_vectors",
            "knowledge_search_wiki_documents",
            rank_of,
        )
        return with_keyword_similarity(best(found, n))

    async def _candidates(
        self,
        filters: SearchFilters,
        params: dict[str, Any],
        siam_function: str,
        wiki_function: str | None,
        score: Callable[[Row], float],
    ) -> list[Candidate]:
        """The rows each table's search function finds (the wiki's none without a
        function) within `filters`, as candidates scored by `score`."""
        found: list[Candidate] = []
        filters, access = self.access(filters)
        searches = (
            (SIAM, siam_function, siam_filter(filters, self.filter_backend)),
            (WIKI, wiki_function, self.wiki_filter(filters)),
        )
        for table, function, table_filter in searches:
            if table_filter is None or function is None:
                continue
            arguments = {**params, **table_filter, **access}
            rows = await self.tables.call(function, arguments, SearchError, on=EVERY_COLLECTION)
            found += [Candidate(found_row(table, r), score(r)) for r in rows]
        return found


class ReadOnlyTables(ExistingTables):
    mode = "read_only"
    acl_missing = ACL_FIXED
    follows_writes = True
    """The statistics are readable (a direct connection; not Supabase's REST API)."""

    async def read_generation(self) -> int:
        if self.follows_writes:
            try:
                return await super().read_generation()
            except KnowledgeStoreError:
                self.follows_writes = False
        return 0

    def capabilities(self) -> dict[str, str]:
        return {
            "vector_search": "siam_vectors through the existing match_siam_vectors_gemini",
            "keyword_search": "ILIKE over siam_vectors and wiki_documents",
            "wiki_search": "keyword",
            "writes": "refused: the tables belong to their pipelines",
        }

    def left_out(self) -> list[str]:
        return [
            "writes through the service",
            FACETS_LEFT_OUT,
            DATES_LEFT_OUT,
            ACL_LEFT_OUT,
            "full-text ranking (keywords are matched by ILIKE, a query word at a time)",
            "filters inside the vector search (applied to what match_siam_vectors_gemini returns)",
            "wiki search by meaning (needs `knowledge-api migrate --adopt --wiki-vectors`)",
        ] + (
            []
            if self.follows_writes
            else ["noticing other pipelines' writes (cached answers live for their TTL)"]
        )

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        siam = siam_filter(filters, self.filter_backend)
        if siam is None:
            return []
        filtered = any(value not in (None, {}) for value in siam.values())
        params = {
            "query_embedding": vector,
            "match_threshold": -1.0,
            "match_count": n * READ_ONLY_WIDEN if filtered else n,
        }
        rows = await self.tables.call(
            "match_siam_vectors_gemini", params, SearchError, on=EVERY_COLLECTION
        )
        kept = [r for r in rows if row_matches(r, siam)]
        return best(
            [Candidate(found_row(SIAM, r), cosine_to_similarity(r["similarity"])) for r in kept], n
        )

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        terms = sorted(set(text.content_terms(query)), key=len, reverse=True)[:READ_ONLY_TERMS]
        siam, wiki = siam_filter(filters, self.filter_backend), self.wiki_filter(filters)
        matched: dict[Found, float] = {}
        for term in terms:
            pattern = f"%{term}%"
            if siam is not None:
                conditions = [("content", "ilike", pattern), *siam_conditions(siam)]
                rows = await self.tables.select(
                    SIAM, SIAM_COLUMNS, *conditions, limit=n, on=EVERY_COLLECTION
                )
                for row in rows:
                    if row_matches(row, siam):
                        key = found_row(SIAM, row)
                        matched[key] = matched.get(key, 0.0) + 1.0
            if wiki is not None:
                for column, weight in (("title", 2.0), ("markdown_content", 1.0)):
                    conditions = [(column, "ilike", pattern)]
                    rows = await self.tables.select(
                        WIKI, WIKI_COLUMNS, *conditions, limit=n, on=EVERY_COLLECTION
                    )
                    for row in rows:
                        if same_app(wiki["filter_app_name"], row["app_name"]):
                            key = found_row(WIKI, row)
                            matched[key] = matched.get(key, 0.0) + weight
        found = [Candidate(key, score) for key, score in matched.items()]
        return with_keyword_similarity(best(found, n))


def similarity_of(row: Row) -> float:
    return cosine_to_similarity(row["similarity"])


def rank_of(row: Row) -> float:
    return float(row["rank"])
