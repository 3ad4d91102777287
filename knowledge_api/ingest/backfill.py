"""`knowledge-api backfill-offsets`: the offsets of chunks stored before chunks recorded
where they sit in their document, found in the stored text and written back.

Each chunk's content is looked for in its document's text after the one before it
(runs of whitespace compared as one space, as the chunker records them), the page of a
PDF's chunk read from its `## Page N` heading. The documents are written again with
their chunks, vectors and dates as stored: nothing is embedded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowledge_api.ingest.chunker import PAGED, offsets, page_at, page_starts
from knowledge_api.models import Document, Progress
from knowledge_api.stores.base import KnowledgeStore

BATCH_DOCUMENTS = 64


@dataclass(frozen=True, slots=True)
class Backfilled:
    documents: int = 0
    """Documents written again: those with a chunk lacking its offsets."""
    chunks: int = 0
    """Chunks given offsets."""
    unplaced: int = 0
    """Chunks whose content reads nowhere in the stored text (left without)."""


def placed(doc: Document) -> int:
    """Give the document's chunks their offsets and pages; how many found a place."""
    spans = offsets(doc.content, [chunk.content for chunk in doc.chunks])
    pages = page_starts(doc) if any(key in doc.metadata for key in PAGED) else None
    for chunk, span in zip(doc.chunks, spans, strict=True):
        if span is not None:
            chunk.start, chunk.end = span
            chunk.page = page_at(pages, span[0]) if pages else None
    return sum(span is not None for span in spans)


async def backfill(
    store: KnowledgeStore, collections: Sequence[str], progress: Progress | None = None
) -> Backfilled:
    """Every document of `collections` with a chunk that has no offsets, written again
    with them."""
    documents = chunks = unplaced = 0
    for collection in collections:
        batch: list[Document] = []
        async for doc in store.iter_documents(collection):
            if progress is not None:
                progress(1)
            if all(chunk.start is not None for chunk in doc.chunks):
                continue
            found = placed(doc)
            documents, chunks = documents + 1, chunks + found
            unplaced += len(doc.chunks) - found
            batch.append(doc)
            if len(batch) >= BATCH_DOCUMENTS:
                await store.index_documents(batch)
                batch = []
        if batch:
            await store.index_documents(batch)
    return Backfilled(documents, chunks, unplaced)
