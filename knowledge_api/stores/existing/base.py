"""What the adopted and read-only stores share (stores/existing/store.py): the embedder check,
the generation, refused writes, reads by source, health, and the cosine of keyword hits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api import facets
from knowledge_api.errors import (
    ConfigurationError,
    EmbedderMismatchError,
    InvalidRequest,
    KnowledgeStoreError,
    StoreReadOnly,
)
from knowledge_api.facets import Facets
from knowledge_api.filters import require_equalities
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    SearchFilters,
    SearchHit,
    SourceInfo,
)
from knowledge_api.principals import read_as_public
from knowledge_api.stores.existing.rows import (
    SIAM,
    SIAM_COLUMNS,
    WIKI,
    WIKI_COLUMNS,
    Found,
    cosine,
    hit_from_found,
    source_document,
    source_metadata,
    wiki_document,
    wiki_metadata,
)
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION
from knowledge_api.stores.postgres.rows import Condition, Row, as_vector
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.records import is_uuid
from knowledge_api.stores.tables.beside import BesideTheFile
from knowledge_api.stores.tables.jobs import JobStore, RefusedJobs

GENERATION_POLL_SECONDS = 1.0
"""How long a read generation is trusted: other pipelines' writes show within this
time (plus the database's statistics delay, about a second)."""
WRITES_REFUSED = (
    "the store serves tables other pipelines own (KNOWLEDGE_SCHEMA_MODE={mode}): documents "
    "are written by those pipelines, not through the service"
)


class ExistingTables(HybridSearch, BesideTheFile):
    mode = ""

    def __init__(self, tables: SiamStore, tuning: SearchTuning = DEFAULT_TUNING) -> None:
        self.tables = tables
        self.tuning = tuning
        self.name = tables.name
        self.wiki_vectors = False
        """Wiki pages have vectors (`migrate --wiki-vectors` ran)."""
        self._generation = 0
        self._generation_expires = 0.0

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
        return self._generation

    async def read_generation(self) -> int:
        """The tables' write counter, from the statistics the database keeps."""
        rows = await self.tables.select(
            "pg_stat_user_tables", "n_tup_ins,n_tup_upd,n_tup_del", ("relname", "in", [SIAM, WIKI])
        )
        return sum(int(r["n_tup_ins"]) + int(r["n_tup_upd"]) + int(r["n_tup_del"]) for r in rows)

    # -- writes: refused -----------------------------------------------------------------

    def refused(self) -> StoreReadOnly:
        return StoreReadOnly(WRITES_REFUSED.format(mode=self.mode), schema_mode=self.mode)

    def job_store(self, sqlite_path: Path) -> JobStore:
        return RefusedJobs(self.refused)

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

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        raise InvalidRequest(
            "acl",
            f"cannot be changed: the tables of KNOWLEDGE_SCHEMA_MODE={self.mode} keep no "
            "access lists, every row is public",
            schema_mode=self.mode,
        )

    def searching(self, filters: SearchFilters) -> AbstractContextManager[SearchFilters | None]:
        """Every row is public: a reader's principals pass all of them or none."""
        return nullcontext(read_as_public(filters))

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

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        """Wiki pages and passages, one entry per row, in id order across both tables
        (every row was written by another pipeline, so of no source: `source` is '')."""
        if page.collection != DEFAULT_COLLECTION or page.source:
            return []
        after: list[Condition] = [("id", "gt", page.after)] if is_uuid(page.after) else []
        found: list[DocumentSummary] = []
        if page.source_type in ("", "wiki"):
            rows = await self.tables.select(
                WIKI,
                "id,title,url,app_name",
                *after,
                order="id",
                limit=page.limit,
                on=EVERY_COLLECTION,
            )
            found += [
                listed_row(r, "wiki", str(r["url"] or r["id"]), wiki_metadata(r)) for r in rows
            ]
        kind: list[Condition] = (
            [("source_type", "eq", page.source_type)] if page.source_type else []
        )
        rows = await self.tables.select(
            SIAM,
            SIAM_SUMMARY_COLUMNS,
            *after,
            *kind,
            order="id",
            limit=page.limit,
            on=EVERY_COLLECTION,
        )
        found += [
            listed_row(r, str(r["source_type"]), str(r["source_id"] or r["id"]), source_metadata(r))
            for r in rows
        ]
        return sorted(found, key=lambda doc: doc.id)[: page.limit]

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
        return [
            hit_from_found(key, score, similarity[key])
            for key, score in ranked
            if isinstance(key, Found)
        ]

    # -- reads ----------------------------------------------------------------------

    async def get_by_id(self, doc_id: str) -> Document | None:
        """Documents are named by source here (find_documents); ids name passages."""
        return None

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """None by id, as get_by_id: a citation quotes its passage alone."""
        return {}

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        """One at most: a database other pipelines fill keeps no sources."""
        found = await self._find_document(source_type, key, collection)
        return [found] if found else []

    async def _find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        if collection != DEFAULT_COLLECTION:
            return None
        if source_type == "wiki":
            page = await self._first(WIKI, WIKI_COLUMNS, ("url", key), ("id", key))
            if page:
                return wiki_document(page)
        rows = await self.tables.select(
            SIAM,
            SIAM_COLUMNS,
            ("source_type", "eq", source_type),
            ("source_id", "eq", key),
            on=EVERY_COLLECTION,
        )
        if not rows and is_uuid(key):
            passage = await self._first(SIAM, SIAM_COLUMNS, ("id", key))
            if passage and passage["source_type"] == source_type:
                rows = await self.tables.select(
                    SIAM,
                    SIAM_COLUMNS,
                    ("source_type", "eq", source_type),
                    ("source_id", "eq", passage["source_id"]),
                    on=EVERY_COLLECTION,
                )
        return source_document(sorted(rows, key=lambda r: str(r["id"]))) if rows else None

    async def _first(self, table: str, columns: str, *keys: tuple[str, str]) -> Row | None:
        """The first row whose column equals its key, trying the keys in order (a
        uuid column is only asked for a uuid)."""
        for column, key in keys:
            if column == "id" and not is_uuid(key):
                continue
            rows = await self.tables.select(
                table, columns, (column, "eq", key), limit=1, on=EVERY_COLLECTION
            )
            if rows:
                return rows[0]
        return None

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


SIAM_SUMMARY_COLUMNS = "id,source_type,source_id,metadata,organization,division,app_under_test"


def listed_row(
    row: Row, source_type: str, source_id: str, metadata: dict[str, Any]
) -> DocumentSummary:
    """A row of another pipeline's table as a listing shows it (one passage or page)."""
    title = row.get("title") or metadata.get("title") or ""
    return DocumentSummary(
        str(row["id"]),
        DEFAULT_COLLECTION,
        source_type,
        source_id,
        "",
        str(title),
        metadata,
        1,
        "",
        "",
    )
