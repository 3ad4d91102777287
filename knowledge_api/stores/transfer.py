"""A collection written out to a file and read back: JSON lines, vectors included.

The first line names the format and the embedder that made the vectors; each next line
is one document with its metadata, its source and its chunks, each chunk with its
vector (float32, little-endian, base64). A name ending in `.gz` is gzip-compressed, one
ending in `.zst` zstd-compressed (the `zstd` extra). Reading it back into a store of
the same embedder embeds nothing; into a store of another embedder the documents are
chunked and embedded again, and the caller says so.
"""

from __future__ import annotations

import base64
import gzip
import io
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest.pipeline import Ingestor, changed_only
from knowledge_api.ledger import MAX_AUDITED_IDS
from knowledge_api.models import Chunk, Document, EmbedderIdentity, Progress, chunk_id
from knowledge_api.registry import import_extra
from knowledge_api.stores.base import KnowledgeStore

FORMAT = "knowledge-api-export"
VERSION = 1
BATCH_DOCUMENTS = 256
EmbedFn = Callable[[Sequence[str]], Awaitable[np.ndarray]]


@dataclass
class Transferred:
    documents: int = 0
    chunks: int = 0
    skipped: int = 0
    """Documents the store already held as they are."""
    embedder: EmbedderIdentity | None = None
    """The embedder of the file's vectors."""
    embedded: int = 0
    """Passages embedded again (the file's vectors are of another embedder)."""
    sources: set[tuple[str, str]] = field(default_factory=set)
    ids: list[str] = field(default_factory=list)
    """The ids of the file's documents now stored, written or found unchanged (the first
    MAX_AUDITED_IDS: what an audit record lists)."""


@contextmanager
def opened(path: Path, mode: str, name: str = "") -> Iterator[IO[bytes]]:
    """The file, through the compression its name (or `name`) says; `rb` or `wb`."""
    name = (name or path.name).lower()
    if name.endswith(".zst"):
        zstd = import_extra("zstandard", "zstd")
        with path.open(mode) as raw:
            if "w" in mode:
                with zstd.ZstdCompressor().stream_writer(raw, closefd=False) as writer:
                    yield writer
            else:
                with zstd.ZstdDecompressor().stream_reader(raw, closefd=False) as reader:
                    yield io.BufferedReader(reader)
    elif name.endswith(".gz"):
        with gzip.open(path, mode) as compressed:
            yield compressed  # type: ignore[misc]
    else:
        with path.open(mode) as plain:
            yield plain


def check_writable(path: Path) -> None:
    """Refuse, before anything is read, a name whose compression is not installed."""
    if path.name.lower().endswith(".zst"):
        import_extra("zstandard", "zstd")


async def export_collection(
    store: KnowledgeStore,
    embedder: EmbedderIdentity,
    collection: str,
    path: Path,
    progress: Progress | None = None,
) -> Transferred:
    """Write every document of `collection`; the file appears whole or not at all."""
    check_writable(path)
    embedder = EmbedderIdentity(embedder.name, embedder.dimension)  # an embedder names itself
    done = Transferred(embedder=embedder)
    partial = path.with_name(path.name + ".part")
    try:
        with opened(partial, "wb", path.name) as out:
            out.write(orjson.dumps(header(embedder, collection)) + b"\n")
            async for doc in store.iter_documents(collection):
                out.write(orjson.dumps(document_line(doc)) + b"\n")
                done.documents += 1
                done.chunks += len(doc.chunks)
                if progress is not None:
                    progress(1)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return done


def header(embedder: EmbedderIdentity, collection: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "collection": collection,
        "embedder": {"name": embedder.name, "dimension": embedder.dimension},
    }


def document_line(doc: Document) -> dict[str, Any]:
    return {
        "collection": doc.collection,
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "source": doc.source,
        "title": doc.title,
        "content": doc.content,
        "metadata": doc.metadata,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "chunks": [
            {
                "chunk_index": chunk.chunk_index,
                "title": chunk.title,
                "section": chunk.section,
                "content": chunk.content,
                "vector": encoded(chunk.embedding),
            }
            for chunk in doc.chunks
        ],
    }


