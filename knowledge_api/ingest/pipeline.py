"""Idempotent ingestion: chunk, skip what is unchanged, embed only new text, store.

A document whose content hash is already stored costs no embedding and no write.
A changed document reuses the stored vectors of its unchanged chunks and replaces
its old chunks in one store transaction, so an interrupted run never leaves half
of a document behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from itertools import islice

import numpy as np

from knowledge_api import tracing
from knowledge_api.ingest.chunker import chunk_document
from knowledge_api.models import Document, EmbedderIdentity, IndexSummary, Progress
from knowledge_api.stores.base import KnowledgeStore

EmbedFn = Callable[[Sequence[str]], Awaitable[np.ndarray]]
PLAIN_TEXT_FORMATS = ("txt", "text", "rst")
BATCH_DOCUMENTS = 256


@dataclass(frozen=True, slots=True)
class Ingestor:
    store: KnowledgeStore
    embedder: EmbedderIdentity
    """Whose vectors the store keeps (recorded with the first write)."""
    embed: EmbedFn

    async def ingest(
        self,
        documents: Iterable[Document],
        progress: Progress | None = None,
        source: str | None = None,
        checked: bool = False,
    ) -> IndexSummary:
        """Batches of documents, each written while the next one is embedded: the model
        and the store's writer run on threads of their own, so the write of a batch
        costs no time of the embedding. Writes stay in order, one at a time. With a
        `source`, every document is recorded as that source's, and its run noted.
        `checked` documents are chunked already and each new or changed (a mirror's
        plan found them so): neither is asked again."""
        collections: set[str] = set()
        iterator = iter(documents) if source is None else owned(documents, source, collections)
        total = await self.ingest_batches(batched(iterator), progress, checked)
        for collection in sorted(collections):
            await self.store.record_source(collection, source or "")
        return total

    async def ingest_batches(
        self,
        batches: AsyncIterable[list[Document]],
        progress: Progress | None = None,
        checked: bool = False,
    ) -> IndexSummary:
        """The same for batches as they come (a connector's run reads the next while
        this one is embedded): each batch is embedded, then written while the next
        is embedded."""
        await self.store.check_embedder(self.embedder.name, self.embedder.dimension)
        total = IndexSummary()
        writing: asyncio.Task[IndexSummary] | None = None
        try:
            async for batch in batches:
                # a batch's span: the root of its own trace outside a request (the CLI,
                # a KB sync), ended once its write is done
                size = {"knowledge.documents": len(batch)}
                traced = tracing.start("knowledge.ingest.batch", size)
                with tracing.current(traced):
                    try:
                        changed, summary = await self._embedded(batch, checked)
                    except BaseException as e:
                        tracing.failed(traced, f"{type(e).__name__}: {e}")
                        traced.end()  # type: ignore[attr-defined]
                        raise
                if writing is not None:
                    previous, writing = writing, None
                    total += await self._written(previous, progress)
                with tracing.current(traced):
                    writing = asyncio.create_task(self._write(changed, summary, traced))
        finally:
            if writing is not None:  # also when embedding failed: never leave a write behind
                total += await self._written(writing, progress)
        return total

    async def _embedded(
        self, batch: list[Document], checked: bool = False
    ) -> tuple[list[Document], IndexSummary]:
        """The batch's new or changed documents, every chunk with its vector. Chunking
        runs on a worker thread: a file of megabytes of text takes seconds to cut, and
        the event loop serves queries meanwhile."""
        changed = batch
        if not checked:
            changed = await changed_only(self.store, await asyncio.to_thread(chunked, batch))
        chunks = [chunk for doc in changed for chunk in doc.chunks]
        vectors = await self.store.embeddings_by_hash(list({c.content_hash for c in chunks}))
        missing = {c.content_hash: c.embedded_text for c in chunks if c.content_hash not in vectors}
        if missing:
            fresh = await self.embed(list(missing.values()))
            vectors.update(zip(missing, fresh, strict=True))
        for chunk in chunks:
            chunk.embedding = vectors[chunk.content_hash]
        return changed, IndexSummary(
            documents=len(changed),
            chunks=len(chunks),
            embedded=len(missing),
            skipped=len(batch) - len(changed),
        )

    async def _write(
        self, changed: list[Document], summary: IndexSummary, traced: tracing.SpanLike
    ) -> IndexSummary:
        traced.set_attributes(
            {
                "knowledge.documents.changed": summary.documents,
                "knowledge.documents.skipped": summary.skipped,
                "knowledge.chunks": summary.chunks,
                "knowledge.chunks.embedded": summary.embedded,
            }
        )
        try:
            with tracing.span("knowledge.index", {"db.operation.name": "index"}):
                await self.store.index_documents(changed)
        except BaseException as e:
            tracing.failed(traced, f"{type(e).__name__}: {e}")
            raise
        finally:
            traced.end()  # type: ignore[attr-defined]
        return summary

    @staticmethod
    async def _written(
        writing: asyncio.Task[IndexSummary], progress: Progress | None
    ) -> IndexSummary:
        summary = await writing
        if progress is not None:
            progress(summary.documents + summary.skipped)
        return summary


async def batched(documents: Iterator[Document]) -> AsyncIterator[list[Document]]:
    while batch := list(islice(documents, BATCH_DOCUMENTS)):
        yield batch


def owned(documents: Iterable[Document], source: str, collections: set[str]) -> Iterator[Document]:
    """The documents, each named as `source`'s; the collections they go to noted."""
    for doc in documents:
        doc.source = source
        collections.add(doc.collection)
        yield doc


def chunked(documents: Iterable[Document]) -> list[Document]:
    """The documents chunked, the last version of a repeated source only."""
    unique = {doc.id: doc for doc in documents}
    for doc in unique.values():
        plain = doc.metadata.get("format") in PLAIN_TEXT_FORMATS
        doc.chunks = chunk_document(doc, markdown=not plain)
    return list(unique.values())


async def changed_only(store: KnowledgeStore, documents: list[Document]) -> list[Document]:
    """Those of the (chunked) documents whose content hash the store does not hold."""
    stored = await store.document_hashes([doc.id for doc in documents])
    return [doc for doc in documents if stored.get(doc.id) != doc.content_hash]
