"""The embedded default store: one SQLite file.

Documents and chunks live in tables, keyword relevance comes from FTS5 (BM25), and
vectors are float32 blobs mirrored in memory (`SQLiteVectors`: exact up to
KNOWLEDGE_ANN_MIN_CHUNKS, quantised beyond). Every commit, this store's own or another
process's (a `knowledge-api ingest` beside a running service), is noticed through
SQLite's `data_version`, and the index applies the chunks it changed before the next
search.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api.errors import (
    BackendConnectionError,
    IndexingError,
    SearchError,
)
from knowledge_api.facets import Facets
from knowledge_api.models import (
    Chunk,
    CollectionInfo,
    Document,
    DocumentPage,
    DocumentSummary,
    EmbedderIdentity,
    SearchFilters,
    SearchHit,
    SourceInfo,
)
from knowledge_api.stores import records
from knowledge_api.stores.base import (
    Candidate,
    HybridSearch,
    cosine_to_similarity,
    embedder_mismatch,
)
from knowledge_api.stores.filter_sql import value_rows
from knowledge_api.stores.fts_terms import MATCHED_CHUNKS, TermFrequencies
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.keyword import (
    filter_sql,
    fts_expression,
    query_terms,
    reads_documents,
)
from knowledge_api.stores.quantized_index import DEFAULT_PROBES
from knowledge_api.stores.sqlite_facets import FacetColumns
from knowledge_api.stores.sqlite_file import SQLiteFile
from knowledge_api.stores.sqlite_filtered import AllowedRows, allowed_rows, best_allowed
from knowledge_api.stores.sqlite_vectors import SQLiteVectors

T = TypeVar("T")
log = logging.getLogger("knowledge_api")
WRITE_BATCH = 500
"""Documents written per transaction by `index_documents`."""
_HIT_COLUMNS = """c.rowid, c.id, c.document_id, c.chunk_index, c.chunk_count, c.title,
    c.section, c.content, d.source_type, d.source_id, d.metadata, d.created_at, d.updated_at"""


class SQLiteStore(HybridSearch):
    name = "sqlite"
    concurrent_candidates = True  # the keyword query runs on the reader thread

    def __init__(
        self,
        path: Path | str,
        ann_min_chunks: int = 100_000,
        ann_probes: int = DEFAULT_PROBES,
        keyword_matched_chunks: int = MATCHED_CHUNKS,
        tuning: SearchTuning = DEFAULT_TUNING,
    ) -> None:
        self.path = Path(path)
        self.tuning = tuning
        self.file = SQLiteFile(self.path, self.name, on_open=self._load_index)
        self.vectors = SQLiteVectors(self.path, ann_min_chunks, ann_probes)
        self._terms = TermFrequencies(keyword_matched_chunks)
        self._facets = FacetColumns()
        self._allowed = AllowedRows()
        self._reloads = 0
        self._data_version = 0
        self._generation: tuple[tuple[int, int], tuple[int, dict[str, int]]] = ((-1, -1), (0, {}))

    settings_fields = "db_path ann_min_chunks ann_probes keyword_matched_chunks"

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    async def open(self) -> None:
        self.file.open()

    async def close(self) -> None:
        if self.file.opened:
            try:
                self.vectors.save(self.file.db())
            except (OSError, RuntimeError, sqlite3.Error) as e:
                # nothing is lost: the next start catches up from the change log, or rebuilds
                log.warning("could not save the vector index beside %s: %s", self.path, e)
        await self.file.close()

    def _load_index(self) -> None:
        conn = self.file.db()
        self._data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        dimension = self._meta("embedder_dimension")
        if dimension is None:
            self.vectors.index = None
            return
        self.vectors.load(conn, int(dimension))

    def _sync(self) -> None:
        """Apply the chunks another connection changed since we last looked."""
        version = self.file.db().execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._data_version = version
            self.vectors.follow(self.file.db())
            self._reloads += 1

    async def generation(self) -> Hashable:
        """The file's own counter (store_state), the same in every process: read again
        only after a commit of ours or another process's, so a cache hit costs no query."""
        return self._generations()[0]

    async def collection_generation(self, collection: str) -> Hashable:
        """The collection's own counter (collection_state), read with the file's."""
        return self._generations()[1].get(collection, 0)

    def _generations(self) -> tuple[int, dict[str, int]]:
        """The file's counter and each collection's, as of the last commit seen."""
        try:
            self._sync()
            seen = (self.file.commits, self._reloads)
            if seen != self._generation[0]:
                conn = self.file.db()
                row = conn.execute("SELECT generation FROM store_state").fetchone()
                rows = conn.execute("SELECT collection, generation FROM collection_state")
                self._generation = (seen, (int(row[0]), {r[0]: int(r[1]) for r in rows}))
        except sqlite3.Error as e:
            raise BackendConnectionError(f"store unavailable: {e}", backend=self.name) from e
        return self._generation[1]

    # -- embedder bookkeeping -----------------------------------------------------

    def _meta(self, key: str) -> str | None:
        sql = "SELECT value FROM store_meta WHERE key = ?"
        row = self.file.db().execute(sql, (key,)).fetchone()
        return None if row is None else str(row["value"])

    async def check_embedder(self, name: str, dimension: int) -> None:
        stored_name, stored_dim = self._meta("embedder"), self._meta("embedder_dimension")
        if stored_name is None:

            def record() -> None:
                with self.file.transaction() as conn:
                    conn.executemany(
                        "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                        [("embedder", name), ("embedder_dimension", str(dimension))],
                    )

            await self.file.write(record)
            self._seen_own_write()
            self.vectors.empty(dimension)
            return
        stored = EmbedderIdentity(stored_name, int(stored_dim or 0))
        if stored == EmbedderIdentity(name, dimension):
            self.vectors.empty(dimension)  # recorded by a concurrent call, or another process
        else:
            raise embedder_mismatch(
                str(self.path),
                stored,
                EmbedderIdentity(name, dimension),
                "ingest into a new KNOWLEDGE_DB_PATH",
            )

    # -- writes -------------------------------------------------------------------

    async def index_document(self, document: Document) -> None:
        await self.index_documents([document])

    async def index_documents(self, documents: Sequence[Document]) -> None:
        if self.vectors.index is None:
            raise IndexingError("no embedder recorded: call check_embedder before indexing")
        for start in range(0, len(documents), WRITE_BATCH):
            batch = documents[start : start + WRITE_BATCH]
            await self.file.write(lambda batch=batch: self._write_documents(batch))  # type: ignore[misc]
            self._seen_own_write()

    def _seen_own_write(self) -> None:
        """Our own commit (made on the writer connection) reaches the index through the
        change log now, so that it is not taken for another process's commit later."""
        conn = self.file.db()
        self._data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        self.vectors.follow(conn)

    def _write_documents(self, docs: Sequence[Document]) -> None:
        """On the writer thread: replace each document under a savepoint of its own in
        one transaction. A failing document leaves the ones before it stored, as one
        transaction each would, for the price of one commit."""
        failure: BaseException | None = None
        with self.file.transaction() as conn:
            # Read a schema another connection changed (api_keys is created on first use)
            # before the first savepoint: SQLite fails to re-read it inside one.
            conn.execute("SELECT 1 FROM chunks LIMIT 0").fetchall()
            for doc in docs:
                conn.execute("SAVEPOINT document")
                try:
                    self._write_document(conn, doc)
                except BaseException as e:
                    conn.execute("ROLLBACK TO document")
                    failure = e
                    break
                finally:
                    conn.execute("RELEASE document")
        if failure is not None:
            raise failure

    def _write_document(self, conn: sqlite3.Connection, doc: Document) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc.id,))
            conn.execute(
                """INSERT INTO documents (id, collection, source_type, source_id, title,
                       content, metadata, content_hash, created_at, updated_at, source)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET title = excluded.title,
                       content = excluded.content, metadata = excluded.metadata,
                       content_hash = excluded.content_hash,
                       updated_at = excluded.updated_at, source = excluded.source""",
                (
                    doc.id,
                    doc.collection,
                    doc.source_type,
                    doc.source_id,
                    doc.title,
                    doc.content,
                    json.dumps(doc.metadata),
                    doc.content_hash,
                    now,
                    now,
                    doc.source,
                ),
            )
            conn.execute("DELETE FROM document_values WHERE document_id = ?", (doc.id,))
            conn.executemany(
                "INSERT INTO document_values (document_id, key, kind, value, ms) "
                "VALUES (?, ?, ?, ?, ?)",
                value_rows(doc.id, doc.metadata),
            )
            for chunk in doc.chunks:
                self._insert_chunk(conn, doc, chunk)
        except sqlite3.OperationalError:
            raise  # a lock or a lost file: SQLiteFile.write says so
        except sqlite3.Error as e:
            raise IndexingError(f"could not index {doc.source_id!r}: {e}", backend=self.name) from e

    def _insert_chunk(self, conn: sqlite3.Connection, doc: Document, chunk: Chunk) -> None:
        if chunk.embedding is None:
            raise IndexingError(f"chunk {chunk.chunk_index} of {doc.source_id!r} has no embedding")
        conn.execute(
            """INSERT INTO chunks (id, document_id, chunk_index, chunk_count, collection,
                   source_type, title, section, content, content_hash, embedding)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                chunk.id,
                doc.id,
                chunk.chunk_index,
                len(doc.chunks),
                doc.collection,
                doc.source_type,
                chunk.title,
                chunk.section,
                chunk.content,
                chunk.content_hash,
                np.asarray(chunk.embedding, dtype=np.float32).tobytes(),
            ),
        )

    async def delete(self, doc_id: str) -> bool:
        def remove() -> int:
            try:
                with self.file.transaction() as conn:
                    return int(
                        conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount
                    )
            except sqlite3.OperationalError:
                raise
            except sqlite3.Error as e:
                raise IndexingError(f"could not delete {doc_id!r}: {e}", backend=self.name) from e

        deleted = await self.file.write(remove)
        self._seen_own_write()
        return deleted > 0

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))

        def remove() -> int:
            with self.file.transaction() as conn:
                return sum(
                    conn.execute(
                        f"DELETE FROM documents WHERE id IN ({marks(part)})", part
                    ).rowcount
                    for part in batches(ids)
                )

        deleted = await self._write_sql(remove, "delete documents")
        return deleted

    async def record_source(self, collection: str, source: str) -> None:
        def record() -> int:
            with self.file.transaction() as conn:
                conn.execute(
                    """INSERT INTO sources (collection, name, last_run) VALUES (?, ?, ?)
                       ON CONFLICT (collection, name) DO UPDATE SET last_run = excluded.last_run""",
                    (collection, source, records.now()),
                )
            return 0

        await self._write_sql(record, f"record the source {source!r}")

    async def delete_source(self, collection: str, source: str) -> int:
        def remove() -> int:
            with self.file.transaction() as conn:
                where = "WHERE collection = ? AND {} = ?"
                deleted = conn.execute(
                    f"DELETE FROM documents {where.format('source')}", (collection, source)
                ).rowcount
                conn.execute(f"DELETE FROM sources {where.format('name')}", (collection, source))
            return int(deleted)

        return await self._write_sql(remove, f"delete the source {source!r}")

    async def _write_sql(self, work: Callable[[], int], what: str) -> int:
        """A write of rows by SQL on the writer thread, seen by the index at once."""

        def run() -> int:
            try:
                return work()
            except sqlite3.OperationalError:
                raise  # a lock or a lost file: SQLiteFile.write says so
            except sqlite3.Error as e:
                raise IndexingError(f"could not {what}: {e}", backend=self.name) from e

        done = await self.file.write(run)
        self._seen_own_write()
        return done

    async def source_documents(self, collection: str, source: str) -> dict[str, str]:
        rows = self.file.db().execute(
            "SELECT id, source_id FROM documents WHERE collection = ? AND source = ?",
            (collection, source),
        )
        return {r[0]: r[1] for r in rows}

    async def sources(self, collection: str | None = None) -> list[SourceInfo]:
        rows = self.file.db().execute(
            """SELECT s.collection, s.name, s.last_run, (SELECT count(*) FROM documents d
                   WHERE d.collection = s.collection AND d.source = s.name) AS documents
               FROM sources s WHERE ? IS NULL OR s.collection = ?
               ORDER BY s.collection, s.name""",
            (collection, collection),
        )
        return [SourceInfo(r[0], r[1], r[3], r[2]) for r in rows]

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        conditions, params = ["collection = ?", "id > ?"], [page.collection, page.after]
        if page.source_type:
            conditions.append("source_type = ?")
            params.append(page.source_type)
        if page.source is not None:
            conditions.append("source = ?")
            params.append(page.source)
        rows = self.file.db().execute(
            f"""SELECT id, collection, source_type, source_id, source, title, metadata,
                   updated_at, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id)
               FROM documents d WHERE {" AND ".join(conditions)} ORDER BY id LIMIT ?""",
            (*params, page.limit),
        )
        return [
            DocumentSummary(
                r["id"],
                r["collection"],
                r["source_type"],
                r["source_id"],
                r["source"],
                r["title"],
                json.loads(r["metadata"]),
                r[8],
                records.as_timestamp(r["updated_at"]),
            )
            for r in rows
        ]

    async def collection_stats(self) -> list[CollectionInfo]:
        rows = self.file.db().execute(
            """SELECT name, sum(documents), sum(chunks), sum(sources), max(updated_at) FROM (
                   SELECT collection AS name, count(*) AS documents, 0 AS chunks,
                          0 AS sources, max(updated_at) AS updated_at
                   FROM documents GROUP BY collection
                   UNION ALL SELECT collection, 0, count(*), 0, NULL FROM chunks GROUP BY collection
                   UNION ALL SELECT collection, 0, 0, count(*), max(last_run) FROM sources
                   GROUP BY collection)
               GROUP BY name ORDER BY name"""
        )
        return [CollectionInfo(r[0], r[1], r[2], r[3], r[4] or "") for r in rows]

    # -- search -------------------------------------------------------------------

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        return self._vector_candidates(vector, n, filters, rescored=True)

    async def feedback_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        # by the quantised index's own scores: its shortlist is not read back to rescore
        return self._vector_candidates(vector, n, filters, rescored=False)

    def _vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters, rescored: bool
    ) -> list[Candidate]:
        self._sync()
        found = self.vectors.candidates(
            self.file.db(),
            vector,
            n,
            filters.collection,
            filters.source_types,
            self._metadata_keys(filters),
            rescored,
        )
        return [Candidate(key, cosine_to_similarity(score)) for key, score in found]

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        self._sync()
        terms, chunks = query_terms(query), len(self.vectors)
        unfiltered = filters.where is None and self.vectors.covers(
            filters.collection, filters.source_types
        )
        allowed = self._metadata_keys(filters)
        try:
            return await self.file.read_aside(
                lambda conn: self._keyword(conn, terms, chunks, unfiltered, n, filters, allowed)
            )
        except sqlite3.Error as e:
            raise SearchError(f"keyword search failed: {e}", backend=self.name) from e

    def _keyword(
        self,
        conn: sqlite3.Connection,
        terms: list[str],
        chunks: int,
        unfiltered: bool,
        n: int,
        filters: SearchFilters,
        allowed: frozenset[int] | None,
    ) -> list[Candidate]:
        """The keyword query on the reader thread (see `SQLiteFile.read_aside`):
        `unfiltered` says every chunk the store holds passes `filters`; `allowed`, the
        rows a filter tree allows (stores/sqlite_filtered.py)."""
        bounded = self._terms.bounded(conn, terms, chunks)
        match = fts_expression(bounded.terms)
        if not match:
            return []
        first = bounded.first_rowid(conn, match)
        if allowed is not None:
            return best_allowed(conn, match, first, allowed, n)
        where, params = filter_sql(filters, indexed=True)
        rows = self._best_then_checked(conn, match, first, where, params, n) if unfiltered else None
        if rows is None:
            documents = (
                "JOIN documents d ON d.id = c.document_id" if reads_documents(filters) else ""
            )
            sql = f"""SELECT c.rowid AS key, bm25(chunks_fts) AS rank FROM chunks_fts
                      JOIN chunks c ON c.rowid = chunks_fts.rowid {documents}
                      WHERE chunks_fts MATCH ? AND chunks_fts.rowid >= ? AND {where}
                      ORDER BY rank LIMIT ?"""
            rows = conn.execute(sql, (match, first, *params, n)).fetchall()
        return [Candidate(r["key"], -float(r["rank"])) for r in rows]

    @staticmethod
    def _best_then_checked(
        conn: sqlite3.Connection, match: str, first: int, where: str, params: list[Any], n: int
    ) -> list[sqlite3.Row] | None:
        """The n best matches of the whole index (from rowid `first`), then the filters
        checked on those n rows only: when every chunk the store holds passes the
        filters, this skips reading each matching chunk's row to filter it. None when a
        row fails them (written since the index last followed the file): the caller
        filters first."""
        sql = f"""SELECT f.key, f.rank, ({where}) AS allowed FROM (
                      SELECT rowid AS key, bm25(chunks_fts) AS rank FROM chunks_fts
                      WHERE chunks_fts MATCH ? AND rowid >= ? ORDER BY rank LIMIT ?) f
                  LEFT JOIN chunks c ON c.rowid = f.key ORDER BY f.rank"""
        rows = conn.execute(sql, (*params, match, first, n)).fetchall()
        return rows if all(r["allowed"] for r in rows) else None

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        if not keys:
            return {}
        found = self.vectors.similarities(self.file.db(), [int(k) for k in keys], vector)  # type: ignore[call-overload]
        return {key: cosine_to_similarity(cosine) for key, cosine in found.items()}

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = (
            self.file.db()
            .execute(
                f"""SELECT {_HIT_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE c.rowid IN ({marks})""",
                [key for key, _ in ranked],
            )
            .fetchall()
        )
        by_key = {r["rowid"]: r for r in rows}
        return [
            hit_from_row(by_key[key], score, similarity[key])
            for key, score in ranked
            if key in by_key
        ]

    async def facet_counts(self, filters: SearchFilters, fields: tuple[str, ...]) -> Facets:
        self._sync()
        generation = await self.generation()
        try:
            if self._facets.holds(generation, fields):  # in memory: no thread to wait for
                allowed = self._metadata_keys(filters)
                return self._facets.counts(self.file.db(), generation, filters, fields, allowed)
            return await self.file.read_aside(
                lambda conn: self._facets.counts(
                    conn, generation, filters, fields, allowed_rows(conn, filters)
                )
            )
        except sqlite3.Error as e:
            raise SearchError(f"counting facets failed: {e}", backend=self.name) from e

    def _metadata_keys(self, filters: SearchFilters) -> frozenset[int] | None:
        """Row ids allowed by the filter tree (None: no filter), read once per search."""
        generation = (self._data_version, self.file.commits)
        return self._allowed.of(self.file.db(), filters, generation)

    # -- reads --------------------------------------------------------------------

    async def get_by_id(self, doc_id: str) -> Document | None:
        row = self.file.db().execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return None if row is None else self._document(row)

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        row = (
            self.file.db()
            .execute(
                """SELECT * FROM documents WHERE source_type = ? AND collection = ? AND (
                   source_id = ? OR id = ? OR id = (SELECT document_id FROM chunks WHERE id = ?))
               ORDER BY source_id = ? DESC LIMIT 1""",
                (source_type, collection, key, key, key, key),
            )
            .fetchone()
        )
        return None if row is None else self._document(row)

    def _document(self, row: sqlite3.Row) -> Document:
        chunks = [
            records.chunk_from_record(c["id"], c, c["content"])
            for c in self.file.db().execute(
                """SELECT id, document_id, chunk_index, chunk_count, title, section, content
                   FROM chunks WHERE document_id = ? ORDER BY chunk_index""",
                (row["id"],),
            )
        ]
        return records.document_from_record(row, row["content"], chunks)

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return dict(self._select_in("SELECT id, content_hash FROM documents WHERE id IN", doc_ids))

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self._select_in(
            "SELECT content_hash, embedding FROM chunks WHERE content_hash IN", hashes
        )
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows}

    def _select_in(self, sql: str, values: Sequence[str]) -> list[tuple[Any, Any]]:
        rows: list[tuple[Any, Any]] = []
        for start in range(0, len(values), 500):
            part = values[start : start + 500]
            marks = ",".join("?" * len(part))
            rows.extend(tuple(r) for r in self.file.db().execute(f"{sql} ({marks})", part))
        return rows

    async def collections(self) -> dict[str, int]:
        rows = self.file.db().execute(
            "SELECT collection, count(*) FROM documents GROUP BY collection ORDER BY collection"
        )
        return {name: count for name, count in rows}

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        rows = (
            self.file.db()
            .execute("SELECT * FROM documents WHERE collection = ? ORDER BY id", (collection,))
            .fetchall()
        )
        for row in rows:
            doc = self._document(row)
            vectors = await self.embeddings_by_hash([c.content_hash for c in doc.chunks])
            for chunk in doc.chunks:
                chunk.embedding = vectors[chunk.content_hash]
            yield doc

    async def count(self) -> int:
        return int(self.file.db().execute("SELECT count(*) FROM documents").fetchone()[0])

    async def health_check(self) -> dict[str, Any]:
        try:
            conn = self.file.db()
            documents = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            self.file.check()
        except (BackendConnectionError, sqlite3.Error) as e:
            return {"backend": self.name, "status": "unavailable", "error": str(e)}
        failing = {"status": "degraded", "error": self.file.write_failure}
        return {
            "backend": self.name,
            "status": "ok",
            **(failing if self.file.write_failure else {}),
            "path": str(self.path),
            "documents": documents,
            "chunks": chunks,
            **self.vectors.health(),
        }


def batches(values: list[str], size: int = 500) -> list[list[str]]:
    return [values[start : start + size] for start in range(0, len(values), size)]


def marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def hit_from_row(row: sqlite3.Row, score: float, similarity: float) -> SearchHit:
    metadata = json.loads(row["metadata"])
    return records.hit_from_record(row["id"], row, row["content"], metadata, score, similarity)
