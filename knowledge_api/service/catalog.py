"""The documents of the service: indexing them (the embedding entry points, and the
seed of an empty store), reading, finding and deleting them, the collections."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np

from knowledge_api import tracing
from knowledge_api.connectors import kb, pages
from knowledge_api.connectors import registry as connectors
from knowledge_api.connectors.base import Runtime
from knowledge_api.connectors.http import Retries
from knowledge_api.errors import (
    AmbiguousDocument,
    CollectionNotFound,
    EmbeddingError,
    ExtractionError,
    InvalidRequest,
    KnowledgeAPIError,
)
from knowledge_api.ingest.git_source import GitOptions, load_git
from knowledge_api.ingest.loaders import (
    Loaded,
    LoadOptions,
    Skipped,
    load_files,
    load_jsonl,
    load_paths,
)
from knowledge_api.ingest.pipeline import Ingestor, chunked
from knowledge_api.ledger import Actor, changes
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    ConnectorSource,
    Document,
    DocumentPage,
    DocumentSummary,
    IndexSummary,
    KBHost,
    Progress,
    ReadableCount,
    SourceInfo,
)
from knowledge_api.principals import visible
from knowledge_api.service.engine import Engine
from knowledge_api.service.trail import Trail
from knowledge_api.settings import column_roles

log = logging.getLogger("knowledge_api")
SEED_SOURCE = "bundled-docs"
"""The source the documents seeded into an empty store are recorded under: pruned or
deleted as one, like any source."""
EMBED_SLICE = 512
"""Texts one call of the model thread embeds (a multiple of the local model's window)."""


class Catalog:
    """The documents: indexing, reading, finding and deleting them, the collections."""

    def __init__(self, engine: Engine, trail: Trail) -> None:
        self.engine = engine
        self.trail = trail

    async def ingest(
        self,
        documents: Iterable[Document] | AsyncIterable[list[Document]],
        progress: Progress | None = None,
        source: str | None = None,
        checked: bool = False,
    ) -> IndexSummary:
        """Index `documents`, or batches of them as they come (a connector's run); with
        a `source`, as that source's; `checked` ones are chunked and found new or
        changed already (see Ingestor.ingest)."""
        if not self.engine.embedder_ready:
            raise EmbeddingError("the embedder is not loaded: documents cannot be indexed")
        ingestor = Ingestor(self.engine.store, self.engine.identity, self.embed_documents)
        if isinstance(documents, AsyncIterable):
            return await ingestor.ingest_batches(documents, progress, checked)
        return await ingestor.ingest(documents, progress, source, checked)

    def check_connector(self, source: ConnectorSource, collection: str) -> None:
        """400 naming the field for a connector source its kind cannot read."""
        connectors.connector_for(source, collection, self.connector_runtime()).close()

    def read_connector(
        self, source: ConnectorSource, collection: str, since: str
    ) -> connectors.Reading:
        """One run's read of a connector source: its documents updated since `since`
        (all when empty) in batches as its pages come, then the source ids its service
        still has (connectors/registry.py)."""
        return connectors.Reading(source, collection, since, self.connector_runtime())

    async def connector_sources(
        self, collection: str | None = None
    ) -> list[tuple[SourceInfo, ConnectorSource]]:
        """The connector sources (of `collection`) with their records."""
        return [
            (info, ConnectorSource.from_json(info.connector))
            for info in await self.engine.store.sources(collection)
            if info.connector
        ]

    async def read_kb(self, host: KBHost, since: str, collection: str) -> kb.Read:
        """The articles of a KB host updated since `since` (all when empty), read by the
        `kb` connector's client with KNOWLEDGE_SYNC_RETRIES (connectors/kb.py)."""
        retries = self.connector_runtime().retries
        client = kb.KBClient.at(host.url, host.token, host.timeout, host.page_size, retries)
        return await asyncio.to_thread(kb.read, client, since, collection)

    def connector_runtime(self) -> Runtime:
        """What every connector is built with: KNOWLEDGE_SYNC_RETRIES for its calls,
        KNOWLEDGE_SYNC_OVERLAP for the windows of cursors of its own."""
        settings = self.engine.settings
        return Runtime(Retries(attempts=settings.sync_retries), settings.sync_overlap)

    async def read_upload(
        self,
        path: Path,
        name: str,
        source_type: str,
        collection: str,
        dates: Mapping[str, str] | None = None,
    ) -> tuple[list[Document], str]:
        """The documents of an uploaded file (kept at `path`, sent as `name`), chunked
        so its job knows the passages to do, and what of it was left out (a JSON-lines
        record that breaks the rules of a document, a mailbox's broken message), or "";
        ExtractionError when it holds none."""
        settings = self.engine.settings
        options = LoadOptions(
            source_type=source_type,
            collection=collection,
            max_file_mb=settings.max_file_mb,
            kpi_columns=column_roles(settings.kpi_columns) or {},
            max_chars=settings.max_file_chars,
            created_at=(dates or {}).get("created_at", ""),
            updated_at=(dates or {}).get("updated_at", ""),
        )
        return await asyncio.to_thread(
            read_chunked, path, name, options, settings.max_file_passages
        )

    @staticmethod
    def read_files(path: str, options: LoadOptions) -> Loaded:
        """The documents of the file or folder at `path`, or of the web page it names
        (read as a web source reads it; a page without main content is skipped), and
        what was skipped: read by a command before the store opens or a model loads, so
        a wrong path costs nothing."""
        if not pages.is_url(path):
            return load_paths([Path(path)], options)
        try:
            document = pages.read_page(path, options.collection, options.source_type)
        except ExtractionError as e:
            return Loaded(skipped=[Skipped(path, e.reason, e.detail)])
        document.metadata.update(options.metadata)
        return Loaded([document])

    @staticmethod
    def read_git(repo: Path, options: GitOptions) -> list[Document]:
        """The branch's commits as documents; InvalidRequest for a bad repository,
        branch or option, before any commit is read."""
        return load_git(repo, options)

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
        return await self._embed(self.engine.embedder.embed_documents, texts)

    async def _embed(
        self, embed: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]
    ) -> np.ndarray:
        start = time.perf_counter()
        with tracing.span("knowledge.embed", self.engine.embed_attributes("documents", len(texts))):
            vectors: np.ndarray = await self.engine.in_model_thread(embed, texts[:EMBED_SLICE])
            if len(texts) > EMBED_SLICE:
                rest = [
                    await self.engine.in_model_thread(embed, texts[i : i + EMBED_SLICE])
                    for i in range(EMBED_SLICE, len(texts), EMBED_SLICE)
                ]
                vectors = np.concatenate([vectors, *rest])
        self.engine.observer.embedding("documents", time.perf_counter() - start)
        return vectors

    async def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of the sentences an offline answer is chosen from; EmbeddingError
        when the model is not loaded, so the answer falls back to words."""
        if not self.engine.embedder_ready:
            raise EmbeddingError("the embedder is not loaded")
        return await self._embed(self.engine.embedder.embed_sentences, texts)

    async def document(
        self, doc_id: str, principals: frozenset[str] | None = None
    ) -> Document | None:
        """The document of this id, when `principals` may read it (None: any)."""
        found = await self.engine.store.get_by_id(doc_id)
        return found if found is not None and visible(found.acl, principals) else None

    async def find_document(
        self,
        source_type: str,
        key: str,
        collection: str,
        source: str | None = None,
        principals: frozenset[str] | None = None,
    ) -> Document | None:
        """A document by source id, document id or the id of one of its chunks; with a
        `source`, only that source's; only those `principals` may read (a hidden one is
        missing). AmbiguousDocument when the source id is one several sources produced
        and no source is named."""
        found = await self.engine.store.find_documents(source_type, key, collection)
        found = [doc for doc in found if visible(doc.acl, principals)]
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
        return await self.engine.store.delete(doc_id)

    async def collections(self, principals: frozenset[str] | None = None) -> dict[str, int]:
        """Document count of every collection that holds documents `principals` may
        read (None: any document)."""
        if principals is None:
            return await self.engine.store.collections()
        counts: dict[str, int] = {}
        for count in await self.readable_counts(principals):
            counts[count.collection] = counts.get(count.collection, 0) + count.documents
        return counts

    async def readable_counts(self, principals: frozenset[str]) -> list[ReadableCount]:
        """The documents `principals` may read, and their passages, counted by
        collection and source, in the store's own query where it has one."""
        return await self.engine.store.readable_counts(principals)

    async def list_documents(
        self, page: DocumentPage, principals: frozenset[str] | None = None
    ) -> list[DocumentSummary]:
        """One page of a listing, of the documents `principals` may read: the hidden
        ones are skipped before the page is cut (by the store's query where it can)."""
        if principals is None:
            return await self.engine.store.list_documents(page)
        found: list[DocumentSummary] = []
        asked = replace(page, readers=principals)
        while len(found) < page.limit and (listed := await self.engine.store.list_documents(asked)):
            found += [doc for doc in listed if visible(doc.acl, principals)]
            asked = replace(asked, after=listed[-1].id)
        return found[: page.limit]

    async def require_collection(
        self, collection: str, principals: frozenset[str] | None = None
    ) -> None:
        """CollectionNotFound, listing the collections, unless `collection` holds
        documents (that `principals` may read) or is the default one (an empty knowledge
        base is not a typo). The reading routes call it once a search found nothing, so
        a found passage costs no count of the collections."""
        if collection == DEFAULT_COLLECTION:
            return
        existing = await self.collections(principals)
        if collection not in existing:
            raise CollectionNotFound.among(collection, existing)

    async def require_collections(
        self, collections: Sequence[str], principals: frozenset[str] | None = None
    ) -> None:
        """CollectionNotFound for the first of `collections` that holds no documents
        (that `principals` may read; the default one excepted): several searched as one
        are checked before the search, with one count of the collections."""
        missing = [name for name in collections if name != DEFAULT_COLLECTION]
        if not missing:
            return
        existing = await self.collections(principals)
        for name in missing:
            if name not in existing:
                raise CollectionNotFound.among(name, existing)

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        return self.engine.store.iter_documents(collection)

    async def seed(self, loaded: Loaded) -> None:
        """Index the seed documents `loaded` as the source SEED_SOURCE, counting them in
        `seeding` as they are written (see Startup.seed_in_background)."""

        def progress(documents: int) -> None:
            self.engine.seeding["done"] += documents

        try:
            summary = await self.ingest(loaded, progress, SEED_SOURCE)
            await self.trail.audit(
                Actor("service"),
                "seed",
                loaded.documents[0].collection if loaded.documents else None,
                changes(loaded.documents, summary),
            )
        except (KnowledgeAPIError, OSError) as e:
            self.engine.seeding["error"] = f"{type(e).__name__}: {e}"
            log.error("seeding the empty store from %s failed: %s", self.seed_path(), e)
            return
        log.info(
            "seeded the empty store from %s: %d documents, %d passages",
            self.seed_path(),
            summary.documents,
            summary.chunks,
        )
        self.engine.seeding = {}

    def seeding_progress(self) -> str:
        seeding = self.engine.seeding
        return f"{seeding.get('done', 0)} of {seeding.get('total', '?')} documents"

    def seed_path(self) -> Path:
        if self.engine.settings.seed_path:
            return Path(self.engine.settings.seed_path)
        return Path(str(resources.files("knowledge_api").joinpath("docs")))


