"""The SQLite store's vectors in memory: which index holds them, how it is loaded,
persisted and kept current with the file.

Up to `ann_min_chunks` chunks the vectors sit in the exact float32 `VectorIndex`. From
there on they go to a `QuantizedIndex` (int8 codes, a quarter of the memory, a fraction
of the rows scanned per query); its shortlist is rescored with the float32 vectors read
back from the file, so every cosine this module returns is exact. The quantised index
is saved beside the file (`<db>.vectors.*`) with the store's id and the last change-log
entry it holds; at start-up it is loaded, brought up to date from `vector_log`, checked
against the row count of `chunks`, and rebuilt when anything disagrees.

Every change, made here or by another process, reaches the index the same way: through
`vector_log` (migration 003), which triggers fill on each chunk insert and delete. Each
chunk row's document (`ChunkDocuments`, which a filter on metadata reads its rows
from) follows the same way.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.errors import ConfigurationError
from knowledge_api.stores.sqlite.aside import SearchAside
from knowledge_api.stores.sqlite.filtered import ChunkDocuments, hashed
from knowledge_api.stores.sqlite.quantized_index import (
    TRAINING_ROWS_PER_LIST,
    QuantizedIndex,
    list_count,
)
from knowledge_api.stores.sqlite.vector_index import Collections, VectorIndex

Index = VectorIndex | QuantizedIndex
Asked = tuple[np.ndarray, int, Collections, Sequence[str] | None, np.ndarray | None]
"""What a vector search asks of an index (`candidates`): the query vector, how many,
the collections, the source types, and the mask over row ids allowed (None: all)."""
BATCH_ROWS = 20000
COLUMNS = "rowid, collection, source_type, embedding, document_id"
"""A chunk's columns the index and `documents` hold."""
RESCORED_PER_HIT = 2
"""Shortlist of the quantised index per candidate asked for, rescored exactly."""


