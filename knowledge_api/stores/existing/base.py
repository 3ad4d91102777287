"""What the adopted and read-only stores share (stores/existing/store.py): the embedder check,
the generation, refused writes, the access lists a search applies, health, and the cosine
of keyword hits (reads by source and the listing: stores/existing/reads.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api import facets
from knowledge_api.errors import (
    ConfigurationError,
    EmbedderMismatchError,
    KnowledgeStoreError,
    StoreReadOnly,
)
from knowledge_api.facets import Facets
from knowledge_api.filters import require_equalities
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    CollectionInfo,
    Document,
    SearchFilters,
    SearchHit,
    SourceInfo,
)
from knowledge_api.principals import acl_split, read_as_public
from knowledge_api.stores.existing.reads import ExistingReads
from knowledge_api.stores.existing.rows import SIAM, WIKI, Found, cosine, hit_from_found
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION
from knowledge_api.stores.postgres.rows import as_vector
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.tables import SideTables
from knowledge_api.stores.tables.beside import BesideTheFile
from knowledge_api.stores.tables.jobs import RefusedJobs

GENERATION_POLL_SECONDS = 1.0
"""How long a read generation is trusted: other pipelines' writes show within this
time (plus the database's statistics delay, about a second)."""
WRITES_REFUSED = (
    "the store serves tables other pipelines own (KNOWLEDGE_SCHEMA_MODE={mode}): documents "
    "are written by those pipelines, not through the service"
)


class ExistingTables(ExistingReads, HybridSearch, BesideTheFile):
    mode = ""

    def __init__(self, tables: SiamStore, tuning: SearchTuning = DEFAULT_TUNING) -> None:
        super().__init__()
        self.tables = tables
        self.tuning = tuning
        self.name = tables.name
        self.wiki_vectors = False
        """Wiki pages have vectors (`migrate --wiki-vectors` ran)."""
        self._generation = 0
        self._generation_expires = 0.0
        self._acl_changes = 0
        """Access lists this process changed: each makes cached answers misses at once
        (the database's statistics tell the other processes within about two seconds)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tables!r})"

    @property
    def filter_backend(self) -> str:
        """The store as a filter it cannot apply names it: its searches take metadata
        equalities only (the tables' functions have no filter tree)."""
        return f"existing database ({self.mode})"

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        reason = "the tables other pipelines fill have no function that counts passages"
        raise facets.unsupported(self.filter_backend, reason)

    async def open(self) -> None:
        await self.tables.open()

    async def close(self) -> None:
        await self.tables.close()

    # -- the embedder the rows were written with ----------------------------------------

    async def check_embedder(self, name: str, dimension: int) -> None:
        """No embedder is recorded beside rows other pipelines wrote: the one configured
        is taken at its word, if its vectors have the stored dimension."""
        rows = await self.tables.select(SIAM, "embedding", limit=5)
        stored = {len(as_vector(r["embedding"])) for r in rows if r["embedding"] is not None}
        if stored and stored != {dimension}:
            raise EmbedderMismatchError(
                f"siam_vectors.embedding holds {'/'.join(map(str, sorted(stored)))}-d vectors; "
                f"KNOWLEDGE_EMBEDDER ({name!r}) makes {dimension}-d ones. Set "
                "KNOWLEDGE_EMBEDDER to the embedder the rows were written with (gemini, "
                "768-d, for the Gemini-embedded tables).",
                configured=name,
            )

    async def generation(self) -> Hashable:
        """Moves when other pipelines write the tables (read at most every
        GENERATION_POLL_SECONDS); without a way to tell, answers live for the cache's TTL."""
        if time.monotonic() >= self._generation_expires:
            self._generation = await self.read_generation()
            self._generation_expires = time.monotonic() + GENERATION_POLL_SECONDS
        return self._generation + self._acl_changes

    def acl_changed(self) -> None:
        self._acl_changes += 1

    async def read_generation(self) -> int:
        """The tables' write counter, from the statistics the database keeps."""
        rows = await self.tables.select(
            "pg_stat_user_tables", "n_tup_ins,n_tup_upd,n_tup_del", ("relname", "in", [SIAM, WIKI])
        )
        return sum(int(r["n_tup_ins"]) + int(r["n_tup_upd"]) + int(r["n_tup_del"]) for r in rows)

    # -- writes: refused -----------------------------------------------------------------

    def refused(self) -> StoreReadOnly:
        return StoreReadOnly(WRITES_REFUSED.format(mode=self.mode), schema_mode=self.mode)

    def side_tables(self, sqlite_path: Path) -> SideTables:
        """Beside the file, as for any store without tables of its own; an upload job
        is refused with the other writes."""
        return replace(super().side_tables(sqlite_path), jobs=RefusedJobs(self.refused))

    async def index_document(self, document: Document) -> None:
        raise self.refused()

    async def index_documents(self, documents: Sequence[Document]) -> None:
        raise self.refused()

    async def delete(self, doc_id: str) -> bool:
        raise self.refused()

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The first step of indexing: refused here, before anything is embedded."""
        raise self.refused()

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        raise self.refused()

    def searching(self, filters: SearchFilters) -> AbstractContextManager[SearchFilters | None]:
        """Rows that keep access lists are searched within the reader's principals
        (`access`); rows that keep none are all public: a reader's principals pass all
        of them or none."""
        return nullcontext(filters if self.acl_kept else read_as_public(filters))

    def access(self, filters: SearchFilters) -> tuple[SearchFilters, dict[str, Any]]:
        """`filters` without their tests of `acl`, and those tests as the search
        functions' arguments: `filter_acl` the first (the reader's principals, under the
        index), `filter_acl_also` the others (a filter's own); none for rows that keep
        no access lists (`searching` decided them)."""
        tests, rest = acl_split(filters.where)
        plain = replace(filters, where=rest)
        if not self.acl_kept:
            return plain, {}
        first = list(tests[0]) if tests else None
        return plain, {"filter_acl": first, "filter_acl_also": [list(t) for t in tests[1:]]}

    async def record_source(
        self, collection: str, source: str, root: str = "", connector: str = ""
    ) -> None:
        raise self.refused()

    async def lease_source(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        raise self.refused()

    async def delete_source(self, collection: str, source: str) -> int:
        raise self.refused()

    # -- listings: the rows as they are ---------------------------------------------------

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        return {}  # other pipelines' rows name no source of this service

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        return []

    async def collection_stats(self) -> list[CollectionInfo]:
        """The one collection, when it holds rows; counting tables other pipelines fill
        (perhaps millions of rows) is left to them: its counts are unknown (None)."""
        if not await self.count():
            return []
        return [CollectionInfo(DEFAULT_COLLECTION, None, None, 0, "")]

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return {}  # rows carry no chunk hashes: search runs without the feedback round

    # -- search ---------------------------------------------------------------------

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        """The cosine of keyword-only hits, from their stored vectors."""
        found = [key for key in keys if isinstance(key, Found)]
        result: dict[Hashable, float] = {key: key.keyword for key in found}
        tables = [(SIAM, "embedding")]
        if self.wiki_vectors:
            tables.append((WIKI, "knowledge_embedding"))
        for table, column in tables:
            by_id = {key.id: key for key in found if key.table == table}
            if not by_id:
                continue
            rows = await self.tables.select(
                table, f"id,{column}", ("id", "in", list(by_id)), on=EVERY_COLLECTION
            )
            for row in rows:
                if row[column] is not None:
                    result[by_id[str(row["id"])]] = cosine(as_vector(row[column]), vector)
        return result

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        hits = []
        for key, score in ranked:
            if isinstance(key, Found):
                hit = hit_from_found(key, score, similarity[key])
                where = (SIAM, hit.source_type, hit.source_id)
                self.remember(
                    hit.document_id, (WIKI, "wiki", key.id) if key.table == WIKI else where
                )
                hits.append(hit)
        return hits

    # -- reads ----------------------------------------------------------------------

    async def count(self) -> int:
        """Whether the tables hold passages (0 or 1): enough for the one caller, the
        seeding of an empty store, which never runs on tables other pipelines own."""
        return len(await self.tables.select(SIAM, "id", limit=1))

    async def collections(self) -> dict[str, int]:
        return {DEFAULT_COLLECTION: await self.count()}

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        raise KnowledgeStoreError(
            f"KNOWLEDGE_SCHEMA_MODE={self.mode}: the tables are read by source, not walked "
            "document by document; copy them with the pipelines that fill them"
        )
        yield  # an async generator, like every store's

    def reads(self) -> dict[str, int]:
        return self.tables.reads()

    async def health_check(self) -> dict[str, Any]:
        try:
            await self.tables.select(SIAM, "id", limit=1)
            await self.tables.select(WIKI, "id", limit=1)
            await self.refresh()
        except (KnowledgeStoreError, ConfigurationError) as e:
            return {"backend": self.name, "status": "unavailable", "error": e.message}
        return {
            "backend": self.name,
            "status": "ok",
            **self.tables.location(),
            "schema_mode": self.mode,
            "capabilities": self.capabilities(),
            "left_out": self.left_out(),
        }

    async def refresh(self) -> None:
        """Learn what the database offers (the steps of an adoption)."""

    def capabilities(self) -> dict[str, str]:
        raise NotImplementedError

    def left_out(self) -> list[str]:
        raise NotImplementedError

    # -- candidates of both tables ---------------------------------------------------

    def wiki_filter(self, filters: SearchFilters) -> dict[str, Any] | None:
        """The wiki search's arguments, or None when the filters exclude wiki pages
        (pages have no organization, division or metadata; app_name is their app)."""
        if DEFAULT_COLLECTION not in filters.searched:
            return None
        if filters.source_types is not None and "wiki" not in filters.source_types:
            return None
        metadata = dict(require_equalities(filters.where, self.filter_backend))
        app = metadata.pop("app_under_test", None)
        if metadata or (app is not None and not isinstance(app, str)):
            return None
        return {"filter_app_name": app}
