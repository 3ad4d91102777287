"""Copy collections between store backends with their vectors: nothing is embedded.

Documents whose content hash the target already holds are skipped, so running a
migration again only copies what changed since.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from knowledge_api.models import Document, EmbedderIdentity, IndexSummary
from knowledge_api.stores.base import KnowledgeStore

BATCH_DOCUMENTS = 256


async def migrate(
    source: KnowledgeStore,
    target: KnowledgeStore,
    embedder: EmbedderIdentity,
    collections: Sequence[str] = (),
    progress: Callable[[int], object] | None = None,
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
    progress: Callable[[int], object] | None = None,
) -> IndexSummary:
    total = IndexSummary()
    batch: list[Document] = []
    async for doc in source.iter_documents(collection):
        batch.append(doc)
        if len(batch) == BATCH_DOCUMENTS:
            total += await copy_batch(target, batch, progress)
            batch = []
    if batch:
        total += await copy_batch(target, batch, progress)
    return total


async def copy_batch(
    target: KnowledgeStore,
    batch: list[Document],
    progress: Callable[[int], object] | None,
) -> IndexSummary:
    stored = await target.document_hashes([doc.id for doc in batch])
    changed = [doc for doc in batch if stored.get(doc.id) != doc.content_hash]
    await target.index_documents(changed)
    if progress is not None:
        progress(len(batch))
    return IndexSummary(
        documents=len(changed),
        chunks=sum(len(doc.chunks) for doc in changed),
        skipped=len(batch) - len(changed),
    )
