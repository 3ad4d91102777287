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

import asyncio
import math
import re
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import numpy as np

from knowledge_api.errors import (
    BackendConnectionError,
    IndexingError,
    KnowledgeStoreError,
    SearchError,
)
from knowledge_api.models import Chunk, Document, SearchFilters, SearchHit
from knowledge_api.registry import import_extra
from knowledge_api.settings import Secret
from knowledge_api.stores import records
from knowledge_api.stores.base import Candidate, HybridSearch, SearchMode, cosine_to_similarity
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.keyword import sparse_document, sparse_query

DENSE = "dense"
KEYWORDS = "keywords"
STORE_POINT = str(uuid.uuid5(uuid.NAMESPACE_URL, "knowledge-api:store"))
SERVER_FUSION_SINCE = (1, 16)
"""The first Qdrant server whose RRF takes a k, so its fusion ranks like ours."""
BATCH = 256
TIMEOUT_SECONDS = 10
RECONNECT_SECONDS = 5.0
Key = tuple[str, str]


class QdrantStore(HybridSearch):
    name = "qdrant"

    def __init__(
        self,
        path: str = "data/qdrant",
        url: str = "",
        api_key: Secret | None = None,
        prefix: str = "knowledge",
        fusion: str = "auto",
        indexed_fields: Sequence[str] = ("app_under_test",),
        tuning: SearchTuning = DEFAULT_TUNING,
        poll_seconds: float = records.POLL_SECONDS,
    ) -> None:
        self.path, self.url = path, url
        self._api_key = api_key or Secret("")
        self.prefix = records.check_prefix(prefix, "KNOWLEDGE_QDRANT_PREFIX")
        self.fusion = fusion
        self.indexed_fields = tuple(indexed_fields)
        self.tuning = tuning
        self.writes = records.Generation(poll_seconds if url else math.inf)
        self.server_version = ""
        self.server_fusion = False
        self._m: Any = None  # qdrant_client.models
        self._client: Any = None
        self._collections: set[str] = set()
        self._embedder: tuple[str, int] | None = None
        self._error = ""
        self._next_attempt = 0.0
        self._opening = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Any) -> QdrantStore:
        fields = [f.strip() for f in settings.qdrant_indexed_fields.split(",") if f.strip()]
        return cls(
            settings.qdrant_path,
            settings.qdrant_url,
            settings.qdrant_api_key,
            settings.qdrant_prefix,
            settings.qdrant_fusion,
            fields,
            SearchTuning.from_settings(settings),
        )

    @property
    def location(self) -> str:
        """The folder, or the URL without any user:password in it."""
        if not self.url:
            return self.path
        parts = urlsplit(self.url)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

    def __repr__(self) -> str:
        return f"QdrantStore({self.location!r})"

    # -- connection ---------------------------------------------------------------------

    async def open(self) -> None:
        sdk = import_extra("qdrant_client", "qdrant")
        self._m = sdk.models
        self._next_attempt = time.monotonic() + RECONNECT_SECONDS
        try:
            self._client = self._new_client(sdk)
            await self._ensure_catalog()
            meta = await self._store_record()
            self._embedder = stored_embedder(meta)
            self.writes.token = str(meta.get("generation", ""))
            if self.url:
                self.server_version = (await self._client.info()).version
            # Qdrant fuses by rank only: convex fusion (the default) is the shared one
            self.server_fusion = (
                self.fusion == "auto"
                and self.tuning.fusion == "rrf"
                and (not self.url or version_tuple(self.server_version) >= SERVER_FUSION_SINCE)
            )
        except Exception as e:
            reason = e.message if isinstance(e, KnowledgeStoreError) else str(e)
            self._error = f"cannot reach Qdrant at {self.location}: {reason}"
            await self.close()
            raise BackendConnectionError(self._error, backend=self.name) from e
        self._error = ""

    def _new_client(self, sdk: Any) -> Any:
        if self.url:
            return sdk.AsyncQdrantClient(
                url=self.url,
                api_key=self._api_key.get() or None,
                timeout=TIMEOUT_SECONDS,
                check_compatibility=False,
            )
        if self.path == ":memory:":
            return sdk.AsyncQdrantClient(location=":memory:")
        Path(self.path).mkdir(parents=True, exist_ok=True)
        if folder_in_use(Path(self.path)):
            raise BackendConnectionError(
                f"{self.path} is in use by another process: local-mode Qdrant serves one "
                "process at a time; run a Qdrant server (KNOWLEDGE_QDRANT_URL) to share it",
                backend=self.name,
            )
        return sdk.AsyncQdrantClient(path=self.path)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _ready(self) -> Any:
        """The client; reopens (at most every few seconds) after a failed open."""
        if self._client is not None:
            return self._client
        async with self._opening:  # one reconnection at a time
            if self._client is None:
                if time.monotonic() < self._next_attempt:
                    raise BackendConnectionError(
                        f"store unavailable: {self._error}", backend=self.name
                    )
                await self.open()
        return self._client

    async def _call(
        self, error: type[KnowledgeStoreError], what: str, method: str, *args: Any, **kwargs: Any
    ) -> Any:
        """Call a client method; engine failures become store errors."""
        client = await self._ready()
        try:
            return await getattr(client, method)(*args, **kwargs)
        except KnowledgeStoreError:
            raise
        except Exception as e:
            if unreachable(e):
                raise BackendConnectionError(
                    f"lost Qdrant at {self.location}: {e}", backend=self.name
                ) from e
            raise error(f"{what} failed: {e}", backend=self.name) from e

    async def _ensure_catalog(self) -> None:
        if not await self._client.collection_exists(self.prefix):
            await self._client.create_collection(self.prefix, vectors_config={})
            await self._index_fields(
                self.prefix, ("kind", "collection", "source_type", "source_id")
            )

    async def _index_fields(self, collection: str, fields: Iterable[str]) -> None:
        """Payload indexes for filtered fields; local mode has none (it scans)."""
        if not self.url:
            return
        for field in fields:
            await self._client.create_payload_index(
                collection, field, field_schema=self._m.PayloadSchemaType.KEYWORD
            )

    async def _chunks(self, collection: str, create: bool = False) -> str | None:
        """The Qdrant collection of a knowledge collection (None if it does not exist)."""
        name = records.chunk_collection(self.prefix, collection)
        if name in self._collections:
            return name
        if not await self._call(SearchError, "listing collections", "collection_exists", name):
            if not create:
                return None
            await self._create_chunks(name)
        self._collections.add(name)
        return name

    async def _create_chunks(self, name: str) -> None:
        assert self._embedder is not None
        m = self._m
        await self._call(
            IndexingError,
            "creating a collection",
            "create_collection",
            name,
            vectors_config={
                DENSE: m.VectorParams(size=self._embedder[1], distance=m.Distance.COSINE)
            },
            sparse_vectors_config={KEYWORDS: m.SparseVectorParams(modifier=m.Modifier.IDF)},
        )
        fields = ["source_type", "document_id", "content_hash"]
        await self._index_fields(
            name, [*fields, *(f"metadata.{quoted(f)}" for f in self.indexed_fields)]
        )

    async def _all_chunks(self) -> list[str]:
        found = await self._call(SearchError, "listing collections", "get_collections")
        wanted = f"{self.prefix}-"
        return sorted(c.name for c in found.collections if c.name.startswith(wanted))

    # -- generation and embedder --------------------------------------------------------

    async def _store_record(self) -> dict[str, Any]:
        found = await self._call(
            BackendConnectionError,
            "reading the store record",
            "retrieve",
            self.prefix,
            [STORE_POINT],
        )
        return dict(found[0].payload) if found else {}

    async def generation(self) -> Hashable:
        return await self.writes.current(self._read_token)

    async def _read_token(self) -> str:
        return str((await self._store_record()).get("generation", ""))

    async def _wrote(self) -> None:
        assert self._embedder is not None
        record = {
            "kind": "store",
            "embedder": self._embedder[0],
            "embedder_dimension": self._embedder[1],
            "generation": self.writes.wrote(),
        }
        point = self._m.PointStruct(id=STORE_POINT, vector={}, payload=record)
        await self._call(IndexingError, "recording the write", "upsert", self.prefix, [point])

    async def check_embedder(self, name: str, dimension: int) -> None:
        stored = stored_embedder(await self._store_record())
        records.check_same_embedder(self.location, stored, (name, dimension))
        self._embedder = (name, dimension)
        if stored is None:
            await self._wrote()

    # -- writes ---------------------------------------------------------------------------

    async def index_document(self, document: Document) -> None:
        await self.index_documents([document])

    async def index_documents(self, documents: Sequence[Document]) -> None:
        documents = records.writable(documents, self._embedder)
        if not documents:
            return
        try:
            await self._write(documents)
        finally:
            await self._wrote()

    async def _write(self, documents: Sequence[Document]) -> None:
        """Chunks first, then the stale ones go, then the catalog records: a write cut
        short keeps the old content hashes, so the next ingest writes them again."""
        m = self._m
        stamp = records.now()
        old = await self._call(
            IndexingError,
            "reading documents",
            "retrieve",
            self.prefix,
            [d.id for d in documents],
            with_payload=["created_at"],
        )
        created = {str(p.id): p.payload["created_at"] for p in old}
        by_collection: dict[str, list[Document]] = defaultdict(list)
        for doc in documents:
            by_collection[doc.collection].append(doc)
        for collection, docs in by_collection.items():
            name = await self._chunks(collection, create=True)
            points = [self._chunk_point(doc, chunk) for doc in docs for chunk in doc.chunks]
            for start in range(0, len(points), BATCH):
                part = points[start : start + BATCH]
                await self._call(IndexingError, "writing chunks", "upsert", name, part)
            replaced = [doc.id for doc in docs if doc.id in created]
            if not replaced:
                continue
            stale = m.Filter(
                must=[m.FieldCondition(key="document_id", match=m.MatchAny(any=replaced))],
                must_not=[m.HasIdCondition(has_id=[p.id for p in points])] if points else None,
            )
            await self._call(
                IndexingError,
                "removing stale chunks",
                "delete",
                name,
                m.FilterSelector(filter=stale),
            )
        catalog = [
            m.PointStruct(
                id=doc.id,
                vector={},
                payload={
                    "kind": "document",
                    **records.document_record(
                        doc, created.get(doc.id) or doc.created_at or stamp, stamp
                    ),
                    "content": doc.content,
                },
            )
            for doc in documents
        ]
        for start in range(0, len(catalog), BATCH):
            part = catalog[start : start + BATCH]
            await self._call(IndexingError, "writing documents", "upsert", self.prefix, part)

    def _chunk_point(self, doc: Document, chunk: Chunk) -> Any:
        sparse = sparse_document(chunk.embedded_text)
        payload = {
            **records.chunk_record(doc, chunk),
            "collection": doc.collection,
            "content": chunk.content,
            "metadata": doc.metadata,
        }
        vectors = {
            DENSE: np.asarray(chunk.embedding, dtype=np.float32).tolist(),
            KEYWORDS: self._m.SparseVector(indices=list(sparse), values=list(sparse.values())),
        }
        return self._m.PointStruct(id=chunk.id, vector=vectors, payload=payload)

    async def delete(self, doc_id: str) -> bool:
        if not is_uuid(doc_id):
            return False
        m = self._m
        found = await self._call(
            IndexingError, "reading a document", "retrieve", self.prefix, [doc_id]
        )
        if not found:
            return False
        name = await self._chunks(found[0].payload["collection"])
        if name is not None:
            mine = m.Filter(
                must=[m.FieldCondition(key="document_id", match=m.MatchValue(value=doc_id))]
            )
            await self._call(
                IndexingError, "deleting chunks", "delete", name, m.FilterSelector(filter=mine)
            )
        await self._call(
            IndexingError,
            "deleting a document",
            "delete",
            self.prefix,
            m.PointIdsList(points=[doc_id]),
        )
        await self._wrote()
        return True

    # -- search ---------------------------------------------------------------------------

    async def fused_candidates(
        self,
        query: str,
        vector: np.ndarray | None,
        n: int,
        filters: SearchFilters,
        mode: SearchMode,
    ) -> tuple[list[tuple[Hashable, float]], dict[Hashable, float]]:
        if not self.server_fusion or vector is None or mode != "hybrid":
            return await super().fused_candidates(query, vector, n, filters, mode)
        name = await self._chunks(filters.collection)
        if name is None:
            return [], {}
        m = self._m
        where = self._filter(filters)
        prefetch = [m.Prefetch(query=dense(vector), using=DENSE, filter=where, limit=n)]
        terms = sparse_query(query)
        if terms:
            prefetch.append(
                m.Prefetch(query=sparse(m, terms), using=KEYWORDS, filter=where, limit=n)
            )
        found = await self._call(
            SearchError,
            "hybrid search",
            "query_points",
            name,
            prefetch=prefetch,
            # Qdrant ranks from 0, we from 1
            query=m.RrfQuery(rrf=m.Rrf(k=self.tuning.fusion_k + 1)),
            query_filter=where,
            limit=2 * n,
            with_payload=False,
        )
        fused: list[tuple[Hashable, float]] = [
            ((filters.collection, str(p.id)), p.score) for p in found.points
        ]
        return fused, await self.similarities([key for key, _ in fused], vector)

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        found = await self._query(filters, dense(vector), DENSE, n)
        return [
            Candidate((filters.collection, str(p.id)), cosine_to_similarity(p.score)) for p in found
        ]

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        terms = sparse_query(query)
        if not terms:
            return []
        found = await self._query(filters, sparse(self._m, terms), KEYWORDS, n)
        return [Candidate((filters.collection, str(p.id)), p.score) for p in found]

    async def _query(self, filters: SearchFilters, query: Any, using: str, n: int) -> list[Any]:
        name = await self._chunks(filters.collection)
        if name is None:
            return []
        found = await self._call(
            SearchError,
            "search",
            "query_points",
            name,
            query=query,
            using=using,
            query_filter=self._filter(filters),
            limit=n,
            with_payload=False,
        )
        return list(found.points)

    def _filter(self, filters: SearchFilters) -> Any:
        m = self._m
        must: list[Any] = []
        if filters.source_types is not None:
            must.append(
                m.FieldCondition(
                    key="source_type", match=m.MatchAny(any=list(filters.source_types))
                )
            )
        for key, value in filters.metadata:
            if '"' in key:
                raise SearchError(f"metadata key {key!r}: Qdrant cannot filter on keys with '\"'")
            path = f"metadata.{quoted(key)}"
            if isinstance(value, bool | str):
                must.append(m.FieldCondition(key=path, match=m.MatchValue(value=value)))
            else:
                must.append(m.FieldCondition(key=path, range=m.Range(gte=value, lte=value)))
        return m.Filter(must=must) if must else None

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        """A server scores the points itself (no vectors travel); local mode, which would
        test every point against an id filter in Python, reads the vectors by id."""
        m = self._m
        scores: dict[Hashable, float] = {}
        for collection, ids in by_collection(keys).items():
            name = await self._chunks(collection)
            if name is None:
                continue
            if not self.url:
                found = await self._call(
                    SearchError, "reading vectors", "retrieve", name, ids, with_vectors=[DENSE]
                )
                for point in found:
                    cosine = float(
                        np.dot(np.asarray(point.vector[DENSE], dtype=np.float32), vector)
                    )
                    scores[(collection, str(point.id))] = cosine_to_similarity(cosine)
                continue
            scored = await self._call(
                SearchError,
                "similarity lookup",
                "query_points",
                name,
                query=dense(vector),
                using=DENSE,
                query_filter=m.Filter(must=[m.HasIdCondition(has_id=ids)]),
                limit=len(ids),
                with_payload=False,
            )
            for point in scored.points:
                scores[(collection, str(point.id))] = cosine_to_similarity(point.score)
        return scores

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        payloads: dict[Hashable, dict[str, Any]] = {}
        for collection, ids in by_collection(key for key, _ in ranked).items():
            name = await self._chunks(collection)
            if name is None:
                continue
            found = await self._call(SearchError, "reading hits", "retrieve", name, ids)
            payloads.update(((collection, str(p.id)), p.payload) for p in found)
        return [
            records.hit_from_record(
                key[1],  # type: ignore[index]
                payloads[key],
                payloads[key]["content"],
                payloads[key]["metadata"],
                score,
                similarity[key],
            )
            for key, score in ranked
            if key in payloads
        ]

    # -- reads ------------------------------------------------------------------------------

    async def get_by_id(self, doc_id: str) -> Document | None:
        if not is_uuid(doc_id):
            return None
        found = await self._call(
            SearchError, "reading a document", "retrieve", self.prefix, [doc_id]
        )
        documents = await self._documents(found)
        return documents[0] if documents else None

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        m = self._m
        where = m.Filter(
            must=[
                m.FieldCondition(key="kind", match=m.MatchValue(value="document")),
                m.FieldCondition(key="collection", match=m.MatchValue(value=collection)),
                m.FieldCondition(key="source_type", match=m.MatchValue(value=source_type)),
                m.FieldCondition(key="source_id", match=m.MatchValue(value=key)),
            ]
        )
        found, _ = await self._call(
            SearchError, "finding a document", "scroll", self.prefix, scroll_filter=where, limit=1
        )
        if found:
            return (await self._documents(found))[0]
        doc_id = key
        name = await self._chunks(collection)
        if name is not None and is_uuid(key):
            chunk = await self._call(SearchError, "finding a chunk", "retrieve", name, [key])
            doc_id = chunk[0].payload["document_id"] if chunk else key
        doc = await self.get_by_id(doc_id)
        if doc is None or doc.source_type != source_type or doc.collection != collection:
            return None
        return doc

    async def _documents(
        self, catalog: Sequence[Any], with_vectors: bool = False
    ) -> list[Document]:
        """Documents of catalog points, each with its chunks (and their vectors)."""
        m = self._m
        parts: dict[str, list[Chunk]] = defaultdict(list)
        by_name: dict[str, list[str]] = defaultdict(list)
        for point in catalog:
            by_name[point.payload["collection"]].append(str(point.id))
        for collection, doc_ids in by_name.items():
            name = await self._chunks(collection)
            if name is None:
                continue
            mine = m.Filter(
                must=[m.FieldCondition(key="document_id", match=m.MatchAny(any=doc_ids))]
            )
            async for point in self._scroll(name, mine, [DENSE] if with_vectors else False):
                chunk = records.chunk_from_record(
                    str(point.id), point.payload, point.payload["content"]
                )
                if with_vectors:
                    chunk.embedding = np.asarray(point.vector[DENSE], dtype=np.float32)
                parts[point.payload["document_id"]].append(chunk)
        return [
            records.document_from_record(p.payload, p.payload["content"], parts[str(p.id)])
            for p in catalog
        ]

    async def _scroll(self, name: str, where: Any, with_vectors: Any = False) -> AsyncIterator[Any]:
        offset = None
        while True:
            points, offset = await self._call(
                SearchError,
                "reading points",
                "scroll",
                name,
                scroll_filter=where,
                limit=BATCH,
                offset=offset,
                with_vectors=with_vectors,
            )
            for point in points:
                yield point
            if offset is None:
                return

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        ids = [doc_id for doc_id in doc_ids if is_uuid(doc_id)]
        hashes: dict[str, str] = {}
        for start in range(0, len(ids), BATCH):
            found = await self._call(
                SearchError,
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
                where = m.Filter(
                    must=[m.FieldCondition(key="content_hash", match=m.MatchAny(any=wanted))]
                )
                async for point in self._scroll(name, where, [DENSE]):
                    vectors[point.payload["content_hash"]] = np.asarray(
                        point.vector[DENSE], dtype=np.float32
                    )
        return vectors

    async def collections(self) -> dict[str, int]:
        found = await self._call(
            SearchError,
            "listing collections",
            "facet",
            self.prefix,
            key="collection",
            facet_filter=self._documents_only(),
            limit=10_000,
            exact=True,
        )
        return dict(sorted((str(hit.value), hit.count) for hit in found.hits))

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        m = self._m
        where = m.Filter(
            must=[
                m.FieldCondition(key="kind", match=m.MatchValue(value="document")),
                m.FieldCondition(key="collection", match=m.MatchValue(value=collection)),
            ]
        )
        page: list[Any] = []
        async for point in self._scroll(self.prefix, where):
            page.append(point)
            if len(page) == BATCH:
                for doc in await self._documents(page, with_vectors=True):
                    yield doc
                page = []
        for doc in await self._documents(page, with_vectors=True):
            yield doc

    def _documents_only(self) -> Any:
        m = self._m
        return m.Filter(must=[m.FieldCondition(key="kind", match=m.MatchValue(value="document"))])

    async def count(self) -> int:
        found = await self._call(
            SearchError,
            "counting documents",
            "count",
            self.prefix,
            count_filter=self._documents_only(),
            exact=True,
        )
        return int(found.count)

    async def health_check(self) -> dict[str, Any]:
        try:
            documents = await self.count()
            chunks = 0
            for name in await self._all_chunks():
                chunks += (
                    await self._call(SearchError, "counting chunks", "count", name, exact=True)
                ).count
        except KnowledgeStoreError as e:
            return {"backend": self.name, "status": "unavailable", "error": str(e)}
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


def stored_embedder(record: dict[str, Any]) -> tuple[str, int] | None:
    if "embedder" not in record:
        return None
    return str(record["embedder"]), int(record["embedder_dimension"])


def dense(vector: np.ndarray) -> list[float]:
    return np.asarray(vector, dtype=np.float32).tolist()  # type: ignore[no-any-return]


def sparse(m: Any, terms: dict[int, float]) -> Any:
    return m.SparseVector(indices=list(terms), values=list(terms.values()))


def quoted(key: str) -> str:
    """A payload key as one path segment: quoted unless it is a plain name."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def by_collection(keys: Iterable[Hashable]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for collection, point_id in cast(Iterable[Key], keys):
        grouped[collection].append(point_id)
    return grouped


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.lstrip("v").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def folder_in_use(folder: Path) -> bool:
    """Whether a local-mode client holds the folder's lock. Checked before opening,
    because the client leaks the lock file's handle when it finds the lock taken."""
    import portalocker

    lock = folder / ".lock"
    if not lock.exists():
        return False
    with lock.open("r+") as handle:
        try:
            portalocker.lock(
                handle, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            )
        except portalocker.exceptions.LockException:
            return True
        portalocker.unlock(handle)
    return False


def unreachable(error: BaseException) -> bool:
    """Whether the server cannot be reached (rather than refusing one request)."""
    import httpx
    from qdrant_client.http.exceptions import ResponseHandlingException

    if isinstance(error, ResponseHandlingException):
        error = error.source
    return isinstance(error, httpx.TransportError | ConnectionError)
