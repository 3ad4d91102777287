"""The KnowledgeStore protocol: what every backend offers the service.

A store keeps documents, their chunks and the chunks' vectors; it never embeds
(the service does), so a collection can move between backends with its vectors.
The backends share their search through `HybridSearch` (stores/hybrid.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Hashable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from knowledge_api.errors import EmbedderMismatchError
from knowledge_api.facets import Facets
from knowledge_api.models import (
    SETTINGS_RANKING,
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    EmbedderIdentity,
    Ranking,
    ReadableCount,
    SearchFilters,
    SearchHit,
    SearchMode,
    SourceInfo,
)
from knowledge_api.stores.tables import SideTables


class SearchRequest(NamedTuple):
    """One search asked of a store, built once by its caller and passed through whole
    (a tuple: as cheap to build as the arguments it holds)."""

    query: str
    vector: np.ndarray | None
    """The query's vector; None searches by keyword alone."""
    top_k: int
    """Hits returned at the most."""
    filters: SearchFilters
    threshold: float = 0.0
    """The least similarity a hit keeps."""
    mode: SearchMode = "hybrid"
    ranking: Ranking = SETTINGS_RANKING


class KnowledgeStore(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def index_document(self, document: Document) -> None:
        """Insert or replace a document and its embedded chunks, atomically."""

    async def index_documents(self, documents: Sequence[Document]) -> None:
        """Index many; each document is atomic on its own."""

    async def index_batches(
        self, batches: AsyncIterable[Sequence[Document]], expected: int = 0
    ) -> None:
        """Index a stream of document sets (a migration); `expected`: the passages at
        least coming, for a backend that loads differently in bulk."""

    async def search(self, request: SearchRequest) -> list[SearchHit]:
        """Hits fused from vector and keyword rankings (or one of them, by `mode`), as
        the request's `ranking` (fusion, vector weight, feedback round) asks."""

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        """How many passages `filters` lets through hold each value of each field
        (knowledge_api.facets), counted in the backend's own query."""

    async def get_by_id(self, doc_id: str) -> Document | None: ...

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        """The documents `key` names: those whose source id it is (one per source that
        produced one, by source), else the one whose id or whose chunk's id it is."""

    async def delete(self, doc_id: str) -> bool: ...

    async def health_check(self) -> dict[str, Any]: ...

    def reads(self) -> dict[str, int]:
        """Reads a primary or a read replica served, by replica host:port ("": the primary)."""
        ...

    async def count(self) -> int:
        """Number of documents stored."""

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]: ...

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The stored text of each of these documents that exists (the words behind a
        citation are read there), without its chunks."""
        ...

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    async def generation(self) -> Hashable:
        """A token that changes whenever the stored content changes."""

    async def collection_generation(self, collection: str) -> Hashable:
        """A token that changes whenever a document of `collection` changes, by a write
        of any process; a write to another collection may leave it be."""

    async def check_embedder(self, name: str, dimension: int) -> None:
        """Record the embedder on first use; refuse a different one later."""

    async def collections(self) -> dict[str, int]:
        """Document count of every collection that holds documents."""

    def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        """Every document of a collection with its chunks and their embeddings."""
        ...

    def side_tables(self, sqlite_path: Path) -> SideTables:
        """Where the deployment keeps its API keys, audit trail, answered queries and
        upload jobs (see stores/tables/): `sqlite_path` for a store without a database
        of its own."""
        ...

    # -- sources and listings ------------------------------------------------------

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        """Document id -> source id of every document `source` produced in `collection`."""

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        """Delete these documents with their chunks; how many existed."""

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        """Give these documents (and their chunks) the access list `acl`, embedding
        nothing again; how many existed. Their collection's generation moves."""

    async def record_source(
        self, collection: str, source: str, root: str = "", connector: str = ""
    ) -> None:
        """Note that `source` ran now (its documents are those indexed with its name),
        reading files from `root` (kept when empty: a run that names none); `connector`
        is a connector source's record as JSON (kept when empty)."""

    async def delete_source(self, collection: str, source: str) -> int:
        """Delete every document of the source, and the source; how many documents went."""

    async def lease_source(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        """Take or renew the source's lease as `holder` for `seconds`, unless another
        holder's lease still runs: whether `holder` holds it now (one sync of a source
        at a time, across processes). `seconds` 0 lets it go."""

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        """The sources (of one collection, or all), by collection and name."""

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        """One page of a collection's documents, in id order (a keyset: ids after
        `page.after`), without their text; a store that indexes access lists lists
        only those `page.readers` may read."""

    async def collection_stats(self) -> list[CollectionInfo]:
        """Every collection holding documents or sources, by name."""

    async def readable_counts(self, principals: frozenset[str]) -> list[ReadableCount]:
        """The documents `principals` may read and their passages, counted by
        collection and source (those with none left out), in that order."""


def embedder_mismatch(
    where: str, stored: EmbedderIdentity, configured: EmbedderIdentity, remedy: str
) -> EmbedderMismatchError:
    """The error of a store asked to take vectors of another embedder than its own."""
    return EmbedderMismatchError(
        f"{where} holds vectors of embedder {stored.name!r} ({stored.dimension}-d); the "
        f"configured embedder is {configured.name!r} ({configured.dimension}-d). Mixing "
        f"vector spaces would return nonsense: use the original embedder, or {remedy}.",
        stored=stored.name,
        configured=configured.name,
    )
