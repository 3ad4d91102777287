"""The Qdrant client as the store calls it: every call through one place, which turns
engine failures into store errors and adds the read consistency; the engine collection
of each knowledge collection, found or created with its vectors and payload indexes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from knowledge_api.errors import IndexingError, KnowledgeStoreError, SearchError
from knowledge_api.stores import records
from knowledge_api.stores.points.base import PointStore
from knowledge_api.stores.points.qdrant_filter import quoted
from knowledge_api.stores.points.qdrant_points import chunk_vectors, unreachable

BATCH = 256
"""Points written, or read by a scroll, at a time."""
READS = frozenset({"query_points", "scroll", "retrieve", "facet"})
"""The client's reads that take a read consistency (a count takes none)."""


class QdrantCalls(PointStore):
    """The client calls of the Qdrant store; the store opens the client."""

    url: str
    read_consistency: str
    indexed_fields: tuple[str, ...]
    cluster: dict[str, int]
    _m: Any  # qdrant_client.models
    _client: Any
    _collections: set[str]

    async def _read(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call(SearchError, what, method, *args, **kwargs)

    async def _change(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call(IndexingError, what, method, *args, **kwargs)

    async def _call(
        self, error: type[KnowledgeStoreError], what: str, method: str, *args: Any, **kwargs: Any
    ) -> Any:
        """Call a client method; engine failures become store errors."""
        await self._ready()
        if self.read_consistency and method in READS:
            kwargs["consistency"] = self._consistency()
        try:
            return await getattr(self._client, method)(*args, **kwargs)
        except KnowledgeStoreError:
            raise
        except Exception as e:
            if unreachable(e):
                raise self.lost(e) from e
            raise error(f"{what} failed: {e}", backend=self.name) from e

    def _consistency(self) -> Any:
        """KNOWLEDGE_QDRANT_READ_CONSISTENCY as the client takes it: a number of copies,
        or all, majority or quorum."""
        value = self.read_consistency
        return int(value) if value.isdigit() else self._m.ReadConsistencyType(value)

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
        if not await self._read("listing collections", "collection_exists", name):
            if not create:
                return None
            await self._create_chunks(name)
        self._collections.add(name)
        return name

    async def _create_chunks(self, name: str) -> None:
        assert self._embedder is not None
        config = {**chunk_vectors(self._m, self._embedder.dimension), **self.cluster}
        await self._change("creating a collection", "create_collection", name, **config)
        fields = ["source_type", "document_id", "content_hash"]
        metadata = [f"metadata.{quoted(f)}" for f in self.indexed_fields]
        await self._index_fields(name, [*fields, *metadata])

    async def _all_chunks(self) -> list[str]:
        found = await self._read("listing collections", "get_collections")
        wanted = f"{self.prefix}-"
        return sorted(c.name for c in found.collections if c.name.startswith(wanted))

    async def _scroll(self, name: str, where: Any, with_vectors: Any = False) -> AsyncIterator[Any]:
        offset = None
        while True:
            points, offset = await self._read(
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
