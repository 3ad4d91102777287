"""Rows of the tables other pipelines fill, as search candidates, filters, hits and
documents (for stores/existing/store.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge_api.filters import require_equalities
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    Chunk,
    Document,
    SearchFilters,
    SearchHit,
    document_id,
)
from knowledge_api.principals import PUBLIC_ACL
from knowledge_api.stores.fusion import Candidate, cosine_to_similarity
from knowledge_api.stores.postgres.rows import TENANCY, Condition, Row, filter_params

SIAM = "siam_vectors"
WIKI = "wiki_documents"
SIAM_COLUMNS = "id,content,source_type,source_id,metadata,organization,division,app_under_test"
WIKI_COLUMNS = "id,title,url,app_name,markdown_content"
ACL = "knowledge_acl"
"""Who may read a row, once the adoption added it (stores/existing/adopt.py)."""
WIKI_KEYWORD_SIMILARITY = 0.5
"""The similarity a wiki page without a vector has when it is the best keyword hit: a
page found by its words alone counts as half-similar, above the default threshold and
below a passage close in meaning (its cosine is unknown until `migrate --wiki-vectors`)."""


@dataclass(frozen=True, slots=True)
class Found:
    """A search candidate: equal by table and id, carrying its row. A wiki page without
    a vector has no cosine: `keyword` stands in (see with_keyword_similarity)."""

    table: str
    id: str
    row: Mapping[str, Any] = field(compare=False)
    keyword: float = field(default=0.0, compare=False)


def siam_filter(filters: SearchFilters, backend: str) -> dict[str, Any] | None:
    """The siam_vectors search's filter arguments, or None when no passage can match
    (the tables are the default collection)."""
    if DEFAULT_COLLECTION not in filters.searched:
        return None
    require_equalities(filters.where, backend)  # the tables' RPCs take no filter tree
    params = filter_params(filters)
    del params["filter_collections"]
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


def row_acl(row: Mapping[str, Any]) -> tuple[str, ...]:
    """A row's access list: public where the tables keep none."""
    acl = row.get(ACL)
    return PUBLIC_ACL if acl is None else tuple(acl)


def shared_acl(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The access list of a document made of several rows: the principals every row
    lists (a passage another pipeline added later is public until told otherwise; the
    document as a whole is shown only to a reader every passage allows it to)."""
    lists = [row_acl(row) for row in rows]
    return tuple(p for p in lists[0] if all(p in acl for acl in lists[1:]))


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
        acl=shared_acl(rows),
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
        acl=row_acl(row),
    )
    doc.chunks = [Chunk(id=str(row["id"]), document_id=doc.id, chunk_index=0, content=doc.content)]
    return doc
