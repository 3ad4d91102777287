"""The reads of the Chroma and Qdrant stores, over the primitives `PointEngine` names:
documents read back with their chunks, search hits, and the listings of the catalog
(each source's documents counted from it, its runs from the store's record).
`PointStore` (stores/points/base.py) adds the connection, the generation and the writes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Hashable, Sequence

import numpy as np

from knowledge_api.models import (
    Chunk,
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    SearchHit,
    SourceInfo,
)
from knowledge_api.stores import records
from knowledge_api.stores.fusion import cosine_to_similarity
from knowledge_api.stores.points.engine import (
    CONNECTORS,
    ROOTS,
    CatalogEntry,
    ChunkPoint,
    PointEngine,
    by_collection,
    sources_of,
)

DOCUMENT_PAGE = 100
"""Documents read (or written again) at a time."""


class PointReads(PointEngine):
    """The store protocol's reads over the primitives of `PointEngine`."""

    async def _ready(self) -> None:
        """Reopen the engine after a failure (PointStore's connection)."""
        raise NotImplementedError

    # -- sources and listings: the catalog read through; the sources' runs in the record ---

    async def _catalog_of(self, collection: str) -> list[CatalogEntry]:
        ids = sorted(await self._document_ids(collection))
        entries: list[CatalogEntry] = []
        for start in range(0, len(ids), DOCUMENT_PAGE):
            entries += await self._catalog_entries(ids[start : start + DOCUMENT_PAGE])
        return entries

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        await self._ready()
        return {
            entry.id: entry.record["source_id"]
            for entry in await self._catalog_of(collection)
            if records.source_of(entry.record) == source
        }

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        await self._ready()
        record = await self._read_record()
        runs, roots = sources_of(record), sources_of(record, ROOTS)
        connectors = sources_of(record, CONNECTORS)
        found = []
        for name in sorted(runs if collection is None else [collection]):
            owned = Counter(records.source_of(e.record) for e in await self._catalog_of(name))
            rooted, connected = roots.get(name, {}), connectors.get(name, {})
            found += [
                SourceInfo(
                    name,
                    source,
                    owned[source],
                    last_run,
                    rooted.get(source, ""),
                    connected.get(source, ""),
                )
                for source, last_run in sorted(runs.get(name, {}).items())
            ]
        return found

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        """Ids in order from the catalog, then their records read a page at a time."""
        await self._ready()
        ids = [i for i in sorted(await self._document_ids(page.collection)) if i > page.after]
        found: list[DocumentSummary] = []
        for start in range(0, len(ids), page.limit):
            for entry in sorted(
                await self._catalog_entries(ids[start : start + page.limit]), key=lambda e: e.id
            ):
                record = entry.record
                if (page.source_type and record["source_type"] != page.source_type) or (
                    page.source is not None and records.source_of(record) != page.source
                ):
                    continue
                found.append(entry.summary())
                if len(found) == page.limit:
                    return found
        return found

    async def collection_stats(self) -> list[CollectionInfo]:
        await self._ready()
        runs = sources_of(await self._read_record())
        found = []
        for name in sorted(set(await self.collections()) | set(runs)):
            entries = await self._catalog_of(name)
            updated = [e.record["updated_at"] for e in entries] + list(runs.get(name, {}).values())
            found.append(
                CollectionInfo(
                    name,
                    len(entries),
                    sum(int(e.record["chunk_count"]) for e in entries),
                    len(runs.get(name, {})),
                    max(updated, default=""),
                )
            )
        return found

    # -- search and reads -------------------------------------------------------------------

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        scores: dict[Hashable, float] = {}
        for collection, ids in by_collection(keys).items():
            for point in await self._chunk_points(collection, ids, vectors=True):
                cosine = float(np.dot(np.asarray(point.vector, dtype=np.float32), vector))
                scores[(collection, point.id)] = cosine_to_similarity(cosine)
        return scores

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        found: dict[Hashable, ChunkPoint] = {}
        for collection, ids in by_collection(key for key, _ in ranked).items():
            for point in await self._chunk_points(collection, ids):
                found[(collection, point.id)] = point
        hits = []
        for key, score in ranked:
            if key in found:
                hit = found[key].hit(score, similarity[key])
                hit.collection = key[0]  # type: ignore[index]
                hits.append(hit)
        return hits

    async def _documents_by_id(self, ids: list[str], vectors: bool = False) -> list[Document]:
        """The documents with these ids (those that exist), each with its chunks."""
        return await self._documents(await self._catalog_entries(ids), vectors)

    async def _documents(
        self, catalog: Sequence[CatalogEntry], vectors: bool = False
    ) -> list[Document]:
        parts: dict[str, list[Chunk]] = defaultdict(list)
        by_name: dict[str, list[str]] = defaultdict(list)
        for entry in catalog:
            by_name[entry.record["collection"]].append(entry.id)
        for collection, doc_ids in by_name.items():
            for point in await self._chunks_of(collection, doc_ids, vectors):
                parts[point.record["document_id"]].append(point.chunk())
        return [
            records.document_from_record(entry.record, entry.content, parts[entry.id])
            for entry in catalog
        ]

    async def get_by_id(self, doc_id: str) -> Document | None:
        found = await self._documents_by_id([doc_id])
        return found[0] if found else None

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return {doc.id: doc.content for doc in await self._documents_by_id(list(doc_ids))}

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        ids = sorted(await self._document_ids(collection))
        for start in range(0, len(ids), DOCUMENT_PAGE):
            page = await self._documents_by_id(ids[start : start + DOCUMENT_PAGE], vectors=True)
            for doc in sorted(page, key=lambda d: d.id):
                yield doc

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        """By source id first, then by document id or the id of one of its chunks."""
        await self._ready()
        found = await self._by_source(source_type, key, collection)
        if found:
            return sorted(found, key=lambda doc: doc.source)
        owner = await self._chunk_owner(collection, key)
        doc = await self.get_by_id(owner or key)
        if doc is None or doc.source_type != source_type or doc.collection != collection:
            return []
        return [doc]
