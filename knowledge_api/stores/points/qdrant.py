"""The Qdrant store: local mode (a folder, or `:memory:`) or a Qdrant server.

Chunks live in one Qdrant collection per knowledge collection, each point with two
named vectors: `dense` (the embedding, cosine) and `keywords` (BM25 term weights,
with Qdrant's IDF modifier), so Qdrant ranks both sides of hybrid search itself.
Documents and the store's own record (embedder, generation token) live in a catalog
collection without vectors (see `records`).

With KNOWLEDGE_FUSION=rrf, hybrid search runs as one Qdrant fusion query (both
prefetches fused by RRF with our k) where Qdrant accepts a parametrised RRF: local mode
and servers from 1.16. The default convex fusion needs each candidate's cosine and
keyword score, which Qdrant's fusion query does not combine that way, so it (like older
servers and KNOWLEDGE_QDRANT_FUSION=shared) uses the shared fusion of `HybridSearch`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from knowledge_api.config.fields import Secret
from knowledge_api.errors import (
    BackendConnectionError,
    ConfigurationError,
    KnowledgeStoreError,
)
from knowledge_api.models import Document
from knowledge_api.registry import import_extra
from knowledge_api.stores import records
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.points.engine import CatalogEntry, ChunkPoint, Record, unavailable
from knowledge_api.stores.points.qdrant_calls import BATCH
from knowledge_api.stores.points.qdrant_points import (
    DENSE,
    catalog_entry,
    catalog_struct,
    chunk_point,
    chunk_struct,
    documents_only,
    match,
    match_any,
    new_client,
    version_tuple,
    without_credentials,
)
from knowledge_api.stores.points.qdrant_search import QdrantSearch
from knowledge_api.stores.records import is_uuid

STORE_POINT = str(uuid.uuid5(uuid.NAMESPACE_URL, "knowledge-api:store"))
SERVER_FUSION_SINCE = (1, 16)
"""The first Qdrant server whose RRF takes a k, so its fusion ranks like ours."""
SOURCES_NAMING = 1000
"""At most this many documents of one source id are read back (one per source)."""


class QdrantStore(QdrantSearch):
    """The store: its settings, its record and the primitives `PointStore` builds on."""

    name = "qdrant"
    engine = "Qdrant"

    def __init__(
        self,
        path: str = "data/qdrant",
        url: str = "",
        api_key: Secret | None = None,
        prefix: str = "knowledge",
        fusion: str = "auto",
        indexed_fields: Sequence[str] | str = ("app_under_test",),
        shards: int = 0,
        replication: int = 0,
        write_consistency: int = 0,
        read_consistency: str = "",
        tuning: SearchTuning = DEFAULT_TUNING,
        poll_seconds: float = records.POLL_SECONDS,
    ) -> None:
        super().__init__(
            prefix, "KNOWLEDGE_QDRANT_PREFIX", tuning, poll_seconds if url else math.inf
        )
        self.path, self.url = path, url
        self._api_key = api_key or Secret("")
        self.fusion = fusion
        if isinstance(indexed_fields, str):  # the comma-separated setting
            indexed_fields = [f.strip() for f in indexed_fields.split(",") if f.strip()]
        self.indexed_fields = tuple(indexed_fields)
        if write_consistency > max(replication, 1):
            raise ConfigurationError(
                f"KNOWLEDGE_QDRANT_WRITE_CONSISTENCY ({write_consistency}) must be at most "
                f"KNOWLEDGE_QDRANT_REPLICATION ({replication or 'the default, 1'}): a write "
                "cannot wait for more copies than a shard has"
            )
        self.cluster = {
            name: value
            for name, value in (
                ("shard_number", shards),
                ("replication_factor", replication),
                ("write_consistency_factor", write_consistency),
            )
            if value
        }
        """How the collections the store creates are spread over a cluster (what is
        left out is the server's default)."""
        self.read_consistency = read_consistency
        self.server_version = ""
        self.server_fusion = False
        self._m: Any = None  # qdrant_client.models
        self._client: Any = None
        self._collections: set[str] = set()

    settings_fields = (
        "qdrant_path qdrant_url qdrant_api_key qdrant_prefix qdrant_fusion qdrant_indexed_fields "
        "qdrant_shards qdrant_replication qdrant_write_consistency qdrant_read_consistency"
    )

    @property
    def location(self) -> str:
        """The folder, or the URL without any user:password in it."""
        return without_credentials(self.url) if self.url else self.path

    # -- the primitives PointStore builds on -----------------------------------------------

    def connected(self) -> bool:
        return self._client is not None

    async def _connect(self) -> None:
        sdk = import_extra("qdrant_client", "qdrant")
        self._m = sdk.models
        self._client = new_client(sdk, self.url, self._api_key, self.path)
        if not await self._client.collection_exists(self.prefix):
            await self._client.create_collection(self.prefix, vectors_config={}, **self.cluster)
            fields = ("kind", "collection", "source_type", "source_id")
            await self._index_fields(self.prefix, fields)

    async def _opened(self, record: Record) -> None:
        if self.url:
            self.server_version = (await self._client.info()).version
        # Qdrant fuses by rank only: convex fusion (the default) is the shared one
        self.server_fusion = (
            self.fusion == "auto"
            and self.tuning.fusion == "rrf"
            and (not self.url or version_tuple(self.server_version) >= SERVER_FUSION_SINCE)
        )

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _read_record(self) -> Record:
        found = await self._call(
            BackendConnectionError,
            "reading the store record",
            "retrieve",
            self.prefix,
            [STORE_POINT],
        )
        return dict(found[0].payload) if found else {}

    async def _write_record(self, record: Record) -> None:
        payload = {"kind": "store", **record}
        point = self._m.PointStruct(id=STORE_POINT, vector={}, payload=payload)
        await self._change("recording the write", "upsert", self.prefix, [point])

    # -- writes ---------------------------------------------------------------------------

    async def _stored(self, ids: list[str]) -> dict[str, tuple[str, str]]:
        old = await self._read(
            "reading documents",
            "retrieve",
            self.prefix,
            ids,
            with_payload=["created_at", "collection"],
        )
        return {str(p.id): (p.payload["created_at"], p.payload["collection"]) for p in old}

    async def _upsert_chunks(self, collection: str, documents: Sequence[Document]) -> None:
        name = await self._chunks(collection, create=True)
        points = [chunk_struct(self._m, doc, chunk) for doc in documents for chunk in doc.chunks]
        for start in range(0, len(points), BATCH):
            await self._change("writing chunks", "upsert", name, points[start : start + BATCH])

    async def _drop_stale(self, collection: str, doc_ids: list[str], keep: set[str]) -> None:
        m = self._m
        stale = m.Filter(
            must=[match_any(m, "document_id", doc_ids)],
            must_not=[m.HasIdCondition(has_id=list(keep))] if keep else None,
        )
        name = await self._chunks(collection)
        await self._change("removing stale chunks", "delete", name, m.FilterSelector(filter=stale))

    async def _upsert_catalog(self, entries: Sequence[CatalogEntry]) -> None:
        points = [catalog_struct(self._m, entry) for entry in entries]
        for start in range(0, len(points), BATCH):
            part = points[start : start + BATCH]
            await self._change("writing documents", "upsert", self.prefix, part)

    async def _remove(self, doc_id: str) -> str | None:
        if not is_uuid(doc_id):
            return None
        m = self._m
        found = await self._change("reading a document", "retrieve", self.prefix, [doc_id])
        if not found:
            return None
        collection = str(found[0].payload["collection"])
        name = await self._chunks(collection)
        if name is not None:
            mine = m.Filter(must=[match(m, "document_id", doc_id)])
            await self._change("deleting chunks", "delete", name, m.FilterSelector(filter=mine))
        await self._change(
            "deleting a document",
            "delete",
            self.prefix,
            m.PointIdsList(points=[doc_id]),
        )
        return collection

    async def _chunk_points(
        self, collection: str, ids: list[str], vectors: bool = False
    ) -> list[ChunkPoint]:
        name = await self._chunks(collection)
        if name is None or not ids:
            return []
        found = await self._read(
            "reading chunks", "retrieve", name, ids, with_vectors=vectors and [DENSE]
        )
        return [chunk_point(point, vectors) for point in found]

    # -- reads ------------------------------------------------------------------------------

    async def _catalog_entries(self, ids: list[str]) -> list[CatalogEntry]:
        ids = [doc_id for doc_id in ids if is_uuid(doc_id)]
        if not ids:
            return []
        found = await self._read("reading documents", "retrieve", self.prefix, ids)
        return [catalog_entry(point) for point in found]

    async def _document_ids(self, collection: str) -> list[str]:
        where = self._m.Filter(
            must=[match(self._m, "kind", "document"), match(self._m, "collection", collection)]
        )
        return [str(point.id) async for point in self._scroll(self.prefix, where)]

    async def _by_source(self, source_type: str, key: str, collection: str) -> list[Document]:
        m = self._m
        where = m.Filter(
            must=[
                match(m, "kind", "document"),
                match(m, "collection", collection),
                match(m, "source_type", source_type),
                match(m, "source_id", key),
            ]
        )
        found, _ = await self._read(
            "finding a document", "scroll", self.prefix, scroll_filter=where, limit=SOURCES_NAMING
        )
        return await self._documents([catalog_entry(point) for point in found])

    async def _chunk_owner(self, collection: str, chunk_id: str) -> str | None:
        name = await self._chunks(collection)
        if name is None or not is_uuid(chunk_id):
            return None
        chunk = await self._read("finding a chunk", "retrieve", name, [chunk_id])
        return str(chunk[0].payload["document_id"]) if chunk else None

    async def _chunks_of(
        self, collection: str, doc_ids: list[str], vectors: bool
    ) -> list[ChunkPoint]:
        name = await self._chunks(collection)
        if name is None:
            return []
        mine = self._m.Filter(must=[match_any(self._m, "document_id", doc_ids)])
        return [
            chunk_point(point, vectors)
            async for point in self._scroll(name, mine, vectors and [DENSE])
        ]

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = [doc_id for doc_id in doc_ids if is_uuid(doc_id)]
        hashes: dict[str, str] = {}
        for start in range(0, len(ids), BATCH):
            found = await self._read(
                "reading content hashes",
                "retrieve",
                self.prefix,
                ids[start : start + BATCH],
                with_payload=["content_hash"],
            )
            hashes.update((str(p.id), str(p.payload["content_hash"])) for p in found)
        return hashes

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        m = self._m
        vectors: dict[str, np.ndarray] = {}
        if not hashes:
            return vectors
        for name in await self._all_chunks():
            for start in range(0, len(hashes), BATCH):
                wanted = list(hashes[start : start + BATCH])
                where = m.Filter(must=[match_any(m, "content_hash", wanted)])
                async for point in self._scroll(name, where, [DENSE]):
                    found = chunk_point(point, vectors=True)
                    vectors[found.record["content_hash"]] = np.asarray(found.vector)
        return vectors

    async def collections(self) -> dict[str, int]:
        found = await self._read(
            "listing collections",
            "facet",
            self.prefix,
            key="collection",
            facet_filter=documents_only(self._m),
            limit=10_000,
            exact=True,
        )
        return dict(sorted((str(hit.value), hit.count) for hit in found.hits))

    async def count(self) -> int:
        found = await self._read(
            "counting documents",
            "count",
            self.prefix,
            count_filter=documents_only(self._m),
            exact=True,
        )
        return int(found.count)

    async def health_check(self) -> dict[str, Any]:
        try:
            documents = await self.count()
            chunks = 0
            for name in await self._all_chunks():
                chunks += (await self._read("counting chunks", "count", name, exact=True)).count
        except KnowledgeStoreError as e:
            return unavailable(self.name, e)
        health = {
            "backend": self.name,
            "status": "ok",
            "mode": "server" if self.url else "local",
            "location": self.location,
            "documents": documents,
            "chunks": chunks,
            "fusion": "qdrant" if self.server_fusion else "shared",
        }
        if self.server_version:
            health["server_version"] = self.server_version
        return health
