"""Chroma's side of the Chroma store: its client made and closed, the chunks of its
answers and of the catalog's, and the metadata a chunk is stored with (see `records`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api import facets
from knowledge_api.config.fields import Secret
from knowledge_api.facets import Facets
from knowledge_api.models import Chunk, Document
from knowledge_api.stores import records
from knowledge_api.stores.keyword import KeywordEntry
from knowledge_api.stores.points.chroma_filter import META_PREFIX, chunk_fields
from knowledge_api.stores.points.engine import ChunkPoint

GetResult = dict[str, Any]
PAGE = 1000
"""Ids or hashes per `get`, and chunks per page when the keyword index is rebuilt."""


def new_client(sdk: Any, host: str, port: int, ssl: bool, token: Secret, path: Path) -> Any:
    """An HTTP client of the server at `host`, or a persistent client of `path`."""
    config = sdk.config.Settings(anonymized_telemetry=False)
    if host:
        headers = {"Authorization": f"Bearer {token.get()}"} if token else None
        return sdk.HttpClient(host=host, port=port, ssl=ssl, headers=headers, settings=config)
    path.mkdir(parents=True, exist_ok=True)
    return sdk.PersistentClient(path=str(path), settings=config)


def keyword_entries(chunk_collections: Iterable[Any]) -> list[KeywordEntry]:
    """Every chunk stored in these Chroma collections, as the keyword index holds it."""
    entries: list[KeywordEntry] = []
    for chunks in chunk_collections:
        collection = (chunks.metadata or {}).get("collection", "")
        for offset in range(0, chunks.count(), PAGE):
            got = chunks.get(limit=PAGE, offset=offset)
            entries.extend(
                KeywordEntry.of(
                    p.chunk(), collection, p.record["source_type"], p.metadata, p.record
                )
                for p in chunk_points(got, vectors=False)
            )
    return entries


def content_hashes(catalog: Any, doc_ids: Sequence[str]) -> dict[str, str]:
    """The content hash of each of these documents the catalog holds."""
    hashes = {}
    for start in range(0, len(doc_ids), PAGE):
        got = catalog.get(ids=list(doc_ids[start : start + PAGE]), include=["metadatas"])
        for doc_id, meta in zip(got["ids"], got["metadatas"], strict=True):
            hashes[doc_id] = str(meta["content_hash"])
    return hashes


def vectors_by_hash(
    chunk_collections: Iterable[Any], hashes: Sequence[str]
) -> dict[str, np.ndarray]:
    """The stored vector of each of these chunk hashes found in these collections."""
    vectors: dict[str, np.ndarray] = {}
    for chunks in chunk_collections:
        for start in range(0, len(hashes), PAGE):
            where = {"content_hash": {"$in": list(hashes[start : start + PAGE])}}
            got = chunks.get(where=where, include=["metadatas", "embeddings"])
            for meta, embedding in zip(got["metadatas"], got["embeddings"], strict=True):
                vectors[meta["content_hash"]] = np.asarray(embedding, dtype=np.float32)
    return vectors


def chunk_points(got: GetResult, vectors: bool) -> list[ChunkPoint]:
    """The chunks of a Chroma `get` answer (with embeddings when `vectors`)."""
    return [
        ChunkPoint(
            chunk_id,
            meta,
            got["documents"][i],
            json.loads(meta["metadata"]),
            np.asarray(got["embeddings"][i], dtype=np.float32) if vectors else None,
        )
        for i, (chunk_id, meta) in enumerate(zip(got["ids"], got["metadatas"], strict=True))
    ]


def documents_by_collection(chunk_collections: Iterable[Any], catalog: Any) -> dict[str, int]:
    """The documents the `catalog` holds in each knowledge collection that has chunks."""
    counts = {}
    for chunks in chunk_collections:
        name = (chunks.metadata or {}).get("collection", "")
        ids = catalog.get(where={"collection": name}, include=[])["ids"]
        if ids:
            counts[name] = len(ids)
    return dict(sorted(counts.items()))


def counted_facets(
    searched: list[Any], where: dict[str, Any] | None, fields: tuple[str, ...]
) -> Facets:
    """The facets of every chunk of the `searched` Chroma collections (None for one that
    does not exist) that `where` passes, read a page at a time."""
    passages: list[dict[str, Any]] = []
    for chunks in (found for found in searched if found is not None):
        for offset in itertools.count(0, PAGE):
            got = chunks.get(where=where, include=["metadatas"], limit=PAGE, offset=offset)
            passages.extend(facet_fields(meta) for meta in got["metadatas"])
            if len(got["ids"]) < PAGE:
                break
    return facets.count(fields, passages)


def facet_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """A chunk's fields as facets count them: its metadata and its own."""
    fields = {k[len(META_PREFIX) :]: v for k, v in meta.items() if k.startswith(META_PREFIX)}
    return {**fields, "source_type": meta["source_type"], "source_id": meta["source_id"]}


def chunk_metadata(doc: Document, chunk: Chunk) -> dict[str, Any]:
    """Chunk fields, the document metadata as JSON, and what Chroma's `where` filters
    on (`chroma_filter.chunk_fields`)."""
    return {
        **records.chunk_record(doc, chunk),
        "metadata": json.dumps(doc.metadata),
        **chunk_fields(doc),
    }


def close_client(client: Any) -> None:
    """Close a client and, for the HTTP client, the connection pools it leaves open."""
    sessions = [
        getattr(getattr(owner, "_server", None), "_session", None)
        for owner in (client, getattr(client, "_admin_client", None))
    ]
    client.close()
    for session in sessions:
        if session is not None:
            session.close()


def unreachable(error: BaseException) -> bool:
    """Whether the server cannot be reached (rather than refusing one request)."""
    import httpx

    return isinstance(error, httpx.TransportError | ConnectionError)