class SQLiteVectors:
    def __init__(self, path: Path, ann_min_chunks: int, ann_probes: int) -> None:
        self.path = path
        self.ann_min_chunks = ann_min_chunks
        self.ann_probes = ann_probes
        self.index: Index | None = None
        self.documents = ChunkDocuments()
        self.seq = 0
        """The last `vector_log` entry the index holds."""
        self.saved_seq = -1
        self.note = ""
        """Why a large store is searched exactly, or how its index was loaded."""
        self.lock = threading.Lock()
        """Held by a search on the searcher's thread and by every change to the index
        (made on the event loop), so that a search never reads rows half moved."""
        self.aside = SearchAside(self.lock)

    @property
    def files(self) -> Path:
        """The stem of the persisted index's files: `<db>.vectors.faiss|.npy|.json`."""
        return self.path.with_name(self.path.name + ".vectors.index")

    def empty(self, dimension: int) -> None:
        """Start an index for a store that just recorded its embedder (unless a
        concurrent call did); chunks already written come in through the log."""
        if self.index is None:
            self.index = VectorIndex(dimension)

    def load(self, conn: sqlite3.Connection, dimension: int) -> None:
        """The index of every stored vector: the persisted one brought up to date, a new
        quantised one for a large store, the exact one otherwise."""
        with self.lock:
            self._load(conn, dimension)

    def _load(self, conn: sqlite3.Connection, dimension: int) -> None:
        self.seq = _last_seq(conn)
        count = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        self.note = ""
        self.documents = _documents(conn)
        if count >= self.ann_min_chunks and str(self.path) != ":memory:":
            try:
                self.index = self._persisted(conn, dimension, count) or self._build(conn, count)
                return
            except ConfigurationError as e:
                self.note = f"searched exactly: {e}"
        rows = _rows(conn, f"SELECT {COLUMNS} FROM chunks")
        index = VectorIndex(dimension, capacity=max(1024, count))
        for keys, vectors, labels, _ in _batches(rows, dimension):
            index.add(keys, vectors, labels)
        self.index = index

    def _persisted(
        self, conn: sqlite3.Connection, dimension: int, count: int
    ) -> QuantizedIndex | None:
        """The saved index if it belongs to this file and, after the log entries it
        misses, holds exactly the rows the file holds."""
        found = QuantizedIndex.load(self.files)
        if found is None:
            return None
        index, meta = found
        if (
            meta.get("store_id") != _store_id(conn)
            or index.dimension != dimension
            or not 0 <= int(meta.get("seq", -1)) <= self.seq
        ):
            return None
        index.probes = self.ann_probes
        self.seq = int(meta["seq"])
        self.index = index
        self._follow(conn)
        if len(index) != count:
            return None
        self.note = "quantised index loaded from disk"
        if self.seq != int(meta["seq"]):
            self.save(conn)
        else:
            self.saved_seq = self.seq
        return index

    def _build(self, conn: sqlite3.Connection, count: int) -> QuantizedIndex:
        """A quantised index trained on an even sample of the rows, then filled in batches
        (never every float32 vector in memory at once), and saved."""
        self.seq = _last_seq(conn)
        step = max(1, count // (list_count(count) * TRAINING_ROWS_PER_LIST))
        sample = np.stack(
            [
                np.frombuffer(r[0], dtype=np.float32)
                for r in conn.execute("SELECT embedding FROM chunks WHERE rowid % ? = 0", (step,))
            ]
        )
        index = QuantizedIndex.trained(sample, count)
        index.probes = self.ann_probes
        rows = _rows(conn, f"SELECT {COLUMNS} FROM chunks")
        for keys, vectors, labels, _ in _batches(rows, sample.shape[1]):
            index.add(keys, vectors, labels)
        self.index = index
        self.note = "quantised index built"
        self.save(conn)
        return index

    def save(self, conn: sqlite3.Connection) -> None:
        """Persist a quantised index that changed since it was last saved."""
        if isinstance(self.index, QuantizedIndex) and self.saved_seq != self.seq:
            self.index.save(self.files, {"store_id": _store_id(conn), "seq": self.seq})
            self.saved_seq = self.seq

    def follow(self, conn: sqlite3.Connection) -> int:
        """Apply the log entries after `seq`: rows still stored are (re)added, the others
        removed. Returns how many rows changed."""
        with self.lock:
            return self._follow(conn)

    def _follow(self, conn: sqlite3.Connection) -> int:
        if self.index is None:
            return 0
        changed = conn.execute(
            "SELECT chunk_rowid, max(seq) FROM vector_log WHERE seq > ? GROUP BY chunk_rowid",
            (self.seq,),
        ).fetchall()
        if not changed:
            return 0
        keys = [r[0] for r in changed]
        present = set()
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            rows = _rows(
                conn,
                f"""SELECT {COLUMNS} FROM chunks WHERE rowid IN ({",".join("?" * len(part))})""",
                part,
            )
            for batch_keys, vectors, labels, documents in _batches(rows, self.index.dimension):
                self.index.add(batch_keys, vectors, labels)
                self.documents.set(batch_keys, documents, labels)
                present.update(batch_keys)
        gone = [k for k in keys if k not in present]
        self.index.remove(gone)
        self.documents.remove(gone)
        self.seq = max(self.seq, max(r[1] for r in changed))
        return len(keys)

    # -- search ---------------------------------------------------------------------

    def candidates(
        self,
        conn: sqlite3.Connection,
        query: np.ndarray,
        n: int,
        collection: Collections,
        source_types: Sequence[str] | None,
        allowed: np.ndarray | None,
        rescored: bool = True,
    ) -> list[tuple[int, float]]:
        """(key, exact cosine) of the n best rows the filters and `allowed` (a mask over
        row ids) allow, best first; without
        `rescored`, a quantised index's own (approximate) cosines, and rows deleted since
        it last followed the file may be among them."""
        if self.index is None:
            return []
        if self.index.exact or not rescored:
            return self.index.candidates(query, n, collection, source_types, allowed)
        shortlist = self.index.candidates(
            query, n * RESCORED_PER_HIT, collection, source_types, allowed
        )
        exact = stored_cosines(conn, [key for key, _ in shortlist], query)
        return sorted(exact.items(), key=lambda item: -item[1])[:n]

    async def candidates_aside(self, asked: Asked) -> list[tuple[int, float]]:
        """The index's `candidates` for `asked`, which read nothing back from the file
        (the exact index's, or a quantised index's own cosines), found on a thread of
        their own: the product over every vector is C that lets go of the GIL, and on the
        event loop it held every other request for as long as it ran, twice a query.

        The searches asked within one step of the loop go to the thread together, as
        one job: the queries of a batch the model embedded wake together and each asks
        at once, and a hand-over of the GIL to the thread and back for each search made
        the loop wait for the GIL as long as the searches took on the loop."""

        def search() -> list[tuple[int, float]]:
            index = self.index
            return [] if index is None else index.candidates(*asked)

        return await self.aside.run(search)

    def close(self) -> None:
        self.aside.close()

    def __len__(self) -> int:
        """The chunks the index holds: every chunk of the store, once it follows the file."""
        return len(self.index) if self.index is not None else 0

    def covers(self, collection: Collections, source_types: Sequence[str] | None) -> bool:
        """Whether every chunk the index holds is in `collection` and of `source_types`."""
        return self.index is not None and self.index.covers(collection, source_types)

    def similarities(
        self, conn: sqlite3.Connection, keys: Sequence[int], query: np.ndarray
    ) -> dict[int, float]:
        if self.index is None:
            return {}
        if isinstance(self.index, VectorIndex):
            return self.index.similarities(keys, query)
        return stored_cosines(conn, keys, query)

    def health(self) -> dict[str, Any]:
        index = self.index
        described: dict[str, Any] = {
            "vectors_in_memory": len(self),
            "vector_index": "none" if index is None else "exact" if index.exact else "quantised",
            "vector_memory_mb": round(index.memory_bytes() / 2**20, 1) if index else 0.0,
        }
        return {**described, **({"vector_index_note": self.note} if self.note else {})}


def stored_cosines(
    conn: sqlite3.Connection, keys: Sequence[int], query: np.ndarray
) -> dict[int, float]:
    """Exact cosines from the float32 vectors in the file; rows no longer stored (deleted
    since the index saw them) are left out."""
    if not keys:
        return {}
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT rowid, embedding FROM chunks WHERE rowid IN ({marks})", list(keys)
    ).fetchall()
    if not rows:
        return {}
    vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
    scores = vectors.reshape(len(rows), -1) @ query
    return dict(zip([r[0] for r in rows], scores.tolist(), strict=True))


