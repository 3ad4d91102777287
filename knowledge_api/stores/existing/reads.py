"""Documents of the tables other pipelines fill, read by the service (stores/existing/
store.py): by source, by id, and listed; and the access lists of an adopted database
written (the one column of those tables the service writes).

A document here is a source (source_type, source_id) made of the passages sharing both,
or a wiki page. Its id, the uuid the service gives every document, cannot be read back
from the rows: the ids of the documents this process has read (a detail, a result, a
listing's row) are remembered, so a document found by one route is found by its id by
the next (`GET` and `PATCH /v1/knowledge/documents/{id}`); a listing's row id names the
document of its row too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache

from knowledge_api.errors import IndexingError, InvalidRequest
from knowledge_api.models import DEFAULT_COLLECTION, Document, DocumentPage, DocumentSummary
from knowledge_api.stores.existing.rows import (
    ACL,
    SIAM,
    SIAM_COLUMNS,
    WIKI,
    WIKI_COLUMNS,
    row_acl,
    source_document,
    source_metadata,
    wiki_document,
    wiki_metadata,
)
from knowledge_api.stores.postgres.replicas import EVERY_COLLECTION
from knowledge_api.stores.postgres.rows import Condition, Row
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.records import is_uuid

SIAM_SUMMARY_COLUMNS = "id,source_type,source_id,metadata,organization,division,app_under_test"
NAMES_KEPT = 100_000
"""Document ids remembered (about 200 bytes each)."""
Where = tuple[str, str, str]
"""Where a document's rows are: (SIAM, source_type, source_id) or (WIKI, 'wiki', row id)."""


