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
from knowledge_api.errors import (
    CollectionNotFound,
    EmbeddingError,
    ExtractionError,
    InvalidRequest,
)
from knowledge_api.ingest.loaders import LoadOptions, Skipped, load_as, load_jsonl, load_paths
from knowledge_api.ingest.pipeline import Ingestor, changed_documents, chunked
from knowledge_api.ledger import Actor, changes
from knowledge_api.models import DEFAULT_COLLECTION, Document, IndexSummary, Progress
from knowledge_api.trail import Trail

log = logging.getLogger("knowledge_api")
EMBED_SLICE = 512
"""Texts one call of the model thread embeds (a multiple of the local model's window)."""


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

    async def changed(self, documents: Iterable[Document]) -> list[Document]:
        """Those of `documents` an ingest would write (chunked), asked of the store
        alone: a run that finds nothing new never needs the model."""
        return await changed_documents(self.store, documents)

    async def read_upload(
        self, path: Path, name: str, source_type: str, collection: str
    ) -> tuple[list[Document], str]:
        """The documents of an uploaded file (kept at `path`, sent as `name`), chunked
        so its job knows the passages to do, and which of its records were left out
        (`records_left_out`; a JSON-lines record that breaks the rules of a document),
        or ""; ExtractionError when it holds none."""
        settings = self.settings
        options = LoadOptions(
            source_type=source_type, collection=collection, max_chars=settings.max_file_chars
        )
        return await asyncio.to_thread(
            read_chunked, path, name, options, settings.max_file_passages
        )

    @staticmethod
    def corpus(path: Path, collection: str) -> list[Document]:
        """The documents of a BEIR corpus file, in `collection`; a bad record fails it."""
        refused: list[Skipped] = []
        documents = list(load_jsonl(path, LoadOptions(collection=collection), refused, str(path)))
        if refused:
            raise InvalidRequest(refused[0].path, refused[0].detail)
        return documents

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """The texts' vectors, EMBED_SLICE texts a call of the model thread: the queries
        that come while a large file is embedded take their turn between two slices."""
        start = time.perf_counter()
        with tracing.span("knowledge.embed", self._embed_attributes("documents", len(texts))):
            embed = self.embedder.embed_documents
            vectors: np.ndarray = await self._in_model_thread(embed, texts[:EMBED_SLICE])
            if len(texts) > EMBED_SLICE:
                rest = [
                    await self._in_model_thread(embed, texts[i : i + EMBED_SLICE])
                    for i in range(EMBED_SLICE, len(texts), EMBED_SLICE)
                ]
                vectors = np.concatenate([vectors, *rest])
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

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        """A document by source id, document id or the id of one of its chunks."""
        return await self.store.find_document(source_type, key, collection)

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
        loaded = load_paths([self.seed_path()], LoadOptions(max_chars=self.settings.max_file_chars))
        summary = await self.ingest(loaded)
        await self.audit(
            Actor("service"),
            "seed",
            loaded.documents[0].collection if loaded.documents else None,
            changes(loaded.documents, summary),
        )
        log.info(
            "seeded the empty store from %s: %d documents, %d passages",
            self.seed_path(),
            summary.documents,
            summary.chunks,
        )

    def seed_path(self) -> Path:
        if self.settings.seed_path:
            return Path(self.settings.seed_path)
        return Path(str(resources.files("knowledge_api").joinpath("docs")))


def read_chunked(
    path: Path, name: str, options: LoadOptions, max_passages: int
) -> tuple[list[Document], str]:
    refused: list[Skipped] = []
    documents = chunked(load_as(path, name, options, refused))
    if not documents:
        why = f"{refused[0].path}: {refused[0].detail}" if refused else "the file holds no record"
        raise ExtractionError("no documents", why)
    passages = sum(len(doc.chunks) for doc in documents)
    if passages > max_passages:
        raise ExtractionError(
            "too many passages",
            f"its text makes {passages:,} passages, more than {max_passages:,} "
            "(KNOWLEDGE_MAX_FILE_PASSAGES)",
        )
    return documents, records_left_out(refused)


def records_left_out(refused: Sequence[Skipped], shown: int = 10) -> str:
    """`2 records left out: line 3: metadata.x: ...; line 9: ...`, or "" for none: the
    records of a JSON-lines file that break the rules of a document."""
    if not refused:
        return ""
    lines = "; ".join(
        f"line {record.path.rpartition(':')[2]}: {record.detail}" for record in refused[:shown]
    )
    more = f"; and {len(refused) - shown} more" if len(refused) > shown else ""
    records = "record" if len(refused) == 1 else "records"
    return f"{len(refused)} {records} left out: {lines}{more}"
