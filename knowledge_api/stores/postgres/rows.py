"""Rows of the production schema (siam_vectors, knowledge_documents) as the models, the
search functions' filter arguments, and documents as the write function's payload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import orjson

from knowledge_api.errors import IndexingError, KnowledgeStoreError
from knowledge_api.filters import equalities
from knowledge_api.models import (
    Chunk,
    CollectionInfo,
    Document,
    DocumentSummary,
    SearchFilters,
    SearchHit,
    SourceInfo,
)
from knowledge_api.principals import readers_apart
from knowledge_api.stores import records
from knowledge_api.stores.postgres.filter_json import filter_tree

Row = dict[str, Any]
Condition = tuple[str, str, Any]
"""(column, operator, value); operator is "eq", "in", "gt" or "ilike"."""
OPERATORS = {"eq": "= {}", "in": "= ANY({})", "gt": "> {}", "ilike": "ILIKE {}"}

TENANCY = ("organization", "division", "app_under_test")
DOCUMENT_COLUMNS = (
    "id,collection,source_type,source_id,title,content,metadata,content_hash,created_at,updated_at,"
    "source,acl"
)
CHUNK_COLUMNS = (
    "id,document_id,chunk_index,chunk_count,title,section,content,content_hash,"
    "start_offset,end_offset,page"
)
LOOKUP_BATCH = 100
"""Keys per `in` filter: keeps a PostgREST URL well under common limits."""
WRITE_BATCH_CHUNKS = 200
"""Passages per write call: bounds a request body (about 1 MB of 768-d vectors)."""


class FunctionCall(NamedTuple):
    """A set-returning SQL function called with named parameters; `error`: what its
    failure raises."""

    function: str
    params: Mapping[str, Any]
    error: type[KnowledgeStoreError]


class Selection(NamedTuple):
    """What a `select` reads: `columns` of the rows of `table` that meet every
    condition, ordered by `order` (a column; empty: in any order), at most `limit` of
    them (0: all)."""

    table: str
    columns: str
    conditions: tuple[Condition, ...]
    order: str
    limit: int


@dataclass(frozen=True, slots=True)
class Passage:
    """A search candidate: equal (so fused) by id, carrying the row it was found as."""

    id: str
    row: Mapping[str, Any] = field(compare=False)


def filter_params(filters: SearchFilters) -> dict[str, Any]:
    """The filter arguments of the search functions: a filter of metadata equalities
    as before (tenancy keys become column filters, other metadata a JSON containment),
    any other as the tree the functions compile (`filter_where`)."""
    params: dict[str, Any] = {
        "filter_collections": list(filters.searched),
        "filter_source_types": (
            None if filters.source_types is None else list(filters.source_types)
        ),
    }
    contained: dict[str, Any] = {}
    pairs = equalities(filters.where)
    if pairs is None:
        assert filters.where is not None
        return {**params, "filter_metadata": {}, "filter_where": filter_tree(filters.where)}
    for key, value in pairs:
        if key in TENANCY and isinstance(value, str):
            params[f"filter_{key}"] = value
        else:
            contained[key] = value
    params["filter_metadata"] = contained
    return params


def search_params(filters: SearchFilters) -> dict[str, Any]:
    """The search functions' filter arguments: the reader's principals apart
    (`filter_acl`), so that a keyword search narrowed by them alone ranks as many
    passages as their share of the store allows (migration 025), the rest as
    `filter_params` makes them."""
    where, readers = readers_apart(filters.where)
    rest = filter_params(replace(filters, where=where))
    return {**rest, "filter_acl": None if readers is None else list(readers)}


def where_sql(conditions: tuple[Condition, ...]) -> tuple[str, list[Any]]:
    """The WHERE clause of `conditions` (empty for none), each value a parameter."""
    clauses = [
        f"{column} {OPERATORS[op].format(f'${i}')}"
        for i, (column, op, _) in enumerate(conditions, start=1)
    ]
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), [c[2] for c in conditions]


def lookup_parts(keys: list[str]) -> list[list[str]]:
    """`keys` in parts of LOOKUP_BATCH, one `in` filter each."""
    return [keys[start : start + LOOKUP_BATCH] for start in range(0, len(keys), LOOKUP_BATCH)]


def require_embeddings(doc: Document) -> None:
    """A store never embeds: a chunk without its vector is refused before any write."""
    for chunk in doc.chunks:
        if chunk.embedding is None:
            raise IndexingError(f"chunk {chunk.chunk_index} of {doc.source_id!r} has no embedding")


def document_payload(doc: Document) -> Row:
    require_embeddings(doc)
    return {
        "id": doc.id,
        "collection": doc.collection,
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "title": doc.title,
        "content": doc.content,
        "metadata": doc.metadata,
        "content_hash": doc.content_hash,
        "source": doc.source,
        "acl": list(doc.acl),
        "created_at": doc.created_at or None,
        "updated_at": doc.updated_at or None,
        "chunks": [
            {
                "id": chunk.id,
                "chunk_index": chunk.chunk_index,
                "chunk_count": len(doc.chunks),
                "title": chunk.title,
                "section": chunk.section,
                "content": chunk.content,
                "content_hash": chunk.content_hash,
                "embedding": vector_literal(chunk.embedding),
                "start_offset": chunk.start,
                "end_offset": chunk.end,
                "page": chunk.page,
            }
            for chunk in doc.chunks
        ],
    }


def write_batches(payloads: list[Row]) -> list[list[Row]]:
    batches: list[list[Row]] = [[]]
    size = 0
    for payload in payloads:
        if batches[-1] and size + len(payload["chunks"]) > WRITE_BATCH_CHUNKS:
            batches.append([])
            size = 0
        batches[-1].append(payload)
        size += len(payload["chunks"])
    return [batch for batch in batches if batch]


def vector_literal(vector: Any) -> str:
    """pgvector's text form, '[0.1,0.2,...]': the shortest float32 digits, exact."""
    return orjson.dumps(
        np.asarray(vector, dtype=np.float32), option=orjson.OPT_SERIALIZE_NUMPY
    ).decode()


