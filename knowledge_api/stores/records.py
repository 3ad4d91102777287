"""Documents and chunks as flat records, and the one mapping from a stored row or
record (a SQLite row, a Postgres row, a Chroma or Qdrant payload) back to the models.

Engines that keep points with metadata rather than tables (Chroma, Qdrant) store the
records themselves: each keeps a catalog collection named `<prefix>` with one record per
document (its full text, title, metadata, content hash, timestamps) and one collection per
knowledge collection, `<prefix>-<collection>`, with one record per chunk: its vector,
text and the fields that filters and hits need.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from knowledge_api import validation
from knowledge_api.errors import ConfigurationError, IndexingError
from knowledge_api.filters import millis_of, words
from knowledge_api.models import (
    Chunk,
    Document,
    DocumentSummary,
    EmbedderIdentity,
    Metadata,
    SearchHit,
)

Record = dict[str, Any]
Row = Mapping[str, Any] | sqlite3.Row
R = TypeVar("R", bound=Row)
"""A stored row or record read back, indexed by column name."""

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{1,38}[A-Za-z0-9]")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?")


def check_prefix(prefix: str, setting: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"{setting} must be 3-40 letters, digits, '_' or '-', starting and ending with a "
            f"letter or digit; got {prefix!r}"
        )
    return prefix


def chunk_collection(prefix: str, collection: str) -> str:
    """The engine collection holding the chunks of a knowledge collection.

    Plain names are kept readable (`knowledge-default`); any other name is hashed, and
    a hashed name starts with '_', which no plain name does, so names never collide.
    """
    if _PLAIN_NAME.fullmatch(collection):
        return f"{prefix}-{collection}"
    digest = hashlib.blake2b(collection.encode("utf-8"), digest_size=16).hexdigest()
    return f"{prefix}-_{digest}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def writable(documents: Sequence[Document], embedder: EmbedderIdentity | None) -> list[Document]:
    """The documents to write (the last version of a repeated one), refused before
    anything is written when no embedder is recorded or a chunk has no vector."""
    if embedder is None:
        raise IndexingError("no embedder recorded: call check_embedder before indexing")
    for doc in documents:
        for chunk in doc.chunks:
            if chunk.embedding is None:
                raise IndexingError(
                    f"chunk {chunk.chunk_index} of {doc.source_id!r} has no embedding"
                )
    return list({doc.id: doc for doc in documents}.values())


def stored_embedder(record: Record) -> EmbedderIdentity | None:
    if "embedder" not in record:
        return None
    return EmbedderIdentity(str(record["embedder"]), int(record["embedder_dimension"]))


def embedder_record(embedder: EmbedderIdentity) -> Record:
    return {"embedder": embedder.name, "embedder_dimension": embedder.dimension}


# -- documents -----------------------------------------------------------------------


def document_record(doc: Document, created_at: str, updated_at: str) -> Record:
    return {
        "collection": doc.collection,
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "title": doc.title,
        "content_hash": doc.content_hash,
        "chunk_count": len(doc.chunks),
        "created_at": created_at,
        "updated_at": updated_at,
        "metadata": json.dumps(doc.metadata),
        "source": doc.source,
        "acl": json.dumps(list(doc.acl)),
    }


def document_from_record(record: Row, content: str, chunks: list[Chunk]) -> Document:
    return Document(
        source_type=record["source_type"],
        source_id=record["source_id"],
        content=content,
        title=record["title"],
        metadata=decoded(record["metadata"]),
        collection=record["collection"],
        chunks=sorted(chunks, key=lambda c: c.chunk_index),
        created_at=as_timestamp(record["created_at"]),
        updated_at=as_timestamp(record["updated_at"]),
        source=source_of(record),
        acl=acl_of(record),
    )


def acl_of(record: Row) -> tuple[str, ...]:
    """The access list a record keeps (JSON text or a list; a stored one holds the
    marker `STORED_ACL` leads with), public when written before access lists were kept."""
    keys = record.keys()
    found = record["acl"] if "acl" in keys else None
    if found is None:
        return ("public",)
    listed = json.loads(found) if isinstance(found, str | bytes) else found
    return tuple(each for each in listed if each != STORED_ACL)


STORED_ACL = "~"
"""The first entry of an access list as an engine without tables keeps it on each
chunk (Chroma, Qdrant): never a principal, it tells a closed document (the marker
alone) from a chunk written before access lists were kept (no list at all)."""


def stored_acl(acl: Sequence[str]) -> list[str]:
    """The access list as Chroma and Qdrant keep it on each chunk."""
    return [STORED_ACL, *acl]


def summary_of(record: Row, doc_id: str, chunks: int) -> DocumentSummary:
    """A document as a listing shows it, from its catalog record (the columns every
    catalog names alike); `chunks`: how many passages it has."""
    return DocumentSummary(
        doc_id,
        record["collection"],
        record["source_type"],
        record["source_id"],
        source_of(record),
        record["title"],
        decoded(record["metadata"]),
        chunks,
        as_timestamp(record["updated_at"]),
        as_timestamp(record["created_at"]),
        acl_of(record),
    )


def source_of(record: Row) -> str:
    """The source a record names ('' when written before sources were kept)."""
    # a sqlite3.Row's `in` looks among its values: its keys are asked for by name
    return str(record["source"]) if "source" in record.keys() else ""  # noqa: SIM118


def decoded(metadata: Any) -> Metadata:
    """Metadata stored as JSON text, or already decoded (jsonb, a payload)."""
    return restored(json.loads(metadata) if isinstance(metadata, str | bytes) else metadata)


def restored(metadata: Mapping[str, Any]) -> Metadata:
    """Metadata as it was written: jsonb keeps numbers as decimals and prints 1e300 in
    full, which a JSON reader takes for an integer; integers outside 64 bits are refused
    on the way in, so such a number was a float."""
    if all(validation.is_int64(value) for value in metadata.values()):
        return metadata if isinstance(metadata, dict) else dict(metadata)
    return {k: v if validation.is_int64(v) else float(v) for k, v in metadata.items()}


def carried_dates(doc: Document) -> tuple[datetime | None, datetime | None]:
    """The dates a document carries (read from a store or an export), None where it
    carries none: the store stamps the write's time there."""
    return parsed_date(doc.created_at), parsed_date(doc.updated_at)


