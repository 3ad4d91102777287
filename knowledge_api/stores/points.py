"""What the Chroma and Qdrant stores share: engines of collections of points.

Each keeps a catalog collection `<prefix>` (documents and the store's own record: the
embedder that wrote it and a generation token) and one collection of chunks per
knowledge collection (see `records`). `PointStore` implements the store protocol's
bookkeeping once (reconnection, the embedder check, the generation, the write and
delete protocol, looking a document up) over a few primitives each backend provides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from typing import Any

from knowledge_api.errors import BackendConnectionError, ConfigurationError, KnowledgeStoreError
from knowledge_api.models import Document, EmbedderIdentity
from knowledge_api.stores import records
from knowledge_api.stores.base import HybridSearch, Reconnect, embedder_mismatch
from knowledge_api.stores.fusion import SearchTuning

Record = dict[str, Any]


class PointStore(HybridSearch):
    name = "points"
    engine = "the engine"
    """How errors name the engine: Chroma, Qdrant."""

    def __init__(
        self, prefix: str, prefix_setting: str, tuning: SearchTuning, poll_seconds: float
    ) -> None:
        self.prefix = records.check_prefix(prefix, prefix_setting)
        self.tuning = tuning
        self.writes = records.Generation(poll_seconds)
        self.connection = Reconnect(self.name)
        self._embedder: EmbedderIdentity | None = None
        self._write_lock = asyncio.Lock()

    @property
    def location(self) -> str:
        """Where the points live, for errors and /health (never a secret)."""
        raise NotImplementedError

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

    async def _write(self, documents: Sequence[Document]) -> None:
        """Chunks first, then the stale ones go, then the catalog records: a write cut
        short keeps the old content hashes, so the next ingest writes them again."""
        raise NotImplementedError

    async def _remove(self, doc_id: str) -> bool:
        """Delete a document's chunks, then its catalog record; False if there is none."""
        raise NotImplementedError

    async def _by_source(self, source_type: str, key: str, collection: str) -> Document | None:
        raise NotImplementedError

    async def _chunk_owner(self, collection: str, chunk_id: str) -> str | None:
        """The id of the document a chunk of `collection` belongs to."""
        raise NotImplementedError

    async def get_by_id(self, doc_id: str) -> Document | None:
        raise NotImplementedError

    async def _opened(self, record: Record) -> None:
        """After a successful open (e.g. rebuild what mirrors the engine)."""

    async def _changed(self) -> None:
        """Another client wrote since we last looked."""

    def _indexed(self, documents: Sequence[Document]) -> None:
        """Our own write of `documents` succeeded."""

    def _deleted(self, doc_id: str) -> None:
        """Our own delete of `doc_id` succeeded."""

    # -- connection ---------------------------------------------------------------------

    async def open(self) -> None:
        self.connection.attempting()
        try:
            await self._connect()
            record = await self._read_record()
            self._embedder = records.stored_embedder(record)
            self.writes.token = str(record.get("generation", ""))
            await self._opened(record)
        except ConfigurationError:
            await self.close()
            raise  # a missing extra or a bad setting: no reconnection will fix it
        except Exception as e:
            reason = e.message if isinstance(e, KnowledgeStoreError) else str(e)
            await self.close()
            where = f"cannot reach {self.engine} at {self.location}"
            raise self.connection.failed(f"{where}: {reason}") from e
        self.connection.succeeded()

    async def _ready(self) -> None:
        """Reopen (at most every few seconds, one attempt at a time) after a failure."""
        if self.connected():
            return
        async with self.connection.lock:
            if not self.connected():
                self.connection.check()
                await self.open()

    def lost(self, error: BaseException) -> BackendConnectionError:
        """The engine went away mid-call: the next call reconnects."""
        return self.connection.failed(f"lost {self.engine} at {self.location}: {error}")

    # -- embedder and generation --------------------------------------------------------

    async def generation(self) -> Hashable:
        return await self.writes.current(self._read_token, self._changed)

    async def _read_token(self) -> str:
        return str((await self._read_record()).get("generation", ""))

    async def check_embedder(self, name: str, dimension: int) -> None:
        await self._ready()
        configured = EmbedderIdentity(name, dimension)
        stored = records.stored_embedder(await self._read_record())
        if stored is not None and stored != configured:
            raise embedder_mismatch(self.location, stored, configured, "another collection prefix")
        self._embedder = configured
        if stored is None:
            await self._wrote()

    async def _wrote(self) -> None:
        """Store a new generation token beside the embedder record."""
        assert self._embedder is not None
        await self._write_record(
            {**records.embedder_record(self._embedder), "generation": self.writes.wrote()}
        )

    # -- writes ---------------------------------------------------------------------------

    async def index_document(self, document: Document) -> None:
        await self.index_documents([document])

    async def index_documents(self, documents: Sequence[Document]) -> None:
        documents = records.writable(documents, self._embedder)
        if not documents:
            return
        async with self._write_lock:
            try:
                await self._ready()
                await self._write(documents)
            except KnowledgeStoreError:
                self.writes.forget()  # part may be written: what mirrors it is rebuilt
                raise
            else:
                self._indexed(documents)
            finally:
                await self._wrote()

    async def delete(self, doc_id: str) -> bool:
        async with self._write_lock:
            await self._ready()
            deleted = await self._remove(doc_id)
            if deleted:
                self._deleted(doc_id)
                await self._wrote()
        return deleted

    # -- reads ------------------------------------------------------------------------------

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        """By source id first, then by document id or the id of one of its chunks."""
        await self._ready()
        found = await self._by_source(source_type, key, collection)
        if found is not None:
            return found
        owner = await self._chunk_owner(collection, key)
        doc = await self.get_by_id(owner or key)
        if doc is None or doc.source_type != source_type or doc.collection != collection:
            return None
        return doc


def unavailable(name: str, error: KnowledgeStoreError) -> dict[str, Any]:
    """The /health line of a store that cannot answer."""
    return {"backend": name, "status": "unavailable", "error": str(error)}
