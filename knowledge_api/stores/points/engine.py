"""What a Chroma or Qdrant store provides for `PointStore` (stores/points/base.py) to
build the store protocol on: the engine's collections of points read and written a few
ways, and the shapes those points come back in."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from knowledge_api.errors import KnowledgeStoreError
from knowledge_api.models import Chunk, Document, DocumentSummary, Metadata, SearchHit
from knowledge_api.stores import records
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.stores.tables.beside import BesideTheFile

Record = dict[str, Any]
Key = tuple[str, str]
"""A search key: (knowledge collection, chunk id)."""


@dataclass(frozen=True, slots=True)
class ChunkPoint:
    """A chunk as its engine keeps it: its fields (see `records.chunk_record`), text,
    the document's metadata and, when asked for, its vector."""

    id: str
    record: Record
    content: str
    metadata: Metadata
    vector: np.ndarray | None = None

    def chunk(self) -> Chunk:
        chunk = records.chunk_from_record(self.id, self.record, self.content)
        chunk.embedding = self.vector
        return chunk

    def hit(self, score: float, similarity: float) -> SearchHit:
        return records.hit_from_record(
            self.id, self.record, self.content, self.metadata, score, similarity
        )


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """A document as the catalog keeps it (see `records.document_record`)."""

    id: str
    record: Record
    content: str

    def summary(self) -> DocumentSummary:
        return records.summary_of(self.record, self.id, int(self.record["chunk_count"]))


SOURCES = "sources"
"""The key of the store record holding each source's last run, as JSON:
{collection: {source: timestamp}}."""


COLLECTIONS = "collection_generations"
"""The key of the store record holding the token of the last write that touched each
collection, as JSON: {collection: token}."""


def collection_tokens(record: Record) -> dict[str, str]:
    return cast(dict[str, str], json.loads(record.get(COLLECTIONS) or "{}"))


ROOTS = "source_roots"
"""The key of the store record holding where each source reads its files, as JSON:
{collection: {source: folder or base URL}}."""


CONNECTORS = "source_connectors"
"""The key of the store record holding each connector source's record, as JSON:
{collection: {source: the connector's JSON}}."""


LEASES = "source_leases"
"""The key of the store record holding who syncs each source and until when, as JSON:
{collection: {source: "holder|until"}}."""


def sources_of(record: Record, key: str = SOURCES) -> dict[str, dict[str, str]]:
    found = json.loads(record.get(key) or "{}")
    return cast(dict[str, dict[str, str]], found)


def by_collection(keys: Iterable[Hashable]) -> dict[str, list[str]]:
    """Chunk ids of search keys, by collection."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for collection, chunk_id in cast(Iterable[Key], keys):
        grouped[collection].append(chunk_id)
    return grouped


def unavailable(name: str, error: KnowledgeStoreError) -> dict[str, Any]:
    """The /health line of a store that cannot answer."""
    return {"backend": name, "status": "unavailable", "error": str(error)}


class PointEngine(HybridSearch, BesideTheFile):
    """The primitives each engine provides, and the hooks it may fill."""

    name = "points"
    engine = "the engine"
    """How errors name the engine: Chroma, Qdrant."""

    @property
    def location(self) -> str:
        """Where the points live, for errors and /health (never a secret)."""
        raise NotImplementedError

    @property
    def record_lock(self) -> Path | None:
        """The file whose lock guards the store record's read and write across the
        processes of this machine (record_lock.py): None where the engine lets one
        process open the store (a local Qdrant folder) or the store is a server's, which
        offers none."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    # -- primitives, provided by the backends ---------------------------------------------

    def connected(self) -> bool:
        raise NotImplementedError

    async def _connect(self) -> None:
        """Open the client and make sure the catalog exists."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def _read_record(self) -> Record:
        """The store's own record (empty before the first write)."""
        raise NotImplementedError

    async def _write_record(self, record: Record) -> None:
        raise NotImplementedError

    async def _stored(self, ids: list[str]) -> dict[str, tuple[str, str]]:
        """When each of these documents was first stored and its collection (those that are)."""
        raise NotImplementedError

    async def _upsert_chunks(self, collection: str, documents: Sequence[Document]) -> None:
        """Write the chunks of `documents` (with their vectors) into `collection`."""
        raise NotImplementedError

    async def _drop_stale(self, collection: str, doc_ids: list[str], keep: set[str]) -> None:
        """Delete the chunks of `doc_ids` whose ids are not in `keep`."""
        raise NotImplementedError

    async def _upsert_catalog(self, entries: Sequence[CatalogEntry]) -> None:
        raise NotImplementedError

    async def _remove(self, doc_id: str) -> str | None:
        """Delete a document's chunks, then its catalog record; its collection, None if
        there is none."""
        raise NotImplementedError

    async def _by_source(self, source_type: str, key: str, collection: str) -> list[Document]:
        """The documents of `collection` with this source type and source id (one per source)."""
        raise NotImplementedError

    async def _chunk_owner(self, collection: str, chunk_id: str) -> str | None:
        """The id of the document a chunk of `collection` belongs to."""
        raise NotImplementedError

    async def _chunk_points(
        self, collection: str, ids: list[str], vectors: bool = False
    ) -> list[ChunkPoint]:
        """The chunks of `collection` with these ids (those that exist)."""
        raise NotImplementedError

    async def _catalog_entries(self, ids: list[str]) -> list[CatalogEntry]:
        """The catalog entries of these document ids (those that exist)."""
        raise NotImplementedError

    async def _chunks_of(
        self, collection: str, doc_ids: list[str], vectors: bool
    ) -> list[ChunkPoint]:
        """Every chunk of these documents of `collection`."""
        raise NotImplementedError

    async def _document_ids(self, collection: str) -> list[str]:
        raise NotImplementedError

    async def collections(self) -> dict[str, int]:
        raise NotImplementedError

    async def _opened(self, record: Record) -> None:
        """After a successful open (e.g. rebuild what mirrors the engine)."""

    async def _changed(self) -> None:
        """Another client wrote since we last looked."""

    def _indexed(self, documents: Sequence[Document]) -> None:
        """Our own write of `documents` succeeded."""

    def _deleted(self, doc_id: str) -> None:
        """Our own delete of `doc_id` succeeded."""