def parsed_date(value: str) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def as_timestamp(value: Any) -> str:
    """ISO 8601 to the second, from text or a datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return str(value.isoformat(timespec="seconds"))


# -- chunks ----------------------------------------------------------------------------


def chunk_record(doc: Document, chunk: Chunk) -> Record:
    """The chunk's fields; each backend adds the document metadata its own way."""
    return {
        "document_id": doc.id,
        "chunk_index": chunk.chunk_index,
        "chunk_count": len(doc.chunks),
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "title": chunk.title,
        "section": chunk.section,
        "content_hash": chunk.content_hash,
        **offsets_record(chunk),
    }


OFFSETS = ("start", "end", "page")
"""A chunk's place in its document (`Chunk.start`, `end`, `page`), as records name it;
the SQL tables name the first two start_offset, end_offset."""


def offsets_record(chunk: Chunk) -> Record:
    """The offsets the chunk has (an engine's metadata holds no null)."""
    return {name: value for name in OFFSETS if (value := getattr(chunk, name)) is not None}


def offsets_of(record: Row) -> dict[str, int | None]:
    """The offsets a record or row carries: None where it carries none."""
    keys = record.keys()
    found: dict[str, int | None] = {}
    for name, column in zip(OFFSETS, ("start_offset", "end_offset", "page"), strict=True):
        key = name if name in keys else column
        found[name] = offset(record[key] if key in keys else None)
    return found


def offset(value: Any) -> int | None:
    """One offset as a stored row holds it (None: not recorded)."""
    return None if value is None else int(value)


