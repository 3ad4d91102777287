"""A collection written out to a file and read back: JSON lines, vectors included.

The first line names the format and the embedder that made the vectors; each next line
is one document with its metadata, its source and its chunks, each chunk with its
vector (float32, little-endian, base64). A name ending in `.gz` is gzip-compressed, one
ending in `.zst` zstd-compressed (the `zstd` extra). Reading it back into a store of
the same embedder embeds nothing; into a store of another embedder the documents are
chunked and embedded again, and the caller says so.

A file is read twice: every line is checked (the rules of `POST /v1/knowledge/documents`,
and vectors as embedders write them) before the first document is written, so a bad file
writes nothing and its error names the line and the field.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import os
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest.pipeline import Ingestor, changed_only
from knowledge_api.ledger import MAX_AUDITED_IDS
from knowledge_api.models import (
    SOURCE_TYPES,
    Chunk,
    Document,
    EmbedderIdentity,
    Progress,
    chunk_id,
)
from knowledge_api.principals import PUBLIC_ACL, acl_of
from knowledge_api.registry import import_extra
from knowledge_api.stores import records
from knowledge_api.stores.base import KnowledgeStore

FORMAT = "knowledge-api-export"
VERSION = 1
BATCH_DOCUMENTS = 256
DOCUMENT_FIELDS = (
    "collection",
    "source_type",
    "source_id",
    "source",
    "title",
    "content",
    "metadata",
    "created_at",
    "updated_at",
    "chunks",
    "acl",
)
CHUNK_FIELDS = ("chunk_index", "title", "section", "content", "vector", "start", "end", "page")
MAX_CHUNK_INDEX = 2**31 - 1
"""The largest chunk index every store keeps (Postgres's integer column)."""
ANY_LENGTH = 2**62
"""Texts of a file are not held to the lengths of a request: ingested files have none."""
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
    """The file, through the compression its name (or `name`) says; `rb` or `wb`. Read,
    a truncated or damaged file is an InvalidRequest naming it, not a traceback."""
    name = (name or path.name).lower()
    if "w" in mode:
        with coded(path, name, mode) as out:
            yield out
        return
    zstd = import_extra("zstandard", "zstd") if name.endswith(".zst") else None
    damaged: tuple[type[BaseException], ...] = (gzip.BadGzipFile, zlib.error)
    if zstd is not None:
        damaged += (zstd.ZstdError,)
    try:
        with coded(path, name, mode) as lines:
            yield lines
    except EOFError as e:
        raise InvalidRequest(str(path), f"is truncated: {e}") from e
    except damaged as e:
        raise InvalidRequest(str(path), f"is not a readable {Path(name).suffix} file ({e})") from e


@contextmanager
def coded(path: Path, name: str, mode: str) -> Iterator[IO[bytes]]:
    """The file opened in `mode` (rb or wb) through the compression `name` says."""
    if name.endswith(".zst"):
        zstd_stream = zstd_streams(mode)  # a missing extra says so before a file is made
        with path.open(mode) as raw, zstd_stream(raw) as stream:
            yield stream
    elif name.endswith(".gz"):
        with gzip.open(path, mode) as compressed:
            yield compressed  # type: ignore[misc]
    else:
        with path.open(mode) as plain:
            yield plain


def zstd_streams(mode: str) -> Callable[[IO[bytes]], AbstractContextManager[IO[bytes]]]:
    """How a zstd file opened raw is read (frame by frame, see Unzstd) or written."""
    if "w" not in mode:
        return lambda raw: nullcontext(io.BufferedReader(Unzstd(raw)))
    zstd = import_extra("zstandard", "zstd")
    return lambda raw: zstd.ZstdCompressor().stream_writer(raw, closefd=False)


class Unzstd(io.RawIOBase):
    """zstd frames read as they are decompressed, a file that ends inside a frame an
    EOFError (zstandard's stream reader ends there as if the file were whole). Input is
    fed a KiB at a time, which bounds what one step can expand to."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.frames = import_extra("zstandard", "zstd").ZstdDecompressor()
        self.frame = self.frames.decompressobj()
        self.inside = False
        """Whether the current frame has begun and not ended."""
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = b""
            if self.frame.eof:
                data = self.frame.unused_data
                self.frame, self.inside = self.frames.decompressobj(), False
            data = data or self.raw.read(1024)
            if not data:
                if self.inside:
                    raise EOFError("the file ends inside a zstd frame")
                return 0
            self.inside = True
            self.pending = self.frame.decompress(data)
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size


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
        "acl": list(doc.acl),
        "chunks": [
            {
                "chunk_index": chunk.chunk_index,
                "title": chunk.title,
                "section": chunk.section,
                "content": chunk.content,
                "vector": encoded(chunk.embedding),
                **records.offsets_record(chunk),
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
    checked: EmbedderIdentity | None = None,
) -> Transferred:
    """Read a file written by `export_collection` into `store` (into `collection`, or
    the one it was exported from). The file's vectors are stored as they are when they
    are `embedder`'s; otherwise `embed` embeds the documents again. Every line is
    checked before anything is written (`checked`: the file's embedder, as `check_file`
    found it for a caller that checked the file already)."""
    embedder = EmbedderIdentity(embedder.name, embedder.dimension)  # an embedder names itself
    await store.check_embedder(embedder.name, embedder.dimension)
    file_embedder = checked or check_file(path, collection)
    same = file_embedder == embedder
    if not same and embed is None:
        raise InvalidRequest(
            str(path), f"holds vectors of {file_embedder.name!r}: it must be embedded again"
        )
    done = Transferred(embedder=file_embedder)
    batch: list[Document] = []
    for doc in documents(path, collection):
        batch.append(doc)
        if len(batch) == BATCH_DOCUMENTS:
            await write(store, embedder, batch, same, embed, done, progress)
            batch = []
    await write(store, embedder, batch, same, embed, done, progress)
    for name, source in sorted(done.sources):
        await store.record_source(name, source)
    return done


def check_file(path: Path, collection: str | None) -> EmbedderIdentity:
    """The embedder of the file's vectors, once every line has been read and checked; a
    document named twice is refused too (the second would replace the first)."""
    seen: dict[str, int] = {}
    for number, doc in enumerate(documents(path, collection), start=2):
        if doc.id in seen:
            raise InvalidRequest(
                f"{path}:{number}",
                f"repeats the document of line {seen[doc.id]} "
                f"({doc.source_type} {doc.source_id!r} in {doc.collection})",
            )
        seen[doc.id] = number
    with opened(path, "rb") as lines:
        return read_header(next(iter(lines), b""), path)


def documents(path: Path, collection: str | None) -> Iterator[Document]:
    """The file's documents, each checked as it is read."""
    with opened(path, "rb") as lines:
        embedder = read_header(next(iter(lines), b""), path)
        for number, line in enumerate(lines, start=2):
            if line.strip():
                yield read_document(line, f"{path}:{number}", collection, embedder)


def read_header(line: bytes, path: Path) -> EmbedderIdentity:
    try:
        found = orjson.loads(line)
        if found["format"] != FORMAT:
            raise ValueError(found["format"])
        if found["version"] != VERSION:
            raise InvalidRequest(str(path), f"is of version {found['version']}, not {VERSION}")
        name, dimension = found["embedder"]["name"], found["embedder"]["dimension"]
        if (
            not isinstance(name, str)
            or isinstance(dimension, bool)
            or not isinstance(dimension, int)
            or dimension < 1
        ):
            raise ValueError(f"embedder {found['embedder']!r}")
        return EmbedderIdentity(name, dimension)
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequest(str(path), f"is not a file `knowledge-api export` wrote ({e})") from e


def read_document(
    line: bytes, where: str, collection: str | None, embedder: EmbedderIdentity
) -> Document:
    """A document line held to the rules of `POST /v1/knowledge/documents` (but not its
    lengths); an error names the line (`where`) and the field."""
    try:
        found = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise InvalidRequest(where, f"is not a JSON line ({e})") from e
    with naming(f"{where} "):
        body = validation.require_object(found, "line")
        validation.reject_unknown(body, DOCUMENT_FIELDS)
        doc = Document(
            source_type=validation.one_of(body, "source_type", allowed=SOURCE_TYPES),
            source_id=validation.text(body, "source_id", max_length=ANY_LENGTH),
            content=validation.text(body, "content", max_length=ANY_LENGTH, default=""),
            title=validation.text(body, "title", max_length=ANY_LENGTH, default=""),
            metadata=metadata(body),
            collection=collection or validation.collection_name(body.get("collection")),
            created_at=date(body, "created_at"),
            updated_at=date(body, "updated_at"),
            source=source(body),
            acl=acl_of(body["acl"]) if "acl" in body else PUBLIC_ACL,
        )
        chunks = body.get("chunks", [])
        if not isinstance(chunks, list):
            raise InvalidRequest("chunks", "must be a list")
        doc.chunks = []
        for i, item in enumerate(chunks):
            with naming(f"chunks[{i}]."):
                doc.chunks.append(read_chunk(item, doc, len(chunks), embedder.dimension))
        indexes = [chunk.chunk_index for chunk in doc.chunks]
        if len(set(indexes)) != len(indexes):
            repeated = next(i for i in indexes if indexes.count(i) > 1)
            raise InvalidRequest("chunks", f"must not repeat a chunk_index ({repeated} twice)")
    return doc


@contextmanager
def naming(prefix: str) -> Iterator[None]:
    """An InvalidRequest raised inside names its field after `prefix`."""
    try:
        yield
    except InvalidRequest as e:
        details = dict(e.details)
        field, rule = details.pop("field"), details.pop("rule")
        raise InvalidRequest(f"{prefix}{field}", rule, **details) from e


def metadata(body: dict[str, Any]) -> dict[str, Any]:
    """The rules of a request's metadata (`validation.scalar_mapping`), and lists of such
    values, which git commits carry (their paths)."""
    value = body.get("metadata", {})
    if not isinstance(value, dict):
        raise InvalidRequest("metadata", "must be an object")
    lists = {key: items for key, items in value.items() if isinstance(items, list)}
    scalars = {key: item for key, item in value.items() if key not in lists}
    checked = validation.scalar_mapping({"metadata": scalars}, "metadata")
    for key, items in lists.items():
        if not validation.plain_key(key):
            validation.scalar_mapping({"metadata": {key: ""}}, "metadata")  # names the rule
        listed = {str(i): item for i, item in enumerate(items)}
        checked[key] = list(
            validation.scalar_mapping({f"metadata.{key}": listed}, f"metadata.{key}").values()
        )
    return checked


def source(body: dict[str, Any]) -> str:
    value = body.get("source", "")
    return value and validation.source_name(value)


def date(body: dict[str, Any], field: str) -> str:
    """An ISO 8601 instant with its offset, in UTC to the second as stores write them;
    empty: none (the store stamps the time of the write)."""
    value = validation.text(body, field, max_length=64, default="")
    if value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise InvalidRequest(field, "must be an ISO 8601 date and time with its offset")
        return parsed.astimezone(UTC).isoformat(timespec="seconds")  # as stores write them
    return value


def read_chunk(item: Any, doc: Document, count: int, dimension: int) -> Chunk:
    body = validation.require_object(item, "chunk")
    validation.reject_unknown(body, CHUNK_FIELDS)
    index = validation.integer(
        body, "chunk_index", low=0, high=MAX_CHUNK_INDEX, default=validation.REQUIRED
    )
    return Chunk(
        id=chunk_id(doc.id, index),
        document_id=doc.id,
        chunk_index=index,
        content=validation.text(body, "content", max_length=ANY_LENGTH),
        title=validation.text(body, "title", max_length=ANY_LENGTH, default=""),
        section=validation.text(body, "section", max_length=ANY_LENGTH, default=""),
        embedding=decoded(body.get("vector"), dimension),
        chunk_count=count,
        start=offset(body, "start"),
        end=offset(body, "end"),
        page=offset(body, "page"),
    )


def offset(body: dict[str, Any], field: str) -> int | None:
    """A chunk's start, end or page; None when the file (an older one) has none."""
    if body.get(field) is None:
        return None
    return validation.integer(body, field, low=0, high=MAX_CHUNK_INDEX, default=0)


def decoded(text: Any, dimension: int) -> np.ndarray:
    """A vector as embedders write them: `dimension` finite values, not all zero, kept
    at unit length (stores score by dot product: a vector of 1e38s would match every
    query at 1.0)."""
    if not isinstance(text, str):
        raise InvalidRequest("vector", "must be base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise InvalidRequest("vector", f"must be base64 text ({e})") from e
    if len(raw) != 4 * dimension:
        raise InvalidRequest(
            "vector", f"must hold {dimension} float32 values, not {len(raw) / 4:g}"
        )
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if not np.isfinite(vector).all():
        raise InvalidRequest("vector", "must hold finite values (no NaN or infinity)")
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        raise InvalidRequest("vector", "must not be all zeros")
    return (vector / norm).astype(np.float32)


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
