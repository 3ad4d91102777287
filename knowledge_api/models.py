"""Dataclasses of the domain: documents, chunks, search hits and requests."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from knowledge_api.filters import Node

SOURCE_TYPES = ("git", "jira", "knowledge", "wiki", "email", "metrics")
DEFAULT_COLLECTION = "default"
_NAMESPACE = uuid.UUID("6f1c2d0e-8b1a-4c55-9d5e-3a1f0b6c7d20")

Metadata = dict[str, Any]
SearchMode = Literal["hybrid", "vector", "keyword"]
SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "vector", "keyword")


def content_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def document_id(collection: str, source_type: str, source_id: str) -> str:
    """Stable uuid of a document: re-ingesting the same source finds the same row."""
    return str(uuid.uuid5(_NAMESPACE, f"{collection}\x1f{source_type}\x1f{source_id}"))


def chunk_id(doc_id: str, index: int) -> str:
    return str(uuid.uuid5(uuid.UUID(doc_id), str(index)))


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """What a store records of the embedder that wrote its vectors: vectors of another
    name or dimension are never mixed with them."""

    name: str
    dimension: int


@dataclass(slots=True)
class Chunk:
    """A passage of a document, the unit that is embedded and searched."""

    id: str
    document_id: str
    chunk_index: int
    content: str
    title: str = ""
    section: str = ""
    embedding: np.ndarray | None = None
    chunk_count: int = 1

    @property
    def embedded_text(self) -> str:
        """What the embedder sees: the heading path gives a passage its context."""
        heading = " > ".join(part for part in (self.title, self.section) if part)
        return f"{heading}\n{self.content}" if heading else self.content

    @property
    def content_hash(self) -> str:
        return content_hash(self.embedded_text)


@dataclass(slots=True)
class Document:
    source_type: str
    source_id: str
    content: str
    title: str = ""
    metadata: Metadata = field(default_factory=dict)
    collection: str = DEFAULT_COLLECTION
    chunks: list[Chunk] = field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""

    @property
    def id(self) -> str:
        return document_id(self.collection, self.source_type, self.source_id)

    @property
    def content_hash(self) -> str:
        """Hash of everything that reaches the store: unchanged hash, nothing to do."""
        meta = repr(sorted(self.metadata.items()))
        chunks = "\x1e".join(c.content_hash for c in self.chunks)
        return content_hash(f"{self.title}\x1f{meta}\x1f{chunks}")


@dataclass(slots=True)
class SearchHit:
    """A chunk found by search, with the facts fusion and the response need."""

    chunk: Chunk
    document_id: str
    source_type: str
    source_id: str
    metadata: Metadata
    score: float
    similarity: float


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Where a search looks: the source types, the filter tree (knowledge_api.filters)
    the passages must pass, and the collection."""

    source_types: tuple[str, ...] | None = None
    where: Node | None = None
    collection: str = DEFAULT_COLLECTION


@dataclass(frozen=True, slots=True)
class IndexSummary:
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    skipped: int = 0

    def __add__(self, other: IndexSummary) -> IndexSummary:
        return IndexSummary(
            self.documents + other.documents,
            self.chunks + other.chunks,
            self.embedded + other.embedded,
            self.skipped + other.skipped,
        )


def normalize_query(text: str) -> str:
    """Case and spacing do not change the answer (the model is uncased)."""
    return " ".join(text.casefold().split())


@dataclass(frozen=True, slots=True)
class SearchParams:
    """What a search-backed request asks: its text, where to look and what to keep."""

    query: str
    threshold: float = 0.2
    sources: tuple[str, ...] | None = None
    limit: int = 5
    filters: Node | None = None
    collection: str = DEFAULT_COLLECTION

    def cache_key(self) -> tuple[Any, ...]:
        """What the answer depends on, for tier 1: the kind of request and every
        parameter, the query normalised."""
        values = [getattr(self, each.name) for each in fields(self)[1:]]
        return (type(self).__name__, normalize_query(self.query), *values)

    def search_filters(self) -> SearchFilters:
        return SearchFilters(self.sources, self.filters, self.collection)
