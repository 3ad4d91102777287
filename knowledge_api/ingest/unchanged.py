"""Which documents of a run are already stored as they are, asked of the store alone.

The ingestion pipeline skips such documents too, but only once the service has started,
and starting it loads the embedding model: seconds of work for a re-run that finds
nothing new (an `ingest-git` every few minutes, say). Asking the store first lets the
CLI leave the model unloaded when every document is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge_api.ingest.chunker import chunk_document
from knowledge_api.ingest.pipeline import BATCH_DOCUMENTS, PLAIN_TEXT_FORMATS
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from knowledge_api.stores import stores
from knowledge_api.stores.base import KnowledgeStore


async def changed_documents(store: KnowledgeStore, documents: Sequence[Document]) -> list[Document]:
    """The documents whose content hash differs from the stored one (or that are not
    stored), the last of a repeated source only, chunked as the pipeline chunks them."""
    unique = {doc.id: doc for doc in documents}
    for doc in unique.values():
        plain = doc.metadata.get("format") in PLAIN_TEXT_FORMATS
        doc.chunks = chunk_document(doc, markdown=not plain)
    changed: list[Document] = []
    candidates = list(unique.values())
    for start in range(0, len(candidates), BATCH_DOCUMENTS):
        batch = candidates[start : start + BATCH_DOCUMENTS]
        stored = await store.document_hashes([doc.id for doc in batch])
        changed.extend(doc for doc in batch if stored.get(doc.id) != doc.content_hash)
    return changed


async def changed_in_store(settings: Settings, documents: Sequence[Document]) -> list[Document]:
    """changed_documents against the store the settings name, opened for this question."""
    store = stores.create(settings.store, settings)
    await store.open()
    try:
        return await changed_documents(store, documents)
    finally:
        await store.close()
