"""The documents of the service: indexing them (the embedding entry points, and the
seed of an empty store), reading, finding and deleting them, the collections."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from knowledge_api import tracing
from knowledge_api.connectors import registry as connectors
from knowledge_api.connectors.base import Window
from knowledge_api.errors import (
    AmbiguousDocument,
    CollectionNotFound,
    EmbeddingError,
    ExtractionError,
    KnowledgeAPIError,
)
from knowledge_api.ingest.loaders import Loaded, LoadOptions, load_files, load_jsonl, load_paths
from knowledge_api.ingest.pipeline import Ingestor, changed_documents, chunked
from knowledge_api.ledger import Actor, changes
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    ConnectorSource,
    Document,
    IndexSummary,
    Progress,
)
from knowledge_api.settings import column_roles
from knowledge_api.trail import Trail

log = logging.getLogger("knowledge_api")
SEED_SOURCE = "bundled-docs"
"""The source the documents seeded into an empty store are recorded under: pruned or
deleted as one, like any source."""


class Catalog(Trail):
    async def ingest(
        self,
        documents: Iterable[Document],
        progress: Progress | None = None,
        source: str | None = None,
    ) -> IndexSummary:
        """Index `documents`; with a `source`, as that source's (see Ingestor.ingest)."""
        if not self.embedder_ready:
            raise EmbeddingError("the embedder is not loaded: documents cannot be indexed")
        ingestor = Ingestor(self.store, self.identity, self.embed_documents)
        return await ingestor.ingest(documents, progress, source)

    def check_connector(self, source: ConnectorSource, collection: str) -> None:
        """400 naming the field for a connector source its kind cannot read."""
        connectors.connector_for(source, collection).close()

    async def read_connector(
        self, source: ConnectorSource, collection: str, full: bool
    ) -> tuple[Window, set[str]]:
        """A connector source's documents changed since its cursor (all with `full`)
        and the source ids its service still has (connectors/registry.py)."""
        return await asyncio.to_thread(connectors.read, source, collection, full)

    async def changed(self, documents: Iterable[Document]) -> list[Document]:
        """Those of `documents` an ingest would write (chunked), asked of the store
        alone: a run that finds nothing new never needs the model."""
        return await changed_documents(self.store, documents)

    async def read_upload(self, path: Path, name: str, source_type: str, collection: str) -> Loaded:
        """The documents of an uploaded file (kept at `path`, sent as `name`), chunked
        so its job knows the passages to do, and what of it was left out (a mailbox's
        broken messages); ExtractionError when it holds none."""
        options = LoadOptions(
            source_type=source_type,
            collection=collection,
            max_file_mb=self.settings.max_file_mb,
            kpi_columns=column_roles(self.settings.kpi_columns) or {},
        )
        return await asyncio.to_thread(read_chunked, path, name, options)

    @staticmethod
    def corpus(path: Path, collection: str) -> list[Document]:
        """The documents of a BEIR corpus file, in `collection`."""
        return list(load_jsonl(path, LoadOptions(collection=collection)))

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter()
        with tracing.span("knowledge.embed", self._embed_attributes("documents", len(texts))):
            vectors: np.ndarray = await self._in_model_thread(self.embedder.embed_documents, texts)
        self.observer.embedding("documents", time.perf_counter() - start)
        return vectors

    async def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of the sentences an offline answer is chosen from; EmbeddingError
        when the model is not loaded, so the answer falls back to words."""
        if not self.embedder_ready:
            raise EmbeddingError("the embedder is not loaded")
        return await self.embed_documents(texts)

    async def document(self, doc_id: str) -> Document | None:
        return await self.store.get_by_id(doc_id)

    async def find_document(
        self, source_type: str, key: str, collection: str, source: str | None = None
    ) -> Document | None:
        """A document by source id, document id or the id of one of its chunks; with a
        `source`, only that source's. AmbiguousDocument when the source id is one
        several sources produced and no source is named."""
        found = await self.store.find_documents(source_type, key, collection)
        if source is not None:
            found = [doc for doc in found if doc.source == source]
        if len(found) > 1:
            sources = [doc.source for doc in found]
            raise AmbiguousDocument(
                f"{len(found)} sources hold a {source_type} record {key!r} in collection "
                f"{collection!r} ({', '.join(repr(name) for name in sources)}): name one "
                "with source",
                type=source_type,
                id=key,
                collection=collection,
                sources=sources,
            )
        return found[0] if found else None

    async def delete_document(self, doc_id: str) -> bool:
        return await self.store.delete(doc_id)

    async def collections(self) -> dict[str, int]:
        """Document count of every collection that holds documents."""
        return await self.store.collections()

    async def require_collection(self, collection: str) -> None:
        """CollectionNotFound, listing the collections, unless `collection` holds
        documents or is the default one (an empty knowledge base is not a typo). The
        reading routes call it once a search found nothing, so a found passage costs no
        count of the collections."""
        if collection == DEFAULT_COLLECTION:
            return
        existing = await self.collections()
        if collection not in existing:
            raise CollectionNotFound.among(collection, existing)

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        return self.store.iter_documents(collection)

    async def _seed(self) -> None:
        if not self.embedder_ready:
            log.warning("not seeding the empty store: the embedder is unavailable")
            return
        try:
            loaded = await asyncio.to_thread(load_paths, [self.seed_path()], LoadOptions())
            self.seeding = {"done": 0, "total": len(loaded.documents)}

            def progress(documents: int) -> None:
                self.seeding["done"] += documents

            summary = await self.ingest(loaded, progress, SEED_SOURCE)
            await self.audit(
                Actor("service"),
                "seed",
                loaded.documents[0].collection if loaded.documents else None,
                changes(loaded.documents, summary),
            )
        except (KnowledgeAPIError, OSError) as e:
            self.seeding["error"] = f"{type(e).__name__}: {e}"
            log.error("seeding the empty store from %s failed: %s", self.seed_path(), e)
            return
        log.info(
            "seeded the empty store from %s: %d documents, %d passages",
            self.seed_path(),
            summary.documents,
            summary.chunks,
        )
        self.seeding = {}

    def seeding_progress(self) -> str:
        return f"{self.seeding.get('done', 0)} of {self.seeding.get('total', '?')} documents"

    def seed_path(self) -> Path:
        if self.settings.seed_path:
            return Path(self.settings.seed_path)
        return Path(str(resources.files("knowledge_api").joinpath("docs")))


def read_chunked(path: Path, name: str, options: LoadOptions) -> Loaded:
    loaded = load_files([(path, name)], options)
    if not loaded.documents:
        if loaded.skipped:
            first = loaded.skipped[0]
            raise ExtractionError(first.reason, first.detail)
        raise ExtractionError("no documents", "the file holds no record")
    return Loaded(chunked(loaded.documents), loaded.skipped)