def filter_record(doc: Document) -> Record:
    """What an engine whose filters know only values, ranges of numbers and lists needs
    to apply the filter language (knowledge_api.filters) in its own query: the keys of
    the metadata and those holding numbers and dates, each date as epoch milliseconds,
    the words of each text, the words of the source id, and the document's timestamps
    as epoch milliseconds. The document's timestamps must be set."""
    numbers = [
        k for k, v in doc.metadata.items() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    texts = {k: v for k, v in doc.metadata.items() if isinstance(v, str)}
    dates = {k: at for k, v in texts.items() if (at := millis_of(v)) is not None}
    return {
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "created_ms": millis_of(doc.created_at),
        "updated_ms": millis_of(doc.updated_at),
        "keys": list(doc.metadata),
        "numbers": numbers,
        "dates": list(dates),
        "ms": dates,
        "words": {k: found for k, v in texts.items() if (found := words(v))},
        "source_words": words(doc.source_id),
    }


def chunk_from_record(
    chunk_id: str, record: Row, content: str, embedding: np.ndarray | None = None
) -> Chunk:
    return Chunk(
        id=chunk_id,
        document_id=str(record["document_id"]),
        chunk_index=int(record["chunk_index"]),
        content=content,
        title=record["title"],
        section=record["section"],
        chunk_count=int(record["chunk_count"]),
        embedding=embedding,
        **offsets_of(record),
    )


def hit_from_record(
    chunk_id: str, record: Row, content: str, metadata: Metadata, score: float, similarity: float
) -> SearchHit:
    return SearchHit(
        chunk=chunk_from_record(chunk_id, record, content),
        document_id=str(record["document_id"]),
        source_type=record["source_type"],
        source_id=record["source_id"],
        metadata=restored(metadata),
        score=score,
        similarity=similarity,
        created_at=stored_date(record, "created_at"),
        updated_at=stored_date(record, "updated_at"),
        collection=str(record["collection"]) if "collection" in record.keys() else "",  # noqa: SIM118
    )


def stored_date(record: Row, name: str) -> str:
    """A date of the document the row carries (ISO 8601 to the second, as documents
    read back: a Postgres row holds a datetime), empty when it carries none."""
    # keys(): `in` looks among a sqlite3.Row's values
    return date_text(record[name] if name in record.keys() else None)  # noqa: SIM118


def date_text(value: Any) -> str:
    """A stored date as `stored_date` gives it, from the value alone."""
    if value is None or value == "":
        return ""
    return _date_text(value) if isinstance(value, str) else _as_stored(value)


@functools.lru_cache(maxsize=4096)
def _date_text(value: str) -> str:
    """Text dates parsed once: a store's documents share few write times, and every hit
    of a search carries two."""
    return _as_stored(value)


def _as_stored(value: Any) -> str:
    try:
        return as_timestamp(value)
    except ValueError:  # text that is no ISO 8601 date (an imported file's): as stored
        return str(value)


# -- generation ------------------------------------------------------------------------

POLL_SECONDS = 0.5


class Generation:
    """Changes on every write: this client's writes at once, other clients' writes
    (another replica on the same server) within `poll_seconds`, through a token every
    writer stores in the engine. The generation is that token, so every replica that
    read it names the same content alike (a shared cache keys answers on it)."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self.token = ""
        self._next_poll = 0.0
        self._stale = False

    def wrote(self) -> str:
        """A write of ours (stored or failed half way): the new token to store beside it."""
        self.token = uuid.uuid4().hex
        return self.token

    async def current(
        self,
        read_token: Callable[[], Awaitable[str]],
        changed: Callable[[], Awaitable[None]] | None = None,
    ) -> Hashable:
        """The generation, after reading the stored token if a poll is due; `changed`
        runs when another client wrote since the last look."""
        if self._stale or time.monotonic() >= self._next_poll:
            token = await read_token()
            self._next_poll = time.monotonic() + self.poll_seconds
            if token != self.token or self._stale:
                self.token = token
                if changed is not None:
                    await changed()
                self._stale = False
        return self.token

    def forget(self) -> None:
        """What this client mirrors of the engine may be wrong (a write failed half
        way): the next `current` runs `changed` whatever the token says."""
        self._stale = True


def is_uuid(value: str) -> bool:
    """Whether `value` can be a document id of the stores that key documents by UUID."""
    return validation.parses(uuid.UUID, value)


def named(rows: Sequence[R], key: str) -> list[R]:
    """Of the rows a lookup by `key` found (ordered with those whose source id `key` is
    first): those whose source id it is, one per source, else the first (the document
    whose id, or whose chunk's id, `key` is)."""
    by_source_id = [row for row in rows if row["source_id"] == key]
    return by_source_id or list(rows[:1])
