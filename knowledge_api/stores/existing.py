"""The store on a database other pipelines fill (KNOWLEDGE_SCHEMA_MODE adopted or read_only).

`siam_vectors` and `wiki_documents` keep the spec's shape: one row per passage, no
parent document table, no chunk hashes, no record of the embedder. The store reads
them through the primitives of the postgres or supabase store it wraps (`call`,
`select`), fuses vector and keyword candidates of both tables in the shared
`HybridSearch`, and never writes: the rows belong to the pipelines that made them.

- adopted: searches with the `knowledge_*` functions and indexes `knowledge-api migrate
  --adopt` added (cosine over siam_vectors, full text over both tables, wiki pages by
  meaning too once `migrate --wiki-vectors` ran).
- read_only: the tables and functions as they are, for credentials that allow no DDL:
  vectors through the existing RPC `match_siam_vectors_gemini(query_embedding,
  match_threshold, match_count)`, keywords by ILIKE; /health names what that leaves out.

A document is a source (source_type, source_id): its passages are the rows sharing both.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.errors import (
    ConfigurationError,
    EmbedderMismatchError,
    KnowledgeStoreError,
    SearchError,
    StoreReadOnly,
)
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    Chunk,
    Document,
    SearchFilters,
    SearchHit,
    document_id,
)
from knowledge_api.stores.adopt import RECORD, SEARCH_STEP, WIKI_VECTORS
from knowledge_api.stores.base import Candidate, HybridSearch, cosine_to_similarity, is_uuid
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.siam import TENANCY, Condition, Row, SiamStore, as_vector, filter_params

SIAM = "siam_vectors"
WIKI = "wiki_documents"
SIAM_COLUMNS = "id,content,source_type,source_id,metadata,organization,division,app_under_test"
WIKI_COLUMNS = "id,title,url,app_name,markdown_content"
GENERATION_POLL_SECONDS = 1.0
"""How long a read generation is trusted: other pipelines' writes show within this
time (plus the database's statistics delay, about a second)."""
READ_ONLY_TERMS = 3
"""Query words searched by ILIKE in read-only mode (the longest): one query each."""
READ_ONLY_WIDEN = 4
"""Read-only vector search asks the RPC for this many times the candidates when filters
apply: the RPC has no filter arguments, so filters cut its answer afterwards."""
WIKI_KEYWORD_SIMILARITY = 0.5
"""The similarity a wiki page without a vector has when it is the best keyword hit: a
page found by its words alone counts as half-similar, above the default threshold and
below a passage close in meaning (its cosine is unknown until `migrate --wiki-vectors`)."""
WRITES_REFUSED = (
    "the store serves tables other pipelines own (KNOWLEDGE_SCHEMA_MODE={mode}): documents "
    "are written by those pipelines, not through the service"
)


@dataclass(frozen=True, slots=True)
class Found:
    """A search candidate: equal by table and id, carrying its row. A wiki page without
    a vector has no cosine: `keyword` stands in (see with_keyword_similarity)."""

    table: str
    id: str
    row: Mapping[str, Any] = field(compare=False)
    keyword: float = field(default=0.0, compare=False)


def existing_tables(store: Any, settings: Any) -> ExistingTables:
    """The store of KNOWLEDGE_SCHEMA_MODE over the postgres or supabase store `store`."""
    if not isinstance(store, SiamStore):
        raise ConfigurationError(
            f"KNOWLEDGE_SCHEMA_MODE={settings.schema_mode} serves existing Postgres tables: "
            f"it needs KNOWLEDGE_STORE=postgres or supabase, not {store.name!r}"
        )
    modes = {"adopted": AdoptedTables, "read_only": ReadOnlyTables}
    return modes[settings.schema_mode](store, SearchTuning.from_settings(settings))


class ExistingTables(HybridSearch):
    mode = ""

    def __init__(self, tables: SiamStore, tuning: SearchTuning = DEFAULT_TUNING) -> None:
        self.tables = tables
        self.tuning = tuning
        self.name = tables.name
        self.wiki_vectors = False
        """Wiki pages have vectors (`migrate --wiki-vectors` ran)."""
        self._generation = 0
        self._generation_expires = 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tables!r})"

    async def open(self) -> None:
        await self.tables.open()

    async def close(self) -> None:
        await self.tables.close()

    # -- the embedder the rows were written with ----------------------------------------

    async def check_embedder(self, name: str, dimension: int) -> None:
        """No embedder is recorded beside rows other pipelines wrote: the one configured
        is taken at its word, if its vectors have the stored dimension."""
        rows = await self.tables.select(SIAM, "embedding", limit=5)
        stored = {len(as_vector(r["embedding"])) for r in rows if r["embedding"] is not None}
        if stored and stored != {dimension}:
            raise EmbedderMismatchError(
                f"siam_vectors.embedding holds {'/'.join(map(str, sorted(stored)))}-d vectors; "
                f"KNOWLEDGE_EMBEDDER ({name!r}) makes {dimension}-d ones. Set "
                "KNOWLEDGE_EMBEDDER to the embedder the rows were written with (gemini, "
                "768-d, for the Gemini-embedded tables).",
                configured=name,
            )

    async def generation(self) -> Hashable:
        """Moves when other pipelines write the tables (read at most every
        GENERATION_POLL_SECONDS); without a way to tell, answers live for the cache's TTL."""
        if time.monotonic() >= self._generation_expires:
            self._generation = await self.read_generation()
            self._generation_expires = time.monotonic() + GENERATION_POLL_SECONDS
        return self._generation

    async def read_generation(self) -> int:
        """The tables' write counter, from the statistics the database keeps."""
        rows = await self.tables.select(
            "pg_stat_user_tables", "n_tup_ins,n_tup_upd,n_tup_del", ("relname", "in", [SIAM, WIKI])
        )
        return sum(int(r["n_tup_ins"]) + int(r["n_tup_upd"]) + int(r["n_tup_del"]) for r in rows)

    # -- writes: refused -----------------------------------------------------------------

    def refused(self) -> StoreReadOnly:
        return StoreReadOnly(WRITES_REFUSED.format(mode=self.mode), schema_mode=self.mode)

    async def index_document(self, document: Document) -> None:
        raise self.refused()

    async def index_documents(self, documents: Sequence[Document]) -> None:
        raise self.refused()

    async def delete(self, doc_id: str) -> bool:
        raise self.refused()

    async def document_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The first step of indexing: refused here, before anything is embedded."""
        raise self.refused()

    async def embeddings_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return {}  # rows carry no chunk hashes: search runs without the feedback round

    # -- search ---------------------------------------------------------------------

    async def similarities(
        self, keys: Sequence[Hashable], vector: np.ndarray
    ) -> dict[Hashable, float]:
        """The cosine of keyword-only hits, from their stored vectors."""
        found = [key for key in keys if isinstance(key, Found)]
        result: dict[Hashable, float] = {key: key.keyword for key in found}
        tables = [(SIAM, "embedding")]
        if self.wiki_vectors:
            tables.append((WIKI, "knowledge_embedding"))
        for table, column in tables:
            by_id = {key.id: key for key in found if key.table == table}
            if not by_id:
                continue
            rows = await self.tables.select(table, f"id,{column}", ("id", "in", list(by_id)))
            for row in rows:
                if row[column] is not None:
                    result[by_id[str(row["id"])]] = cosine(as_vector(row[column]), vector)
        return result

    async def hydrate(
        self, ranked: list[tuple[Hashable, float]], similarity: dict[Hashable, float]
    ) -> list[SearchHit]:
        return [
            hit_from_found(key, score, similarity[key])
            for key, score in ranked
            if isinstance(key, Found)
        ]

    # -- reads ----------------------------------------------------------------------

    async def get_by_id(self, doc_id: str) -> Document | None:
        """Documents are named by source here (find_document); ids name passages."""
        return None

    async def find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        if collection != DEFAULT_COLLECTION:
            return None
        if source_type == "wiki":
            page = await self._first(WIKI, WIKI_COLUMNS, ("url", key), ("id", key))
            if page:
                return wiki_document(page)
        rows = await self.tables.select(
            SIAM, SIAM_COLUMNS, ("source_type", "eq", source_type), ("source_id", "eq", key)
        )
        if not rows and is_uuid(key):
            passage = await self._first(SIAM, SIAM_COLUMNS, ("id", key))
            if passage and passage["source_type"] == source_type:
                rows = await self.tables.select(
                    SIAM,
                    SIAM_COLUMNS,
                    ("source_type", "eq", source_type),
                    ("source_id", "eq", passage["source_id"]),
                )
        return source_document(sorted(rows, key=lambda r: str(r["id"]))) if rows else None

    async def _first(self, table: str, columns: str, *keys: tuple[str, str]) -> Row | None:
        """The first row whose column equals its key, trying the keys in order (a
        uuid column is only asked for a uuid)."""
        for column, key in keys:
            if column == "id" and not is_uuid(key):
                continue
            rows = await self.tables.select(table, columns, (column, "eq", key), limit=1)
            if rows:
                return rows[0]
        return None

    async def count(self) -> int:
        """Whether the tables hold passages (0 or 1): enough for the one caller, the
        seeding of an empty store, which never runs on tables other pipelines own."""
        return len(await self.tables.select(SIAM, "id", limit=1))

    async def collections(self) -> dict[str, int]:
        return {DEFAULT_COLLECTION: await self.count()}

    async def iter_documents(self, collection: str) -> AsyncIterator[Document]:
        raise KnowledgeStoreError(
            f"KNOWLEDGE_SCHEMA_MODE={self.mode}: the tables are read by source, not walked "
            "document by document; copy them with the pipelines that fill them"
        )
        yield  # an async generator, like every store's

    async def health_check(self) -> dict[str, Any]:
        try:
            await self.tables.select(SIAM, "id", limit=1)
            await self.tables.select(WIKI, "id", limit=1)
            await self.refresh()
        except (KnowledgeStoreError, ConfigurationError) as e:
            return {"backend": self.name, "status": "unavailable", "error": e.message}
        return {
            "backend": self.name,
            "status": "ok",
            **self.tables.location(),
            "schema_mode": self.mode,
            "capabilities": self.capabilities(),
            "left_out": self.left_out(),
        }

    async def refresh(self) -> None:
        """Learn what the database offers (the steps of an adoption)."""

    def capabilities(self) -> dict[str, str]:
        raise NotImplementedError

    def left_out(self) -> list[str]:
        raise NotImplementedError

    # -- candidates of both tables ---------------------------------------------------

    def wiki_filter(self, filters: SearchFilters) -> dict[str, Any] | None:
        """The wiki search's arguments, or None when the filters exclude wiki pages
        (pages have no organization, division or metadata; app_name is their app)."""
        if filters.collection != DEFAULT_COLLECTION:
            return None
        if filters.source_types is not None and "wiki" not in filters.source_types:
            return None
        metadata = dict(filters.metadata)
        app = metadata.pop("app_under_test", None)
        if metadata or (app is not None and not isinstance(app, str)):
            return None
        return {"filter_app_name": app}


class AdoptedTables(ExistingTables):
    mode = "adopted"

    async def open(self) -> None:
        await super().open()
        await self.refresh()

    async def refresh(self) -> None:
        try:
            steps = {r["name"] for r in await self.tables.select(RECORD, "name")}
        except KnowledgeStoreError as e:
            steps = set()
            reason = e.message
        else:
            reason = "its record holds no search functions"
        if SEARCH_STEP not in steps:
            raise ConfigurationError(
                "KNOWLEDGE_SCHEMA_MODE=adopted but the database is not adopted "
                f"({reason}): run `knowledge-api migrate --adopt`, or serve it with "
                "KNOWLEDGE_SCHEMA_MODE=read_only"
            )
        self.wiki_vectors = WIKI_VECTORS in steps

    async def read_generation(self) -> int:
        rows = await self.tables.call("knowledge_adopted_generation", {}, SearchError)
        return int(rows[0]["generation"])

    def capabilities(self) -> dict[str, str]:
        return {
            "vector_search": "siam_vectors by cosine (knowledge_match_siam_vectors)",
            "keyword_search": "full text over siam_vectors and wiki_documents",
            "wiki_search": "meaning and keyword" if self.wiki_vectors else "keyword",
            "writes": "refused: the tables belong to their pipelines",
        }

    def left_out(self) -> list[str]:
        missing = ["writes through the service"]
        if not self.wiki_vectors:
            missing.append("wiki search by meaning (run `knowledge-api migrate --wiki-vectors`)")
        return missing

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        found: list[Candidate] = []
        siam = siam_filter(filters)
        if siam is not None:
            params = {"query_embedding": vector, "match_count": n, **siam}
            rows = await self.tables.call("knowledge_match_siam_vectors", params, SearchError)
            found += [
                Candidate(found_row(SIAM, r), cosine_to_similarity(r["similarity"])) for r in rows
            ]
        wiki = self.wiki_filter(filters)
        if wiki is not None and self.wiki_vectors:
            params = {"query_embedding": vector, "match_count": n, **wiki}
            rows = await self.tables.call("knowledge_match_wiki_documents", params, SearchError)
            found += [
                Candidate(found_row(WIKI, r), cosine_to_similarity(r["similarity"])) for r in rows
            ]
        return best(found, n)

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        found: list[Candidate] = []
        siam = siam_filter(filters)
        if siam is not None:
            params = {"query_text": query, "match_count": n, **siam}
            rows = await self.tables.call("knowledge_search_siam_vectors", params, SearchError)
            found += [Candidate(found_row(SIAM, r), float(r["rank"])) for r in rows]
        wiki = self.wiki_filter(filters)
        if wiki is not None:
            params = {"query_text": query, "match_count": n, **wiki}
            rows = await self.tables.call("knowledge_search_wiki_documents", params, SearchError)
            found += [Candidate(found_row(WIKI, r), float(r["rank"])) for r in rows]
        return with_keyword_similarity(best(found, n))


class ReadOnlyTables(ExistingTables):
    mode = "read_only"
    follows_writes = True
    """The statistics are readable (a direct connection; not Supabase's REST API)."""

    async def read_generation(self) -> int:
        if self.follows_writes:
            try:
                return await super().read_generation()
            except KnowledgeStoreError:
                self.follows_writes = False
        return 0

    def capabilities(self) -> dict[str, str]:
        return {
            "vector_search": "siam_vectors through the existing match_siam_vectors_gemini",
            "keyword_search": "ILIKE over siam_vectors and wiki_documents",
            "wiki_search": "keyword",
            "writes": "refused: the tables belong to their pipelines",
        }

    def left_out(self) -> list[str]:
        return [
            "writes through the service",
            "full-text ranking (keywords are matched by ILIKE, a query word at a time)",
            "filters inside the vector search (applied to what match_siam_vectors_gemini returns)",
            "wiki search by meaning (needs `knowledge-api migrate --adopt --wiki-vectors`)",
        ] + (
            []
            if self.follows_writes
            else ["noticing other pipelines' writes (cached answers live for their TTL)"]
        )

    async def vector_candidates(
        self, vector: np.ndarray, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        siam = siam_filter(filters)
        if siam is None:
            return []
        filtered = any(value not in (None, {}) for value in siam.values())
        params = {
            "query_embedding": vector,
            "match_threshold": -1.0,
            "match_count": n * READ_ONLY_WIDEN if filtered else n,
        }
        rows = await self.tables.call("match_siam_vectors_gemini", params, SearchError)
        kept = [r for r in rows if row_matches(r, siam)]
        return best(
            [Candidate(found_row(SIAM, r), cosine_to_similarity(r["similarity"])) for r in kept], n
        )

    async def keyword_candidates(
        self, query: str, n: int, filters: SearchFilters
    ) -> list[Candidate]:
        terms = sorted(set(text.content_terms(query)), key=len, reverse=True)[:READ_ONLY_TERMS]
        siam, wiki = siam_filter(filters), self.wiki_filter(filters)
        matched: dict[Found, float] = {}
        for term in terms:
            pattern = f"%{term}%"
            if siam is not None:
                conditions = [("content", "ilike", pattern), *siam_conditions(siam)]
                for row in await self.tables.select(SIAM, SIAM_COLUMNS, *conditions, limit=n):
                    if row_matches(row, siam):
                        key = found_row(SIAM, row)
                        matched[key] = matched.get(key, 0.0) + 1.0
            if wiki is not None:
                for column, weight in (("title", 2.0), ("markdown_content", 1.0)):
                    conditions = [(column, "ilike", pattern)]
                    for row in await self.tables.select(WIKI, WIKI_COLUMNS, *conditions, limit=n):
                        if same_app(wiki["filter_app_name"], row["app_name"]):
                            key = found_row(WIKI, row)
                            matched[key] = matched.get(key, 0.0) + weight
        found = [Candidate(key, score) for key, score in matched.items()]
        return with_keyword_similarity(best(found, n))


# -- rows, filters and hits --------------------------------------------------------------


def siam_filter(filters: SearchFilters) -> dict[str, Any] | None:
    """The siam_vectors search's filter arguments, or None when no passage can match
    (the tables are the default collection)."""
    if filters.collection != DEFAULT_COLLECTION:
        return None
    params = filter_params(filters)
    del params["filter_collection"]
    return params


def siam_conditions(siam: Mapping[str, Any]) -> list[Condition]:
    """The tenancy and source filters as column conditions (metadata is checked after)."""
    conditions: list[Condition] = [
        (key, "eq", siam[f"filter_{key}"]) for key in TENANCY if siam.get(f"filter_{key}")
    ]
    if siam["filter_source_types"] is not None:
        conditions.append(("source_type", "in", siam["filter_source_types"]))
    return conditions


def row_matches(row: Mapping[str, Any], siam: Mapping[str, Any]) -> bool:
    """A row of the existing RPC against the filters (a column it lacks never matches a
    filter on it)."""
    for key in TENANCY:
        wanted = siam.get(f"filter_{key}")
        if wanted is not None and row.get(key) != wanted:
            return False
    types = siam["filter_source_types"]
    if types is not None and row.get("source_type") not in types:
        return False
    metadata = row.get("metadata") or {}
    return all(metadata.get(k) == v for k, v in siam["filter_metadata"].items())


def same_app(wanted: str | None, app_name: str | None) -> bool:
    """The wiki's app filter: none, or the page's app name in any case ('AOMA', 'aoma')."""
    return wanted is None or (app_name or "").casefold() == wanted.casefold()


def found_row(table: str, row: Mapping[str, Any]) -> Found:
    return Found(table, str(row["id"]), row)


def with_keyword_similarity(candidates: list[Candidate]) -> list[Candidate]:
    """Wiki pages without vectors get a stand-in similarity: their share of the best
    keyword score of either table, times WIKI_KEYWORD_SIMILARITY."""
    top = max((c.score for c in candidates), default=0.0) or 1.0
    return [
        Candidate(
            Found(c.key.table, c.key.id, c.key.row, WIKI_KEYWORD_SIMILARITY * c.score / top),
            c.score,
        )
        if isinstance(c.key, Found) and c.key.table == WIKI
        else c
        for c in candidates
    ]


def best(candidates: list[Candidate], n: int) -> list[Candidate]:
    """The n best of candidates from both tables (a stable sort: ties keep their order)."""
    return sorted(candidates, key=lambda c: -c.score)[:n]


def cosine(stored: np.ndarray, query: np.ndarray) -> float:
    norms = float(np.linalg.norm(stored) * np.linalg.norm(query))
    return cosine_to_similarity(float(stored @ query) / norms) if norms else 0.0


def source_metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's metadata with its tenancy columns (the fields results and filters use)."""
    metadata = dict(row.get("metadata") or {})
    metadata.update({key: row[key] for key in TENANCY if row.get(key) is not None})
    return metadata


def wiki_metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"url": row["url"], "app_name": row["app_name"], "title": row["title"]}


def hit_from_found(key: Found, score: float, similarity: float) -> SearchHit:
    row = key.row
    if key.table == WIKI:
        source_type, source_id = "wiki", str(row["url"] or key.id)
        metadata, title, content = wiki_metadata(row), row["title"] or "", row["markdown_content"]
    else:
        source_type, source_id = str(row["source_type"]), str(row["source_id"] or key.id)
        metadata = source_metadata(row)
        title, content = str(metadata.get("title", "")), row["content"]
    doc_id = document_id(DEFAULT_COLLECTION, source_type, source_id)
    return SearchHit(
        chunk=Chunk(
            id=key.id, document_id=doc_id, chunk_index=0, content=content or "", title=title
        ),
        document_id=doc_id,
        source_type=source_type,
        source_id=source_id,
        metadata=metadata,
        score=score,
        similarity=similarity,
    )


def source_document(rows: Sequence[Row]) -> Document:
    """The passages of one source as a document, in id order."""
    first = rows[0]
    metadata = source_metadata(first)
    doc = Document(
        source_type=str(first["source_type"]),
        source_id=str(first["source_id"]),
        content="\n\n".join(r["content"] or "" for r in rows),
        title=str(metadata.get("title", "")),
        metadata=metadata,
    )
    doc.chunks = [
        Chunk(
            id=str(r["id"]),
            document_id=doc.id,
            chunk_index=i,
            content=r["content"] or "",
            chunk_count=len(rows),
        )
        for i, r in enumerate(rows)
    ]
    return doc


def wiki_document(row: Row) -> Document:
    doc = Document(
        source_type="wiki",
        source_id=str(row["url"] or row["id"]),
        content=row["markdown_content"] or "",
        title=row["title"] or "",
        metadata=wiki_metadata(row),
    )
    doc.chunks = [Chunk(id=str(row["id"]), document_id=doc.id, chunk_index=0, content=doc.content)]
    return doc