def encoded(vector: np.ndarray | None) -> str:
    if vector is None:
        return ""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


async def import_file(
    store: KnowledgeStore,
    embedder: EmbedderIdentity,
    path: Path,
    collection: str | None = None,
    embed: EmbedFn | None = None,
    progress: Progress | None = None,
) -> Transferred:
    """Read a file written by `export_collection` into `store` (into `collection`, or
    the one it was exported from). The file's vectors are stored as they are when they
    are `embedder`'s; otherwise `embed` embeds the documents again."""
    embedder = EmbedderIdentity(embedder.name, embedder.dimension)  # an embedder names itself
    await store.check_embedder(embedder.name, embedder.dimension)
    with opened(path, "rb") as lines:
        first = next(iter(lines), b"")
        file_embedder = read_header(first, path)
        done = Transferred(embedder=file_embedder)
        same = file_embedder == embedder
        if not same and embed is None:
            raise InvalidRequest(
                str(path), f"holds vectors of {file_embedder.name!r}: it must be embedded again"
            )
        batch: list[Document] = []
        for number, line in enumerate(lines, start=2):
            if line.strip():
                batch.append(read_document(line, f"{path}:{number}", collection, file_embedder))
            if len(batch) == BATCH_DOCUMENTS:
                await write(store, embedder, batch, same, embed, done, progress)
                batch = []
        await write(store, embedder, batch, same, embed, done, progress)
    for name, source in sorted(done.sources):
        await store.record_source(name, source)
    return done


def read_header(line: bytes, path: Path) -> EmbedderIdentity:
    try:
        found = orjson.loads(line)
        if found["format"] != FORMAT:
            raise ValueError(found["format"])
        if found["version"] != VERSION:
            raise InvalidRequest(str(path), f"is of version {found['version']}, not {VERSION}")
        return EmbedderIdentity(str(found["embedder"]["name"]), int(found["embedder"]["dimension"]))
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequest(str(path), f"is not a file `knowledge-api export` wrote ({e})") from e


def read_document(
    line: bytes, where: str, collection: str | None, embedder: EmbedderIdentity
) -> Document:
    try:
        found = orjson.loads(line)
        doc = Document(
            source_type=found["source_type"],
            source_id=found["source_id"],
            content=found["content"],
            title=found["title"],
            metadata=dict(found["metadata"]),
            collection=collection or found["collection"],
            created_at=found["created_at"],
            source=found["source"],
        )
        doc.chunks = [
            Chunk(
                id=chunk_id(doc.id, int(c["chunk_index"])),
                document_id=doc.id,
                chunk_index=int(c["chunk_index"]),
                content=c["content"],
                title=c["title"],
                section=c["section"],
                embedding=decoded(c["vector"], embedder.dimension),
                chunk_count=len(found["chunks"]),
            )
            for c in found["chunks"]
        ]
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequest(where, f"is not a document line ({e})") from e
    return doc


def decoded(text: str, dimension: int) -> np.ndarray:
    vector = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4")
    if vector.shape != (dimension,):
        raise ValueError(f"a vector of {vector.size} values, not {dimension}")
    return vector.astype(np.float32)


async def write(
    store: KnowledgeStore,
    embedder: EmbedderIdentity,
    batch: list[Document],
    same: bool,
    embed: EmbedFn | None,
    done: Transferred,
    progress: Progress | None,
) -> None:
    if not batch:
        return
    done.sources |= {(doc.collection, doc.source) for doc in batch if doc.source}
    room = max(0, MAX_AUDITED_IDS - len(done.ids))
    if same:
        changed = await changed_only(store, batch)
        await store.index_documents(changed)
        done.documents += len(changed)
        done.chunks += sum(len(doc.chunks) for doc in changed)
        done.skipped += len(batch) - len(changed)
    else:
        assert embed is not None
        summary = await Ingestor(store, embedder, embed).ingest(batch)
        done.documents += summary.documents
        done.chunks += summary.chunks
        done.embedded += summary.embedded
        done.skipped += summary.skipped
    done.ids += [doc.id for doc in batch[:room]]  # written or found stored: all are now
    if progress is not None:
        progress(len(batch))
