"""What the Chroma and Qdrant stores share: engines of collections of points.

Each keeps a catalog collection `<prefix>` (documents and the store's own record: the
embedder that wrote it, a generation token and each collection's) and one collection of chunks per
knowledge collection (see `records`). `PointStore` implements the store protocol's
bookkeeping once (reconnection, the embedder check, the generation, the write and
delete protocol, the sources' record) over a few primitives each backend provides; its
reads (a document looked up, hits, listings) are `PointReads` (stores/points/reads.py).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from knowledge_api.errors import BackendConnectionError, ConfigurationError, KnowledgeStoreError
from knowledge_api.models import Document, EmbedderIdentity, chunk_id
from knowledge_api.stores import records
from knowledge_api.stores.base import embedder_mismatch
from knowledge_api.stores.fusion import Candidate, SearchTuning
from knowledge_api.stores.points.engine import (
    COLLECTIONS,
    CONNECTORS,
    LEASES,
    ROOTS,
    SOURCES,
    CatalogEntry,
    Record,
    collection_tokens,
    sources_of,
)
from knowledge_api.stores.points.reads import DOCUMENT_PAGE, PointReads
from knowledge_api.stores.points.record_lock import held
from knowledge_api.stores.reconnect import Reconnect
from knowledge_api.stores.records import is_uuid

IDENTITY = "document_ids"
"""The key of the store record saying what a document's id names; SOURCED once the
documents of a source carry ids that name it (models.document_id)."""
SOURCED = "sourced"


class PointStore(PointReads):
    """The store protocol over the primitives of `PointEngine`: its reads in `PointReads`."""

    def __init__(
        self, prefix: str, prefix_setting: str, tuning: SearchTuning, poll_seconds: float
    ) -> None:
        self.prefix = records.check_prefix(prefix, prefix_setting)
        self.tuning = tuning
        self.writes = records.Generation(poll_seconds)
        self.connection = Reconnect(self.name)
        self._embedder: EmbedderIdentity | None = None
        self._collection_tokens: dict[str, str] = {}
        """Each collection's token as of the last read of the record (or our write)."""
        self._write_lock = asyncio.Lock()

    # -- connection ---------------------------------------------------------------------

    async def open(self) -> None:
        self.connection.attempting()
        try:
            await self._connect()
            record = await self._read_record()
            self._embedder = records.stored_embedder(record)
            self.writes.token = str(record.get("generation", ""))
            self._collection_tokens = collection_tokens(record)
            await self._rekeyed(record)
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

    async def collection_generation(self, collection: str) -> Hashable:
        """The token of the last write that touched `collection`, read with the store's
        (so as fast, and as cheaply on a hit); the store's own while no write of this
        version touched it (content another version wrote counts no collection apart)."""
        token = await self.writes.current(self._read_token, self._changed)
        return self._collection_tokens.get(collection, token)

    async def _read_token(self) -> str:
        record = await self._read_record()
        self._collection_tokens = collection_tokens(record)
        return str(record.get("generation", ""))

    async def check_embedder(self, name: str, dimension: int) -> None:
        await self._ready()
        configured = EmbedderIdentity(name, dimension)
        stored = records.stored_embedder(await self._read_record())
        if stored is not None and stored != configured:
            raise embedder_mismatch(self.location, stored, configured, "another collection prefix")
        self._embedder = configured
        if stored is None:
            await self._wrote()

    async def _wrote(
        self,
        sources: Record | None = None,
        roots: Record | None = None,
        touched: Iterable[str] = (),
        retry: bool = True,
        connectors: Record | None = None,
        leases: Record | None = None,
    ) -> None:
        """Store a new generation token beside the embedder record, as the token of
        the `touched` collections too (the sources' runs, roots and connectors kept as
        they are unless given); then check that no other writer stored an older record
        over it."""
        touched = set(touched)
        async with held(self.record_lock):
            current = await self._read_record()
            prior = collection_tokens(current)
            await self._store_record(current, touched, sources, roots, connectors, leases)
        if touched and retry:
            # Another writer that read the record before this write and stored it after
            # put back the old tokens of what we touched: those collections take a new one.
            now = collection_tokens(await self._read_record())
            lost = {name for name in touched if name in prior and now.get(name) == prior[name]}
            if lost:
                await self._wrote(touched=lost, retry=False)

    async def _store_record(
        self,
        current: Record,
        touched: set[str],
        sources: Record | None = None,
        roots: Record | None = None,
        connectors: Record | None = None,
        leases: Record | None = None,
    ) -> None:
        """Write the record read as `current` with a new generation token, what is
        given in place of what it held."""
        assert self._embedder is not None
        if sources is None:
            sources = sources_of(current)
        if roots is None:
            roots = sources_of(current, ROOTS)
        if connectors is None:
            connectors = sources_of(current, CONNECTORS)
        if leases is None:
            leases = sources_of(current, LEASES)
        prior = collection_tokens(current)
        token = self.writes.wrote()
        tokens = {**prior, **dict.fromkeys(touched, token)}
        self._collection_tokens = tokens
        await self._write_record(
            {
                **current,
                **records.embedder_record(self._embedder),
                "generation": token,
                SOURCES: json.dumps(sources, sort_keys=True),
                ROOTS: json.dumps(roots, sort_keys=True),
                CONNECTORS: json.dumps(connectors, sort_keys=True),
                LEASES: json.dumps(leases, sort_keys=True),
                COLLECTIONS: json.dumps(tokens, sort_keys=True),
                IDENTITY: SOURCED,
            }
        )

    async def _rekeyed(self, record: Record) -> None:
        """A store written before a document's id named its source: the documents of a
        source are written again under their new ids (models.document_id) with their
        chunks' vectors and dates, then their old records go; no vector is computed
        again. Written first, deleted after: a run cut short is finished by the next."""
        if not record or record.get(IDENTITY) == SOURCED or self._embedder is None:
            return
        touched = set()
        for collection in sorted(await self.collections()):
            moved = [
                entry
                for entry in await self._catalog_of(collection)
                if records.source_of(entry.record)
            ]
            for start in range(0, len(moved), DOCUMENT_PAGE):
                part = moved[start : start + DOCUMENT_PAGE]
                documents = await self._documents(part, vectors=True)
                for doc in documents:
                    for chunk in doc.chunks:
                        chunk.id, chunk.document_id = chunk_id(doc.id, chunk.chunk_index), doc.id
                old = {entry.id for entry in part}
                await self._write([doc for doc in documents if doc.id not in old], {})
                for entry, doc in zip(part, documents, strict=True):
                    if entry.id != doc.id:
                        await self._remove(entry.id)
                        touched.add(collection)
        await self._wrote(touched=touched)

    # -- writes ---------------------------------------------------------------------------

    async def index_document(self, document: Document) -> None:
        await self.index_documents([document])

    async def index_documents(self, documents: Sequence[Document]) -> None:
        documents = records.writable(documents, self._embedder)
        if not documents:
            return
        touched = {doc.collection for doc in documents}
        async with self._write_lock:
            try:
                await self._ready()
                stored = await self._stored([doc.id for doc in documents])
                touched |= {collection for _, collection in stored.values()}  # moved from
                created = {doc_id: at for doc_id, (at, _) in stored.items()}
                documents = stamped(documents, created)
                await self._write(documents, created)
            except KnowledgeStoreError:
                self.writes.forget()  # part may be written: what mirrors it is rebuilt
                raise
            else:
                self._indexed(documents)
            finally:
                await self._wrote(touched=touched)

    async def _write(self, documents: Sequence[Document], created: Mapping[str, str]) -> None:
        """Chunks first, then the stale ones go, then the catalog records: a write cut
        short keeps the old content hashes, so the next ingest writes them again.
        `created` holds the creation time of each document already stored."""
        by_collection: dict[str, list[Document]] = defaultdict(list)
        for doc in documents:
            by_collection[doc.collection].append(doc)
        for collection, docs in by_collection.items():
            await self._upsert_chunks(collection, docs)
            replaced = [doc.id for doc in docs if doc.id in created]
            if replaced:
                keep = {chunk.id for doc in docs for chunk in doc.chunks}
                await self._drop_stale(collection, replaced, keep)
        await self._upsert_catalog(
            [
                CatalogEntry(
                    doc.id,
                    records.document_record(doc, doc.created_at, doc.updated_at),
                    doc.content,
                )
                for doc in documents
            ]
        )

    async def delete(self, doc_id: str) -> bool:
        async with self._write_lock:
            await self._ready()
            collection = await self._remove(doc_id)
            if collection is not None:
                self._deleted(doc_id)
                await self._wrote(touched=[collection])
        return collection is not None

    # -- sources: their runs, roots, connectors and leases in the store's record ------------

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        touched: list[str] = []
        async with self._write_lock:
            await self._ready()
            try:
                for doc_id in dict.fromkeys(doc_ids):
                    collection = await self._remove(doc_id) if is_uuid(doc_id) else None
                    if collection is not None:
                        self._deleted(doc_id)
                        touched.append(collection)
            finally:
                if touched:
                    await self._wrote(touched=set(touched))
        return len(touched)

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        """Each document written again with its chunks' own vectors under the new list
        (the engines keep it on every chunk, where their filters read it)."""
        ids = [doc_id for doc_id in dict.fromkeys(doc_ids) if is_uuid(doc_id)]
        async with self._write_lock:
            await self._ready()
            documents = []
            for start in range(0, len(ids), DOCUMENT_PAGE):
                documents += await self._documents_by_id(
                    ids[start : start + DOCUMENT_PAGE], vectors=True
                )
            for doc in documents:
                doc.acl = tuple(acl)
            try:
                await self._write(documents, {doc.id: doc.created_at for doc in documents})
            except KnowledgeStoreError:
                self.writes.forget()
                raise
            else:
                self._indexed(documents)
            finally:
                await self._wrote(touched={doc.collection for doc in documents})
        return len(documents)

    async def record_source(
        self, collection: str, source: str, root: str = "", connector: str = ""
    ) -> None:
        async with self._write_lock:
            await self._ready()
            record = await self._read_record()
            runs = sources_of(record)
            runs.setdefault(collection, {})[source] = records.now()
            roots = sources_of(record, ROOTS)
            if root:
                roots.setdefault(collection, {})[source] = root
            connectors = sources_of(record, CONNECTORS)
            if connector:
                connectors.setdefault(collection, {})[source] = connector
            await self._wrote(runs, roots, connectors=connectors)

    async def lease_source(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        """Under the store's write lock (one task at a time here) and the record's lock
        (`record_lock`: one process at a time on this machine), from the read of the
        record to its write. A server shared by replicas offers no such lock: there two
        replicas reading the record at once may both take it (chroma-and-qdrant.md)."""
        async with self._write_lock, held(self.record_lock):
            await self._ready()
            record = await self._read_record()
            if source not in sources_of(record).get(collection, {}):
                return False
            leases = sources_of(record, LEASES)
            now = datetime.now(UTC)
            current_holder, _, until = leases.get(collection, {}).get(source, "|").partition("|")
            if current_holder not in ("", holder) and until >= now.isoformat():
                return False
            lease = (
                f"{holder if seconds > 0 else ''}|{(now + timedelta(seconds=seconds)).isoformat()}"
            )
            leases.setdefault(collection, {})[source] = lease
            await self._store_record(record, set(), leases=leases)
            return True

    async def delete_source(self, collection: str, source: str) -> int:
        deleted = await self.delete_documents(list(await self.source_documents(collection, source)))
        async with self._write_lock:
            record = await self._read_record()
            runs, roots = sources_of(record), sources_of(record, ROOTS)
            connectors, leases = sources_of(record, CONNECTORS), sources_of(record, LEASES)
            for kept in (roots, connectors, leases):
                kept.get(collection, {}).pop(source, None)
            if runs.get(collection, {}).pop(source, None) is not None:
                await self._wrote(
                    named_only(runs),
                    named_only(roots),
                    connectors=named_only(connectors),
                    leases=named_only(leases),
                )
        return deleted


def named_only(by_collection: Record) -> Record:
    """The collections that still name a source."""
    return {name: named for name, named in by_collection.items() if named}


def stamped(documents: Sequence[Document], created: Mapping[str, str]) -> list[Document]:
    """The documents with their timestamps: those a document carries (read from a store
    or an export), else created when first written (a rewrite keeps it) and updated now.
    Their chunks carry them too, for filters on them."""
    stamp = records.now()
    return [
        replace(
            doc,
            created_at=doc.created_at or created.get(doc.id) or stamp,
            updated_at=doc.updated_at or stamp,
        )
        for doc in documents
    ]


def best_of(searched: Iterable[list[Candidate]], n: int) -> list[Candidate]:
    """The n best candidates of several collections searched as one, best first: each
    list is one collection's n best (an engine collection each), and the n best of the
    union are among them, with the scores the union's own search would give (a cosine,
    or a keyword score of an index over every collection)."""
    merged = [candidate for found in searched for candidate in found]
    return sorted(merged, key=lambda candidate: -candidate.score)[:n]
