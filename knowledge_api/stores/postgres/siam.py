"""The store protocol on the production schema (siam_vectors, wiki_documents).

The `postgres` and `supabase` backends hold the same tables and call the same SQL
functions (stores/sql/postgres/); they differ only in how a function is called and a
table is read. `SiamStore` implements every operation once on three primitives:
`call` (a set-returning SQL function), `select` and `delete_rows`, declared with the
search built on them in `siam_search.py`; the backends provide `run_function`,
`read_rows` and `delete_rows`.
Documents are written by one SQL function, in one transaction per call, so a document
and its passages change together whichever way the function is reached; the postgres
store fills that function's staging tables by COPY instead (postgres/load.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

from knowledge_api.errors import (
    BackendConnectionError,
    EmbedderMismatchError,
    IndexingError,
    KnowledgeStoreError,
    SearchError,
)
from knowledge_api.models import (
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    EmbedderIdentity,
    ReadableCount,
    SourceInfo,
)
from knowledge_api.stores.base import embedder_mismatch
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.postgres.acl_estimate import AclEstimate
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION, Reading
from knowledge_api.stores.postgres.rows import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
    Condition,
    Row,
    collection_from_row,
    document_from_rows,
    document_payload,
    documents_from_rows,
    lookup_parts,
    source_from_row,
    summary_from_row,
    write_batches,
)
from knowledge_api.stores.postgres.siam_search import SiamSearch
from knowledge_api.stores.records import is_uuid, named
from knowledge_api.stores.tables import SideTables
from knowledge_api.stores.tables.audit import SiamAudit
from knowledge_api.stores.tables.feedback import SiamFeedback
from knowledge_api.stores.tables.jobs import SiamJobs
from knowledge_api.stores.tables.keys import SiamKeys


class SiamStore(SiamSearch):
    name = "siam"
    generation_poll_seconds = 0.5
    """How long a read generation is trusted: another process's write is noticed within
    this time (this store's own writes at once), so every replica drops its cached
    answers within a second of any write, and a cache hit mostly costs no round trip.
    The counter (knowledge_store_state) is moved by triggers in the writing transaction,
    whoever writes: a replica, `knowledge-api ingest` or `sync`, or plain SQL."""

    def __init__(self, tuning: SearchTuning = DEFAULT_TUNING, ef_search: int = 100) -> None:
        self.tuning = tuning
        self.ef_search = ef_search
        self.acl_estimate = AclEstimate()
        self._generation: tuple[int, dict[str, int]] = (-1, {})
        self._generation_expires = 0.0

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        return {**super().configured(settings), "ef_search": settings.postgres_ef_search}

    # -- connection (provided by the backends) and the store's own tables ------------

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def _acknowledged(self, collections: Iterable[str] | None) -> None:
        """A write to `collections` (None: to any) was acknowledged: reads of them must
        see it from now on (a store with read replicas keeps them from stale ones)."""

    def side_tables(self, sqlite_path: Path) -> SideTables:
        """In the schema's own tables, one for every replica."""
        return SideTables(SiamKeys(self), SiamAudit(self), SiamFeedback(self), SiamJobs(self))

    # -- embedder and generation -----------------------------------------------------

    async def check_embedder(self, name: str, dimension: int) -> None:
        rows = await self.call(  # failing here leaves the store unusable: unavailable
            "knowledge_check_embedder",
            {"embedder_name": name, "embedder_dimension": dimension},
            BackendConnectionError,
        )
        stored = rows[0]
        if stored["column_dimension"] != dimension:
            raise EmbedderMismatchError(
                f"siam_vectors.embedding holds {stored['column_dimension']}-d vectors; the "
                f"configured embedder {name!r} makes {dimension}-d ones. Mixing vector spaces "
                "is refused: configure the embedder the schema was made for, or migrate a new "
                "database with `knowledge-api migrate`.",
                stored=stored["name"],
                configured=name,
            )
        recorded = EmbedderIdentity(stored["name"], stored["dimension"])
        if recorded != EmbedderIdentity(name, dimension):
            raise embedder_mismatch(
                "the store", recorded, EmbedderIdentity(name, dimension), "migrate a new database"
            )

    async def generation(self) -> Hashable:
        return (await self._generations())[0]

    async def collection_generation(self, collection: str) -> Hashable:
        """The collection's own counter (knowledge_collection_state), polled with the
        store's and read again only when the store's moved."""
        return (await self._generations())[1].get(collection, 0)

    async def _generations(self) -> tuple[int, dict[str, int]]:
        if time.monotonic() >= self._generation_expires:
            rows = await self.select("knowledge_store_state", "generation")
            generation = int(rows[0]["generation"])
            if generation != self._generation[0]:
                rows = await self.select("knowledge_collection_state", "collection,generation")
                collections = {r["collection"]: int(r["generation"]) for r in rows}
                known = self._generation[1]
                # whoever wrote them, reads of the collections that moved see those writes
                await self._acknowledged(
                    [c for c, count in collections.items() if known.get(c) != count]
                )
                self._generation = (generation, collections)
            self._generation_expires = time.monotonic() + self.generation_poll_seconds
        return self._generation

    def _wrote(self) -> None:
        self._generation_expires = 0.0

    # -- writes ---------------------------------------------------------------------

    async def index_document(self, document: Document) -> None:
        await self.index_documents([document])

    async def index_documents(self, documents: Sequence[Document]) -> None:
        unique = {doc.id: doc for doc in documents}  # the last version of a source wins
        payloads = [document_payload(doc) for doc in unique.values()]
        try:
            for batch in write_batches(payloads):
                await self.call("knowledge_index_documents", {"documents": batch}, IndexingError)
        finally:
            self._wrote()
        await self._acknowledged({doc.collection for doc in unique.values()})

    async def delete(self, doc_id: str) -> bool:
        if not is_uuid(doc_id):
            return False
        try:
            deleted = await self.delete_rows("knowledge_documents", ("id", "eq", doc_id)) > 0
        finally:
            self._wrote()
        await self._acknowledged(None)
        return deleted

    # -- sources and listings ---------------------------------------------------------

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        found: dict[str, str] = {}
        while True:
            conditions: list[Condition] = [
                ("collection", "eq", collection),
                ("source", "eq", source),
            ]
            if found:
                conditions.append(("id", "gt", max(found)))
            page = await self.select(
                "knowledge_documents", "id,source_id", *conditions, order="id", limit=1000
            )
            found.update((str(r["id"]), r["source_id"]) for r in page)
            if len(page) < 1000:
                return found

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(doc_id for doc_id in doc_ids if is_uuid(doc_id)))
        deleted = 0
        try:
            for part in lookup_parts(ids):
                deleted += await self.delete_rows("knowledge_documents", ("id", "in", part))
        finally:
            self._wrote()
        await self._acknowledged(None)
        return deleted

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        ids = list(dict.fromkeys(doc_id for doc_id in doc_ids if is_uuid(doc_id)))
        changed = 0
        try:
            for part in lookup_parts(ids):
                params = {"doc_ids": part, "new_acl": list(acl)}
                rows = await self.call("knowledge_set_acl", params, IndexingError)
                changed += len(rows)
        finally:
            self._wrote()
        await self._acknowledged(None)
        return changed

    async def record_source(
        self, collection: str, source: str, root: str = "", connector: str = ""
    ) -> None:
        params = {
            "source_collection": collection,
            "source_name": source,
            "source_root": root,
            "source_connector": connector,
        }
        await self.call("knowledge_record_source", params, IndexingError)
        await self._acknowledged([collection])

    async def lease_source(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        params = {
            "source_collection": collection,
            "source_name": source,
            "claim_holder": holder,
            "claim_seconds": seconds,
        }
        rows = await self.call("knowledge_lease_source", params, IndexingError)
        return bool(rows and rows[0]["held"])

    async def delete_source(self, collection: str, source: str) -> int:
        params = {"source_collection": collection, "source_name": source}
        try:
            rows = await self.call("knowledge_delete_source", params, IndexingError)
        finally:
            self._wrote()
        await self._acknowledged([collection])
        return int(rows[0]["deleted"])

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        rows = await self.call(
            "knowledge_list_sources",
            {"source_collection": collection},
            SearchError,
            on=Reading(collection),
        )
        return [source_from_row(r) for r in rows]

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        if page.after and not is_uuid(page.after):
            return []  # no document id comes after one that is not an id
        params = {
            "list_collection": page.collection,
            "after_id": page.after or None,
            "list_source_type": page.source_type or None,
            "list_source": page.source,
            "list_limit": page.limit,
            "list_readers": None if page.readers is None else sorted(page.readers),
        }
        rows = await self.call(
            "knowledge_list_documents", params, SearchError, on=Reading(page.collection)
        )
        return [summary_from_row(r) for r in rows]

    async def collection_stats(self) -> list[CollectionInfo]:
        rows = await self.call("knowledge_collection_stats", {}, SearchError, on=EVERY_COLLECTION)
        return [collection_from_row(r) for r in rows]

    async def readable_counts(self, principals: frozenset[str]) -> list[ReadableCount]:
        params = {"readers": sorted(principals)}
        rows = await self.call(
            "knowledge_readable_counts", params, SearchError, on=EVERY_COLLECTION
        )
        return [
            ReadableCount(r["collection"], r["source"], r["documents"], r["chunks"]) for r in rows
        ]

    # -- reads ----------------------------------------------------------------------

    async def get_by_id(self, doc_id: str) -> Document | None:
        if not is_uuid(doc_id):
            return None
        for on in self.reads_of_a_document():
            by_id = ("id", "eq", doc_id)
            rows = await self.select("knowledge_documents", DOCUMENT_COLUMNS, by_id, on=on)
            if rows:
                return await self._with_chunks(rows[0], on)
        return None

    def reads_of_a_document(self) -> tuple[Reading | None, ...]:
        """Where a document is looked for by its id, in turn until it is found (None:
        the primary)."""
        return (EVERY_COLLECTION,)

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        rows = await self.call(
            "knowledge_find_document",
            {"find_source_type": source_type, "find_key": key, "find_collection": collection},
            SearchError,
            on=Reading(collection),
        )
        return [await self._with_chunks(row, Reading(collection)) for row in named(rows, key)]

    async def _with_chunks(self, row: Row, on: Reading | None) -> Document:
        by_document = ("document_id", "eq", str(row["id"]))
        chunks = await self.select(
            "siam_vectors", CHUNK_COLUMNS, by_document, order="chunk_index", on=on
        )
        return document_from_rows(row, chunks)

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = [doc_id for doc_id in doc_ids if is_uuid(doc_id)]
        rows = await self._lookup("knowledge_documents", "id,content_hash", "id", ids)
        return {str(r["id"]): r["content_hash"] for r in rows}

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = [doc_id for doc_id in doc_ids if is_uuid(doc_id)]
        rows = await self._lookup("knowledge_documents", "id,content", "id", ids)
        return {str(r["id"]): r["content"] for r in rows}

    async def collections(self) -> dict[str, int]:
        rows = await self.call("knowledge_collections", {}, SearchError, on=EVERY_COLLECTION)
        return {r["collection"]: int(r["documents"]) for r in rows}

    async def count(self) -> int:
        return sum((await self.collections()).values())

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        last = ""
        while True:
            conditions: list[Condition] = [("collection", "eq", collection)]
            if last:
                conditions.append(("id", "gt", last))
            page = await self.select(
                "knowledge_documents", DOCUMENT_COLUMNS, *conditions, order="id", limit=100
            )
            if not page:
                return
            ids = [str(row["id"]) for row in page]
            columns = f"{CHUNK_COLUMNS},embedding"
            chunks = await self._lookup("siam_vectors", columns, "document_id", ids)
            for doc in documents_from_rows(page, chunks):
                yield doc
            last = ids[-1]

    async def health_check(self) -> dict[str, Any]:
        try:
            stats = (await self.call("knowledge_stats", {}, SearchError))[0]
        except KnowledgeStoreError as e:
            return {"backend": self.name, "status": "unavailable", "error": e.message}
        return {
            "backend": self.name,
            "status": "ok",
            **self.location(),
            "documents": int(stats["documents"]),
            "chunks": int(stats["chunks"]),
        }

    def location(self) -> dict[str, Any]:
        """Where the data lives, for /health (never a secret)."""
        return {}
