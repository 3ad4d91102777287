"""Qdrant's data model as the Qdrant store uses it: the client, collections of points,
payload filters, vectors of queries, and facts about the engine (server version, local
folder lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError
from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.stores import records
from knowledge_api.stores.keyword import sparse_document, sparse_query
from knowledge_api.stores.points.engine import CatalogEntry, ChunkPoint
from knowledge_api.stores.points.qdrant_filter import chunk_fields, payload_filter

DENSE = "dense"
KEYWORDS = "keywords"
TIMEOUT_SECONDS = 10


def new_client(sdk: Any, url: str, api_key: Secret, path: str) -> Any:
    """A client of the server at `url`, or of local mode in `path` (or in memory)."""
    if url:
        return sdk.AsyncQdrantClient(
            url=url,
            api_key=api_key.get() or None,
            timeout=TIMEOUT_SECONDS,
            check_compatibility=False,
        )
    if path == ":memory:":
        return sdk.AsyncQdrantClient(location=":memory:")
    Path(path).mkdir(parents=True, exist_ok=True)
    if folder_in_use(Path(path)):
        raise BackendConnectionError(
            f"{path} is in use by another process: local-mode Qdrant serves one "
            "process at a time; run a Qdrant server (KNOWLEDGE_QDRANT_URL) to share it",
            backend="qdrant",
        )
    return sdk.AsyncQdrantClient(path=path)


def fusion_query(m: Any, query: str, vector: np.ndarray, where: Any, n: int) -> dict[str, Any]:
    """A hybrid query's prefetches (the best n by vector, and by keyword when the query
    has terms), its filter and limit; the caller names the fusion."""
    prefetch = [m.Prefetch(query=dense(vector), using=DENSE, filter=where, limit=n)]
    terms = sparse_query(query)
    if terms:
        prefetch.append(m.Prefetch(query=sparse(m, terms), using=KEYWORDS, filter=where, limit=n))
    return {"prefetch": prefetch, "query_filter": where, "limit": 2 * n, "with_payload": False}


def chunk_vectors(m: Any, dimension: int) -> dict[str, Any]:
    """The vectors of a chunk collection: dense (cosine) and BM25 (Qdrant's IDF)."""
    return {
        "vectors_config": {DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE)},
        "sparse_vectors_config": {KEYWORDS: m.SparseVectorParams(modifier=m.Modifier.IDF)},
    }


def chunk_struct(m: Any, doc: Document, chunk: Chunk) -> Any:
    """A chunk as a point: its dense and BM25 vectors, and its payload."""
    sparse = sparse_document(chunk.embedded_text)
    payload = {
        **records.chunk_record(doc, chunk),
        "collection": doc.collection,
        "content": chunk.content,
        "metadata": doc.metadata,
        **chunk_fields(doc),
    }
    vectors = {
        DENSE: np.asarray(chunk.embedding, dtype=np.float32).tolist(),
        KEYWORDS: m.SparseVector(indices=list(sparse), values=list(sparse.values())),
    }
    return m.PointStruct(id=chunk.id, vector=vectors, payload=payload)


def catalog_struct(m: Any, entry: CatalogEntry) -> Any:
    """A document of the catalog as a point without vectors: its record and text."""
    payload = {"kind": "document", **entry.record, "content": entry.content}
    return m.PointStruct(id=entry.id, vector={}, payload=payload)


def search_filter(m: Any, filters: SearchFilters) -> Any:
    """The payload filter of a search's source types and filter tree (None: none)."""
    parts: list[Any] = []
    if filters.source_types is not None:
        types = m.MatchAny(any=list(filters.source_types))
        parts.append(m.FieldCondition(key="source_type", match=types))
    if filters.where is not None:
        parts.append(payload_filter(m, filters.where))
    if any(part is False for part in parts):
        return m.Filter(must=[m.HasIdCondition(has_id=[])])  # no point passes
    kept = [part for part in parts if part is not True]
    return m.Filter(must=kept) if kept else None


def dense(vector: np.ndarray) -> list[float]:
    return np.asarray(vector, dtype=np.float32).tolist()  # type: ignore[no-any-return]


def sparse(m: Any, terms: dict[int, float]) -> Any:
    return m.SparseVector(indices=list(terms), values=list(terms.values()))


def chunk_point(point: Any, vectors: bool) -> ChunkPoint:
    payload = point.payload
    vector = np.asarray(point.vector[DENSE], dtype=np.float32) if vectors else None
    return ChunkPoint(str(point.id), payload, payload["content"], payload["metadata"], vector)


def catalog_entry(point: Any) -> CatalogEntry:
    return CatalogEntry(str(point.id), point.payload, point.payload["content"])


def match(m: Any, key: str, value: Any) -> Any:
    """The condition that payload `key` equals `value`."""
    return m.FieldCondition(key=key, match=m.MatchValue(value=value))


def documents_only(m: Any) -> Any:
    """The filter of the catalog's documents (not the store's own record)."""
    return m.Filter(must=[match(m, "kind", "document")])


def match_any(m: Any, key: str, values: list[str]) -> Any:
    """The condition that payload `key` is one of `values`."""
    return m.FieldCondition(key=key, match=m.MatchAny(any=values))


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.lstrip("v").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def without_credentials(url: str) -> str:
    """A server's URL without any user:password in it."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


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