def _documents(conn: sqlite3.Connection) -> ChunkDocuments:
    """Each chunk row's document and label, from the `chunks_document` index alone, read
    in pieces (never every id text in memory at once) and set at once."""
    documents = ChunkDocuments()
    pieces = []
    cursor = _rows(conn, "SELECT rowid, document_id, collection, source_type FROM chunks")
    while rows := cursor.fetchmany():
        pieces.append(
            (
                np.array([r[0] for r in rows], dtype=np.int64),
                hashed([r[1] for r in rows]),
                documents.labelled([(r[2], r[3]) for r in rows]),
            )
        )
    if pieces:
        documents.set_hashed(*(np.concatenate(column) for column in zip(*pieces, strict=True)))
    return documents


def _last_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM vector_log").fetchone()[0])


def _store_id(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()
    return "" if row is None else str(row[0])


def _rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
    cursor = conn.execute(sql, params)
    cursor.arraysize = BATCH_ROWS
    return cursor


def _batches(
    cursor: sqlite3.Cursor, dimension: int
) -> Iterator[tuple[list[int], np.ndarray, list[tuple[str, str]], list[str]]]:
    """(keys, float32 vectors, labels, document ids) of rows of `COLUMNS`."""
    while rows := cursor.fetchmany():
        vectors = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32)
        yield (
            [r[0] for r in rows],
            vectors.reshape(len(rows), dimension),
            [(r[1], r[2]) for r in rows],
            [r[4] for r in rows],
        )