def read_chunked(
    path: Path, name: str, options: LoadOptions, max_passages: int
) -> tuple[list[Document], str]:
    loaded = load_files([(path, name)], options)
    if not loaded.documents:
        first = next((s for s in loaded.skipped if s.reason != "bad record"), None)
        if first is not None:
            raise ExtractionError(first.reason, first.detail)
        refused = loaded.skipped
        why = f"{refused[0].path}: {refused[0].detail}" if refused else "the file holds no record"
        raise ExtractionError("no documents", why)
    documents = chunked(loaded.documents)
    passages = sum(len(doc.chunks) for doc in documents)
    if passages > max_passages:
        raise ExtractionError(
            "too many passages",
            f"its text makes {passages:,} passages, more than {max_passages:,} "
            "(KNOWLEDGE_MAX_FILE_PASSAGES)",
        )
    return documents, left_out(loaded.skipped)


def left_out(skipped: Sequence[Skipped]) -> str:
    """What of a file indexed was left out, or "": its parts that could not be read
    (a mailbox's broken message), then its records that break the rules of a document."""
    records = [s for s in skipped if s.reason == "bad record"]
    parts = [f"{s.reason}: {s.detail}" for s in skipped if s.reason != "bad record"]
    return "; ".join([*parts, records_left_out(records)] if records else parts)


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
