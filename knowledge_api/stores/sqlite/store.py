"""The embedded default store: one SQLite file.

Documents and chunks live in tables, keyword relevance comes from FTS5 (BM25), and
vectors are float32 blobs mirrored in memory (`SQLiteVectors`: exact up to
KNOWLEDGE_ANN_MIN_CHUNKS, quantised beyond). Every commit, this store's own or another
process's (a `knowledge-api ingest` beside a running service), is noticed through
SQLite's `data_version`, and the index applies the chunks it changed before the next
search.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api.errors import BackendConnectionError, IndexingError, SearchError
from knowledge_api.facets import Facets
from knowledge_api.models import (
    Document,
    EmbedderIdentity,
    SearchFilters,
    SearchHit,
)
from knowledge_api.stores.base import embedder_mismatch
from knowledge_api.stores.fusion import (
    DEFAULT_TUNING,
    Candidate,
    SearchTuning,
    similar_candidates,
    similarities_of,
)
from knowledge_api.stores.hybrid import HybridSearch
from knowledge_api.stores.keyword import query_terms
from knowledge_api.stores.sqlite import catalog, search, writes
from knowledge_api.stores.sqlite.catalog import SQLiteCatalog
from knowledge_api.stores.sqlite.facets import FacetColumns
from knowledge_api.stores.sqlite.file import SQLiteFile
from knowledge_api.stores.sqlite.filtered import AllowedRows, allowed_rows
from knowledge_api.stores.sqlite.fts_terms import MATCHED_CHUNKS, TermFrequencies
from knowledge_api.stores.sqlite.quantized_index import DEFAULT_PROBES
from knowledge_api.stores.sqlite.vectors import SQLiteVectors
from knowledge_api.stores.tables.beside import BesideTheFile

T = TypeVar("T")
log = logging.getLogger("knowledge_api")
WRITE_BATCH = 500
"""Documents written per transaction by `index_documents`."""


class SQLiteStore(SQLiteCatalog, HybridSearch, BesideTheFile):
    name = "sqlite"
    concurrent_candidates = True  # the keyword query runs on the reader thread
    keyword_aside = True

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
        self.vectors.close()
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
        db = self.file.db()  # (re)opened first: its WAL index is the one watched
        watch = self.file.commit_watch
        header = watch.moved()
        if header is None:
            return
        version = db.execute("PRAGMA data_version").fetchone()[0]
        watch.seen = header
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
            await self.file.write(lambda batch=batch: writes.write_documents(self.file, batch))  # type: ignore[misc]
            self._seen_own_write()

    def _seen_own_write(self) -> None:
        """Our own commit (made on the writer connection) reaches the index through the
        change log now, so that it is not taken for another process's commit later."""
        conn = self.file.db()
        self._data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        self.vectors.follow(conn)

    async def delete(self, doc_id: str) -> bool:
        work = partial(writes.delete_documents, ids=[doc_id])
        return await self._write_sql(work, f"delete {doc_id!r}") > 0

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        return await self._write_sql(lambda c: writes.delete_documents(c, ids), "delete documents")

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        return await self._write_sql(
            lambda c: writes.set_acl(c, ids, acl), "change the access list"
        )

    async def record_source(
        self, collection: str, source: str, root: str = "", connector: str = ""
    ) -> None:
        await self._write_sql(
            lambda c: writes.record_source(c, collection, source, root, connector),
            f"record the source {source!r}",
        )

    async def lease_source(self, collection: str, source: str, holder: str, seconds: float) -> bool:
        leased = await self._write_sql(
            lambda c: writes.lease_source(c, collection, source, holder, seconds),
            f"lease the source {source!r}",
        )
        return leased == 1

    async def delete_source(self, collection: str, source: str) -> int:
        work = partial(writes.delete_source, collection=collection, source=source)
        return await self._write_sql(work, f"delete the source {source!r}")

    async def _write_sql(self, work: Callable[[sqlite3.Connection], int], what: str) -> int:
        """A write of rows by SQL in one transaction on the writer thread, seen by the
        index at once."""

        def run() -> int:
            try:
                with self.file.transaction() as conn:
                    return work(conn)
            except sqlite3.OperationalError:
                raise  # a lock or a lost file: SQLiteFile.write says so
            except sqlite3.Error as e:
                raise IndexingError(f"could not {what}: {e}", backend=self.name) from e

        done = await self.file.write(run)
        self._seen_own_write()
        return done

    # -- search -------------------------------------------------------------------

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        return await self._vector_candidates(vector, n, filters, rescored=True)

    async def feedback_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        # by the quantised index's own scores: its shortlist is not read back to rescore
        return await self._vector_candidates(vector, n, filters, rescored=False)

    async def _vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters, rescored: bool
    ) -> list[Candidate]:
        self._sync()
        asked = (vector, n, filters.searched, filters.source_types, self._metadata_keys(filters))
        index = self.vectors.index
        if index is not None and (index.exact or not rescored):  # no read of the file
            return similar_candidates(await self.vectors.candidates_aside(asked))
        return similar_candidates(self.vectors.candidates(self.file.db(), *asked, rescored))

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        self._sync()
        terms, chunks = query_terms(query), len(self.vectors)
        unfiltered = filters.where is None and self.vectors.covers(
            filters.searched, filters.source_types
        )
        allowed = self._metadata_keys(filters)
        try:
            return await self.file.read_aside(
                lambda conn: search.keyword_candidates(
                    conn, self._terms, terms, chunks, unfiltered, n, filters, allowed
                )
            )
        except sqlite3.Error as e:
            raise SearchError(f"keyword search failed: {e}", backend=self.name) from e

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        if not keys:
            return {}
        found = self.vectors.similarities(self.file.db(), [int(k) for k in keys], vector)  # type: ignore[call-overload]
        return similarities_of(found.items())

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        return search.hits(self.file.db(), ranked, similarity)

    async def seed_vectors(
        self, seeds: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[np.ndarray]:
        return search.seed_vectors(self.file.db(), [key for key, _ in seeds])

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

    def _metadata_keys(self, filters: SearchFilters) -> np.ndarray | None:
        """Row ids allowed by the filter tree, a mask over them (None: no filter), read
        once per search."""
        generation = (self._data_version, self.file.commits)
        documents = self.vectors.documents if self.vectors.index is not None else None
        return self._allowed.of(self.file.db(), filters, generation, documents)

    # -- reads --------------------------------------------------------------------

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return catalog.pairs(self.file.db(), "id, content_hash", "documents", "id", doc_ids)

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return catalog.pairs(self.file.db(), "id, content", "documents", "id", doc_ids)

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        columns = "content_hash, embedding"
        rows = catalog.pairs(self.file.db(), columns, "chunks", "content_hash", hashes)
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows.items()}

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        for doc in catalog.documents_in(self.file.db(), collection):
            vectors = await self.embeddings_by_hash([c.content_hash for c in doc.chunks])
            for chunk in doc.chunks:
                chunk.embedding = vectors[chunk.content_hash]
            yield doc

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
