"""Copy collections between store backends with their vectors: nothing is embedded.

Documents whose content hash the target already holds are skipped, so running a
migration again only copies what changed since.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from knowledge_api.models import Document, EmbedderIdentity, IndexSummary, Progress
from knowledge_api.stores.base import KnowledgeStore

BATCH_DOCUMENTS = 256


async def migrate(
    source: KnowledgeStore,
    target: KnowledgeStore,
    embedder: EmbedderIdentity,
    collections: Sequence[str] = (),
    progress: Progress | None = None,
) -> dict[str, IndexSummary]:
    """Copy `collections` (all of the source's when empty) from source to target.

    `embedder` must be the one that wrote the source's vectors: both
    stores check it, so vectors of different models never end up side by side.
    """
    await source.check_embedder(embedder.name, embedder.dimension)
    await target.check_embedder(embedder.name, embedder.dimension)
    names = list(collections) or list(await source.collections())
    return {name: await copy_collection(source, target, name, progress) for name in names}


async def copy_collection(
    source: KnowledgeStore,
    target: KnowledgeStore,
    collection: str,
    progress: Progress | None = None,
) -> IndexSummary:
    """The changed documents of `collection` go to the target as one stream, which a
    backend may load in bulk (and in one transaction: postgres)."""
    total = IndexSummary()

    async def changed_sets() -> AsyncIterator[list[Document]]:
        nonlocal total
        async for batch in batched(source.iter_documents(collection)):
            stored = await target.document_hashes([doc.id for doc in batch])
            changed = [doc for doc in batch if stored.get(doc.id) != doc.content_hash]
            yield changed
            total += IndexSummary(
                documents=len(changed),
                chunks=sum(len(doc.chunks) for doc in changed),
                skipped=len(batch) - len(changed),
            )
            if progress is not None:
                progress(len(batch))

    await target.index_batches(changed_sets(), await missing(source, target, collection))
    return total


async def missing(source: KnowledgeStore, target: KnowledgeStore, collection: str) -> int:
    """How many more documents the source holds than the target: a lower bound of the
    passages coming (none when a migration runs again)."""
    held = (await target.collections()).get(collection, 0)
    return max((await source.collections()).get(collection, 0) - held, 0)


async def batched(documents: AsyncIterator[Document]) -> AsyncIterator[list[Document]]:
    batch: list[Document] = []
    async for doc in documents:
        batch.append(doc)
        if len(batch) == BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch
