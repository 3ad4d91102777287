"""Qdrant's data model as the Qdrant store uses it: points, payload filters, vectors
of queries, and facts about the engine (server version, local folder lock)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.errors import SearchError
from knowledge_api.models import Chunk, Document, SearchFilters
from knowledge_api.stores import records
from knowledge_api.stores.keyword import sparse_document
from knowledge_api.stores.points import CatalogEntry, ChunkPoint

DENSE = "dense"
KEYWORDS = "keywords"


def chunk_struct(m: Any, doc: Document, chunk: Chunk) -> Any:
    """A chunk as a point: its dense and BM25 vectors, and its payload."""
    sparse = sparse_document(chunk.embedded_text)
    payload = {
        **records.chunk_record(doc, chunk),
        "collection": doc.collection,
        "content": chunk.content,
        "metadata": doc.metadata,
    }
    vectors = {
        DENSE: np.asarray(chunk.embedding, dtype=np.float32).tolist(),
        KEYWORDS: m.SparseVector(indices=list(sparse), values=list(sparse.values())),
    }
    return m.PointStruct(id=chunk.id, vector=vectors, payload=payload)


def search_filter(m: Any, filters: SearchFilters) -> Any:
    """The payload filter of a search's source types and metadata values."""
    must: list[Any] = []
    if filters.source_types is not None:
        must.append(
            m.FieldCondition(key="source_type", match=m.MatchAny(any=list(filters.source_types)))
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


def dense(vector: np.ndarray) -> list[float]:
    return np.asarray(vector, dtype=np.float32).tolist()  # type: ignore[no-any-return]


def sparse(m: Any, terms: dict[int, float]) -> Any:
    return m.SparseVector(indices=list(terms), values=list(terms.values()))


def quoted(key: str) -> str:
    """A payload key as one path segment: quoted unless it is a plain name."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def chunk_point(point: Any, vectors: bool) -> ChunkPoint:
    payload = point.payload
    vector = np.asarray(point.vector[DENSE], dtype=np.float32) if vectors else None
    return ChunkPoint(str(point.id), payload, payload["content"], payload["metadata"], vector)


def catalog_entry(point: Any) -> CatalogEntry:
    return CatalogEntry(str(point.id), point.payload, point.payload["content"])


def match(m: Any, key: str, value: Any) -> Any:
    """The condition that payload `key` equals `value`."""
    return m.FieldCondition(key=key, match=m.MatchValue(value=value))


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
