"""The Chroma store: a persistent local folder or a Chroma server.

Chunks live in one Chroma collection per knowledge collection (cosine space, HNSW),
documents in a catalog collection (see `records`). Chroma ranks by vector only, so
keyword relevance comes from a `KeywordIndex` (chroma_search.py) built from the same
chunks when the store opens and kept current by every write; writes made by another client of the
same server are noticed through the generation token and the index is rebuilt.

The client is synchronous: every call runs on a worker thread, off the event loop.
Search keys are (collection, chunk id) pairs, so a hit is read from one collection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api.config.fields import Secret
from knowledge_api.errors import (
    BackendConnectionError,
    IndexingError,
    KnowledgeStoreError,
    SearchError,
)
from knowledge_api.models import Document
from knowledge_api.registry import import_extra
from knowledge_api.stores import records
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.keyword import KeywordIndex
from knowledge_api.stores.points.chroma_points import (
    chunk_metadata,
    chunk_points,
    close_client,
    content_hashes,
    documents_by_collection,
    new_client,
    unreachable,
    vectors_by_hash,
)
from knowledge_api.stores.points.chroma_search import ChromaSearch
from knowledge_api.stores.points.engine import CatalogEntry, ChunkPoint, Record, unavailable

T = TypeVar("T")


class ChromaStore(ChromaSearch):
    name = "chroma"
    engine = "Chroma"

    def __init__(
        self,
        path: Path | str = Path("data/chroma"),
        host: str = "",
        port: int = 8000,
        ssl: bool = False,
        token: Secret | None = None,
        prefix: str = "knowledge",
        tuning: SearchTuning = DEFAULT_TUNING,
        poll_seconds: float = records.POLL_SECONDS,
    ) -> None:
        super().__init__(prefix, "KNOWLEDGE_CHROMA_PREFIX", tuning, poll_seconds)
        self.path = Path(path)
        self.host, self.port, self.ssl = host, port, ssl
        self._token = token or Secret("")
        self.keywords = KeywordIndex()
        self._sdk: Any = None
        self._client: Any = None
        self._catalog: Any = None
        self._collections: dict[str, Any] = {}

    settings_fields = "chroma_path chroma_host chroma_port chroma_ssl chroma_token chroma_prefix"

    @property
    def location(self) -> str:
        if self.host:
            return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"
        return str(self.path)

    @property
    def record_lock(self) -> Path | None:
        """Beside a local folder, which several processes may open at once."""
        return None if self.host else self.path / "knowledge-record.lock"

    # -- the primitives PointStore builds on -----------------------------------------------

    def connected(self) -> bool:
        return self._client is not None

    async def _connect(self) -> None:
        self._sdk = import_extra("chromadb", "chroma")
        self._client = await asyncio.to_thread(
            new_client, self._sdk, self.host, self.port, self.ssl, self._token, self.path
        )
        self._catalog = await asyncio.to_thread(
            self._client.get_or_create_collection, self.prefix, embedding_function=None
        )
        self._collections = {}

    async def close(self) -> None:
        await self._drop_client()

    async def _drop_client(self) -> None:
        """Close the client (a lost server's too: its pooled sockets would stay open
        until the process exits) and forget it: the next call connects again."""
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(close_client, client)

    async def _read_record(self) -> Record:
        def read() -> Record:
            catalog = self._client.get_collection(self.prefix, embedding_function=None)
            return dict(catalog.metadata or {})

        return await self._run(BackendConnectionError, "reading the store record", read)

    async def _write_record(self, record: Record) -> None:
        await self._run(
            IndexingError, "recording the write", lambda: self._catalog.modify(metadata=record)
        )

    async def _run(self, error: type[KnowledgeStoreError], what: str, call: Callable[[], T]) -> T:
        """Run a client call on a worker thread; engine failures become store errors."""
        await self._ready()
        try:
            return await asyncio.to_thread(call)
        except KnowledgeStoreError:
            raise
        except Exception as e:
            if unreachable(e):
                with contextlib.suppress(Exception):  # the lost server is what to report
                    await self._drop_client()
                raise self.lost(e) from e
            raise error(f"{what} failed: {e}", backend=self.name) from e

    def _chunks(self, collection: str, create: bool = False) -> Any:
        """The Chroma collection of a knowledge collection (None if it does not exist)."""
        found = self._collections.get(collection)
        if found is not None:
            return found
        name = records.chunk_collection(self.prefix, collection)
        if create:
            found = self._client.get_or_create_collection(
                name,
                embedding_function=None,
                metadata={"collection": collection},
                configuration={"hnsw": {"space": "cosine"}},
            )
        else:
            try:
                found = self._client.get_collection(name, embedding_function=None)
            except self._sdk.errors.NotFoundError:
                return None
        self._collections[collection] = found
        return found

    def _all_chunks(self) -> list[Any]:
        wanted = f"{self.prefix}-"
        return [c for c in self._client.list_collections() if c.name.startswith(wanted)]

    # -- writes ---------------------------------------------------------------------------

    async def _stored(self, ids: list[str]) -> dict[str, tuple[str, str]]:
        def read() -> dict[str, tuple[str, str]]:
            old = self._catalog.get(ids=ids, include=["metadatas"])
            return {
                i: (m["created_at"], m["collection"])
                for i, m in zip(old["ids"], old["metadatas"], strict=True)
            }

        return await self._run(IndexingError, "reading documents", read)

    async def _upsert_chunks(self, collection: str, documents: Sequence[Document]) -> None:
        def write() -> None:
            chunks = self._chunks(collection, create=True)
            pairs = [(doc, chunk) for doc in documents for chunk in doc.chunks]
            for part in self._batches(pairs):
                chunks.upsert(
                    ids=[chunk.id for _, chunk in part],
                    embeddings=np.stack([np.asarray(chunk.embedding) for _, chunk in part]),
                    documents=[chunk.content for _, chunk in part],
                    metadatas=[chunk_metadata(doc, chunk) for doc, chunk in part],
                )

        await self._run(IndexingError, "writing chunks", write)

    async def _drop_stale(self, collection: str, doc_ids: list[str], keep: set[str]) -> None:
        def drop() -> None:
            chunks = self._chunks(collection)
            stored = chunks.get(where={"document_id": {"$in": doc_ids}}, include=[])
            stale = [chunk_id for chunk_id in stored["ids"] if chunk_id not in keep]
            if stale:
                chunks.delete(ids=stale)

        await self._run(IndexingError, "removing stale chunks", drop)

    async def _upsert_catalog(self, entries: Sequence[CatalogEntry]) -> None:
        def write() -> None:
            for batch in self._batches(list(entries)):
                self._catalog.upsert(
                    ids=[entry.id for entry in batch],
                    embeddings=[[0.0]] * len(batch),
                    documents=[entry.content for entry in batch],
                    metadatas=[entry.record for entry in batch],
                )

        await self._run(IndexingError, "writing documents", write)

    def _batches(self, items: list[T]) -> Iterator[list[T]]:
        size = self._client.get_max_batch_size()
        for start in range(0, len(items), size):
            yield items[start : start + size]

    async def _remove(self, doc_id: str) -> str | None:
        def remove() -> str | None:
            found = self._catalog.get(ids=[doc_id], include=["metadatas"])
            if not found["ids"]:
                return None
            collection = str(found["metadatas"][0]["collection"])
            chunks = self._chunks(collection)
            if chunks is not None:
                chunks.delete(where={"document_id": doc_id})
            self._catalog.delete(ids=[doc_id])
            return collection

        return await self._run(IndexingError, f"deleting {doc_id!r}", remove)

    async def _chunk_points(
        self, collection: str, ids: list[str], vectors: bool = False
    ) -> list[ChunkPoint]:
        include = ["metadatas", "documents", *(["embeddings"] if vectors else [])]

        def read() -> list[ChunkPoint]:
            chunks = self._chunks(collection)
            if chunks is None or not ids:
                return []
            return chunk_points(chunks.get(ids=ids, include=include), vectors)

        return await self._run(SearchError, "reading chunks", read)

    # -- reads ------------------------------------------------------------------------------

    async def _document_ids(self, collection: str) -> list[str]:
        def read() -> list[str]:
            return list(self._catalog.get(where={"collection": collection}, include=[])["ids"])

        return await self._run(SearchError, "listing documents", read)

    async def _by_source(self, source_type: str, key: str, collection: str) -> list[Document]:
        where = {
            "$and": [{"collection": collection}, {"source_type": source_type}, {"source_id": key}]
        }
        return await self._documents(await self._catalog_entries(where=where))

    async def _chunk_owner(self, collection: str, chunk_id: str) -> str | None:
        def owner() -> str | None:
            chunks = self._chunks(collection)
            found = chunks.get(ids=[chunk_id], include=["metadatas"]) if chunks else {"ids": []}
            return str(found["metadatas"][0]["document_id"]) if found["ids"] else None

        return await self._run(SearchError, "finding a document", owner)

    async def _catalog_entries(
        self, ids: list[str] | None = None, **where: Any
    ) -> list[CatalogEntry]:
        def read() -> list[CatalogEntry]:
            query = {"ids": ids} if ids is not None else {"where": where["where"]}
            found = self._catalog.get(**query, include=["metadatas", "documents"])
            return [
                CatalogEntry(doc_id, record, content)
                for doc_id, record, content in zip(
                    found["ids"], found["metadatas"], found["documents"], strict=True
                )
            ]

        return await self._run(SearchError, "reading documents", read)

    async def _chunks_of(
        self, collection: str, doc_ids: list[str], vectors: bool
    ) -> list[ChunkPoint]:
        def read() -> list[Any]:
            chunks = self._chunks(collection)
            if chunks is None:
                return []
            include = ["metadatas", "documents", *(["embeddings"] if vectors else [])]
            got = chunks.get(where={"document_id": {"$in": doc_ids}}, include=include)
            return chunk_points(got, vectors)

        return await self._run(SearchError, "reading chunks", read)

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        def read() -> dict[str, str]:
            return content_hashes(self._catalog, doc_ids)

        return await self._run(SearchError, "reading content hashes", read) if doc_ids else {}

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        def read() -> dict[str, np.ndarray]:
            return vectors_by_hash(self._all_chunks(), hashes)

        return await self._run(SearchError, "reading stored vectors", read) if hashes else {}

    async def collections(self) -> dict[str, int]:
        def read() -> dict[str, int]:
            return documents_by_collection(self._all_chunks(), self._catalog)

        return await self._run(SearchError, "listing collections", read)

    async def count(self) -> int:
        return await self._run(SearchError, "counting documents", lambda: self._catalog.count())

    async def health_check(self) -> dict[str, Any]:
        def counts() -> tuple[int, int]:
            self._client.heartbeat()
            return self._catalog.count(), sum(c.count() for c in self._all_chunks())

        try:
            documents, chunks = await self._run(BackendConnectionError, "health check", counts)
        except KnowledgeStoreError as e:
            return unavailable(self.name, e)
        return {
            "backend": self.name,
            "status": "ok",
            "mode": "http" if self.host else "local",
            "location": self.location,
            "documents": documents,
            "chunks": chunks,
            "keyword_index_chunks": len(self.keywords),
        }