class ExistingReads:
    """Reads by source, by id and by page, for ExistingTables."""

    tables: SiamStore
    mode: str
    acl_kept: bool = False
    """The rows keep access lists (the adoption added `knowledge_acl`)."""
    acl_missing: str = ""
    """Why access lists cannot be changed, when they cannot."""

    def __init__(self) -> None:
        self._where: LRUCache[str, Where] = LRUCache(NAMES_KEPT)

    def columns(self, columns: str) -> str:
        return f"{columns},{ACL}" if self.acl_kept else columns

    def named(self, doc: Document, where: Where) -> Document:
        """`doc`, its id remembered as naming its rows."""
        self._where[doc.id] = where
        return doc

    def remember(self, doc_id: str, where: Where) -> None:
        """That `doc_id` (a search result's) names the rows `where` says."""
        self._where[doc_id] = where

    async def get_by_id(self, doc_id: str) -> Document | None:
        """The document of an id this process has given (a result's, a detail's), or of
        a passage's or page's row id (a listing's)."""
        where = self._where.get(doc_id)
        if where is not None:
            return await self._read(where)
        if not is_uuid(doc_id):
            return None
        passage = await self._first(SIAM, SIAM_COLUMNS, ("id", doc_id))
        if passage is not None:
            return await self._read((SIAM, str(passage["source_type"]), str(passage["source_id"])))
        page = await self._first(WIKI, WIKI_COLUMNS, ("id", doc_id))
        return None if page is None else await self._read((WIKI, "wiki", doc_id))

    async def _read(self, where: Where) -> Document | None:
        table, source_type, key = where
        if table == WIKI:
            page = await self._first(WIKI, self.columns(WIKI_COLUMNS), ("id", key))
            return None if page is None else self.named(wiki_document(page), where)
        rows = await self.tables.select(
            SIAM,
            self.columns(SIAM_COLUMNS),
            ("source_type", "eq", source_type),
            ("source_id", "eq", key),
            on=EVERY_COLLECTION,
        )
        ordered = sorted(rows, key=lambda r: str(r["id"]))
        return self.named(source_document(ordered), where) if rows else None

    async def document_texts(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """None by id, as a citation quotes its passage alone."""
        return {}

    async def find_documents(self, source_type: str, key: str, collection: str) -> list[Document]:
        """One at most: a database other pipelines fill keeps no sources."""
        found = await self._find_document(source_type, key, collection)
        return [found] if found else []

    async def _find_document(self, source_type: str, key: str, collection: str) -> Document | None:
        if collection != DEFAULT_COLLECTION:
            return None
        if source_type == "wiki":
            page = await self._first(WIKI, WIKI_COLUMNS, ("url", key), ("id", key))
            if page:
                return await self._read((WIKI, "wiki", str(page["id"])))
        found = await self._read((SIAM, source_type, key))
        if found is None and is_uuid(key):
            passage = await self._first(SIAM, SIAM_COLUMNS, ("id", key))
            if passage and passage["source_type"] == source_type:
                return await self._read((SIAM, source_type, str(passage["source_id"])))
        return found

    async def _first(self, table: str, columns: str, *keys: tuple[str, str]) -> Row | None:
        """The first row whose column equals its key, trying the keys in order (a
        uuid column is only asked for a uuid)."""
        for column, key in keys:
            if column == "id" and not is_uuid(key):
                continue
            rows = await self.tables.select(
                table, columns, (column, "eq", key), limit=1, on=EVERY_COLLECTION
            )
            if rows:
                return rows[0]
        return None

    async def list_documents(self, page: DocumentPage) -> list[DocumentSummary]:
        """Wiki pages and passages, one entry per row, in id order across both tables
        (every row was written by another pipeline, so of no source: `source` is '')."""
        if page.collection != DEFAULT_COLLECTION or page.source:
            return []
        after: list[Condition] = [("id", "gt", page.after)] if is_uuid(page.after) else []
        found: list[DocumentSummary] = []
        if page.source_type in ("", "wiki"):
            rows = await self.tables.select(
                WIKI,
                self.columns("id,title,url,app_name"),
                *after,
                order="id",
                limit=page.limit,
                on=EVERY_COLLECTION,
            )
            found += [
                listed_row(r, "wiki", str(r["url"] or r["id"]), wiki_metadata(r)) for r in rows
            ]
        kind: list[Condition] = (
            [("source_type", "eq", page.source_type)] if page.source_type else []
        )
        rows = await self.tables.select(
            SIAM,
            self.columns(SIAM_SUMMARY_COLUMNS),
            *after,
            *kind,
            order="id",
            limit=page.limit,
            on=EVERY_COLLECTION,
        )
        found += [
            listed_row(r, str(r["source_type"]), str(r["source_id"] or r["id"]), source_metadata(r))
            for r in rows
        ]
        return sorted(found, key=lambda doc: doc.id)[: page.limit]

    async def set_acl(self, doc_ids: Sequence[str], acl: Sequence[str]) -> int:
        """Give the documents of `doc_ids` the access list `acl` (each passage of a
        source); how many documents there were. A 400 where rows keep no access list."""
        if not self.acl_kept:
            raise InvalidRequest("acl", self.acl_missing, schema_mode=self.mode)
        changed = 0
        for doc_id in doc_ids:
            found = await self.get_by_id(doc_id)
            where = None if found is None else self._where.get(found.id)
            if where is None:
                continue
            table, source_type, key = where
            if table == WIKI:
                params: dict[str, Any] = {"page_id": key, "new_acl": list(acl)}
                rows = await self.tables.call("knowledge_set_wiki_acl", params, IndexingError)
            else:
                params = {"acl_source_type": source_type, "acl_source_id": key}
                rows = await self.tables.call(
                    "knowledge_set_siam_acl", {**params, "new_acl": list(acl)}, IndexingError
                )
            changed += bool(rows and rows[0]["changed"])
        self.acl_changed()
        return changed

    def acl_changed(self) -> None:
        """Cached answers of before an access list changed are misses from now on."""


def listed_row(
    row: Row, source_type: str, source_id: str, metadata: dict[str, Any]
) -> DocumentSummary:
    """A row of another pipeline's table as a listing shows it (one passage or page)."""
    title = row.get("title") or metadata.get("title") or ""
    return DocumentSummary(
        str(row["id"]),
        DEFAULT_COLLECTION,
        source_type,
        source_id,
        "",
        str(title),
        metadata,
        1,
        "",
        "",
        row_acl(row),
    )