def as_vector(value: Any) -> np.ndarray:
    """A stored vector as float32, from a decoded array or pgvector's text form."""
    if isinstance(value, str):
        value = orjson.loads(value)
    return np.asarray(value, dtype=np.float32)


def chunk_from_row(row: Mapping[str, Any]) -> Chunk:
    embedding = as_vector(row["embedding"]) if "embedding" in row else None
    return records.chunk_from_record(str(row["id"]), row, row["content"], embedding)


def document_from_rows(row: Mapping[str, Any], chunks: Sequence[Mapping[str, Any]]) -> Document:
    return records.document_from_record(row, row["content"], [chunk_from_row(c) for c in chunks])


def documents_from_rows(
    documents: Sequence[Mapping[str, Any]], chunks: Sequence[Mapping[str, Any]]
) -> list[Document]:
    """The documents of `documents` rows, each with its rows of `chunks` in order."""
    mine: dict[str, list[Mapping[str, Any]]] = {str(row["id"]): [] for row in documents}
    for row in chunks:
        mine[str(row["document_id"])].append(row)
    return [
        document_from_rows(row, sorted(mine[str(row["id"])], key=lambda c: int(c["chunk_index"])))
        for row in documents
    ]


def hit_from_row(row: Mapping[str, Any], score: float, similarity: float) -> SearchHit:
    metadata = dict(row["metadata"])
    return records.hit_from_record(str(row["id"]), row, row["content"], metadata, score, similarity)


def source_from_row(r: Mapping[str, Any]) -> SourceInfo:
    return SourceInfo(
        r["collection"],
        r["name"],
        int(r["documents"]),
        records.as_timestamp(r["last_run"]),
        r.get("root") or "",
        r.get("connector") or "",
    )


def summary_from_row(r: Mapping[str, Any]) -> DocumentSummary:
    return records.summary_of(r, str(r["id"]), int(r["chunks"]))


def collection_from_row(r: Mapping[str, Any]) -> CollectionInfo:
    return CollectionInfo(
        r["name"],
        int(r["documents"]),
        int(r["chunks"]),
        int(r["sources"]),
        records.as_timestamp(r["updated_at"]) if r["updated_at"] else "",
    )
