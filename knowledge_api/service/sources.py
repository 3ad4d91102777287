"""The sources of each collection (what each indexed, where it reads, its connector and
its lease), mirroring one so the index matches it, and the listings of collections and
documents."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from knowledge_api.ingest.pipeline import BATCH_DOCUMENTS, chunked
from knowledge_api.models import (
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    IndexSummary,
    Progress,
    SourceInfo,
    document_id,
)
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Engine


class Sources:
    """Sources and listings, over the engine's store."""

    def __init__(self, engine: Engine, catalog: Catalog) -> None:
        self.engine = engine
        self.catalog = catalog

    async def listed(self, collection: str | None = None) -> list[SourceInfo]:
        """The sources (of one collection, or all), by collection and name."""
        return await self.engine.store.sources(collection)

    async def produced(self, collection: str, source: str) -> dict[str, str]:
        """Document id -> source id of every document `source` produced in `collection`."""
        return await self.engine.store.source_documents(collection, source)

    async def compared(self, documents: Iterable[Document]) -> tuple[list[Document], set[str]]:
        """The documents chunked, those the store does not hold as they are (new or
        changed), and which of their ids, and of the ids they had before sources were
        kept, the store holds: one question to the store per batch, and no model."""
        # a worker thread cuts them: a sync's batches come while queries are served
        candidates = await asyncio.to_thread(chunked, documents)
        hashes: dict[str, str] = {}
        for start in range(0, len(candidates), BATCH_DOCUMENTS):
            batch = candidates[start : start + BATCH_DOCUMENTS]
            ids = [doc.id for doc in batch] + [unsourced_id(doc) for doc in batch]
            hashes.update(await self.engine.store.document_hashes(list(dict.fromkeys(ids))))
        changed = [doc for doc in candidates if hashes.get(doc.id) != doc.content_hash]
        return changed, set(hashes)

    async def mirror(
        self,
        changed: Sequence[Document],
        collection: str,
        source: str,
        gone: Sequence[str] = (),
        root: str = "",
        progress: Progress | None = None,
        replaced: Sequence[str] = (),
    ) -> tuple[IndexSummary, int]:
        """Mirror a planned run of `source`: write the documents it changed (chunked and
        compared by `compared` already: neither is done again), delete the documents of
        no source they replace (stored before sources were kept) and the stored ones it
        no longer produces (`gone`), note the run once. What was indexed, and how many
        documents went."""
        indexed = IndexSummary()
        if changed:
            indexed = await self.catalog.ingest(changed, progress, checked=True)
        if replaced:
            await self.engine.store.delete_documents(list(replaced))
        return indexed, await self.prune(collection, source, gone, root)

    async def prune(self, collection: str, source: str, gone: Sequence[str], root: str = "") -> int:
        """Delete the stored documents `source` no longer produces (`gone`) and note its
        run; how many documents went."""
        store = self.engine.store
        deleted = await store.delete_documents(list(gone)) if gone else 0
        await store.record_source(collection, source, root)
        return deleted

    async def set_document_acls(self, ids: Sequence[str], acl: Sequence[str]) -> int:
        """Give the documents `ids` the access list `acl` (their passages too), embedding
        nothing; how many documents changed."""
        changed: int = await self.engine.store.set_acl(list(ids), acl)
        return changed

    async def set_acl(self, collection: str, source: str, acl: Sequence[str]) -> None:
        """Remember the access list `source` gives the documents it writes (empty:
        closed, admin keys only)."""
        await self.engine.keys.set_source_acl(collection, source, acl)

    async def acl_of(self, collection: str, source: str) -> tuple[str, ...] | None:
        """The access list `source` gives its documents; None when it has none of its
        own (they are public)."""
        return await self.engine.keys.source_acl(collection, source)

    async def note_connector(self, collection: str, source: str, connector: str) -> None:
        """Note a connector source's run (or its definition) under its name."""
        await self.engine.store.record_source(collection, source, connector=connector)

    async def lease(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        """Take, renew (or with 0 seconds let go) the source's lease as `holder`: whether
        `holder` holds it now (one sync of a source at a time, across processes)."""
        return await self.engine.store.lease_source(collection, source, holder, seconds)

    async def delete(self, collection: str, source: str) -> tuple[bool, list[str]]:
        """Delete the source and its documents: whether the collection had it, and the
        ids of the documents that went with it."""
        store = self.engine.store
        known = {info.name for info in await store.sources(collection)}
        owned = await store.source_documents(collection, source)
        deleted = await store.delete_source(collection, source)  # 409 where read-only
        return bool(deleted) or source in known, sorted(owned)

    async def collection_stats(self) -> list[CollectionInfo]:
        """Every collection holding documents or sources, by name, with its counts."""
        return await self.engine.store.collection_stats()

    async def document_page(self, page: DocumentPage) -> list[DocumentSummary]:
        """One page of a collection's documents, in id order, without their text."""
        return await self.engine.store.list_documents(page)


def unsourced_id(doc: Document) -> str:
    """The id `doc` had when it was stored before sources were kept."""
    return document_id(doc.collection, doc.source_type, doc.source_id)
