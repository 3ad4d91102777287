"""The catalog as readers see it: the collections, the chat models, the sources (and
deleting one with its documents), and a collection's documents page by page, each
counted over what the caller may read.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import replace

import orjson

from knowledge_api.errors import CollectionNotFound, InvalidRequest
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    CollectionInfo,
    DocumentPage,
    DocumentSummary,
    SourceInfo,
)
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import memberships

MAX_PAGE = 500


async def collections(
    service: KnowledgeService,
    visible: Callable[[str], bool],
    principals: frozenset[str] | None = None,
) -> list[CollectionInfo]:
    """The collections `visible` lets through, counted over the documents `principals`
    may read (None: all of them); one with none of those is left out."""
    found = [info for info in await service.sources.collection_stats() if visible(info.name)]
    if principals is None:
        return found
    readable: dict[str, tuple[int, int]] = {}
    for count in await service.catalog.readable_counts(principals):
        documents, chunks = readable.get(count.collection, (0, 0))
        readable[count.collection] = (documents + count.documents, chunks + count.chunks)
    return [
        replace(info, documents=readable[info.name][0], chunks=readable[info.name][1])
        for info in found
        if info.name in readable
    ]


async def chat_models(
    service: KnowledgeService,
    visible: Callable[[str], bool],
    principals: frozenset[str] | None = None,
) -> list[CollectionInfo]:
    """The collections a chat client may name as its model, among those `visible`: the
    default one first, even empty (an empty knowledge base is still one to ask), then
    each other collection that holds documents (one that has only a source's record
    answers nothing)."""
    found = {info.name: info for info in await collections(service, visible, principals)}
    default = found.pop(DEFAULT_COLLECTION, CollectionInfo(DEFAULT_COLLECTION, 0, 0, 0, ""))
    others = [info for info in found.values() if info.documents != 0]
    return [default, *others] if visible(DEFAULT_COLLECTION) else others


async def require_collection(
    service: KnowledgeService,
    collection: str,
    visible: Callable[[str], bool],
    principals: frozenset[str] | None = None,
) -> None:
    """404 `collection_not_found` for a collection that holds nothing (no document, no
    source), listing those the caller may read. Asked only when a listing found nothing:
    counting every collection's documents costs more than a page. For a caller that
    reads some documents only (`principals`), a collection holds what it may read."""
    known = set(await service.collections(principals))
    if collection in known:
        return
    if principals is None:
        if await service.sources.listed(collection):
            return
        known |= {info.collection for info in await service.sources.listed()}
    raise CollectionNotFound(
        f"no collection {collection!r}",
        collection=collection,
        available=sorted(name for name in known if visible(name)),
    )


async def sources(
    service: KnowledgeService, collection: str | None, principals: frozenset[str] | None = None
) -> list[SourceInfo]:
    """The sources (of one collection, or all), each with its documents counted over
    those `principals` may read (None: all); for such a caller, a source none of whose
    documents it may read is left out."""
    found = await service.sources.listed(collection)
    if principals is None:
        return found
    readable = {
        (count.collection, count.source): count.documents
        for count in await service.catalog.readable_counts(principals)
    }
    return [
        replace(info, documents=readable[info.collection, info.name])
        for info in found
        if (info.collection, info.name) in readable
    ]


async def delete_source(
    service: KnowledgeService, collection: str, name: str, visible: Callable[[str], bool]
) -> list[str] | None:
    """The ids of the source's documents, deleted with it; None when the collection
    has no such source (404 `collection_not_found`, listing those the caller may read,
    when the collection itself holds nothing). The groups a connector source granted
    from its service's permissions are taken back."""
    await memberships.released(service, collection, name)
    had, owned = await service.sources.delete(collection, name)
    if not had:
        await require_collection(service, collection, visible)
        return None
    return owned


async def documents(
    service: KnowledgeService,
    page: DocumentPage,
    cursor: str,
    visible: Callable[[str], bool],
    principals: frozenset[str] | None = None,
) -> tuple[list[DocumentSummary], str | None]:
    """One page of the listing (of the documents `principals` may read) and the cursor
    of the next (None after the last); 404 for a collection that holds nothing."""
    if cursor:
        page = DocumentPage(
            page.collection, page.limit, resumed_after(cursor, page), page.source_type, page.source
        )
    found = await service.catalog.list_documents(
        DocumentPage(page.collection, page.limit + 1, page.after, page.source_type, page.source),
        principals,
    )
    if not found and not cursor:
        await require_collection(service, page.collection, visible, principals)
    if len(found) <= page.limit:
        return found, None
    shown = found[: page.limit]
    return shown, cursor_after(page, shown[-1].id)


def listing_key(page: DocumentPage) -> list[str | None]:
    return [page.collection, page.source_type, page.source]


def cursor_after(page: DocumentPage, last_id: str) -> str:
    """Opaque to clients: the listing it belongs to and the last id it showed."""
    raw = orjson.dumps([1, *listing_key(page), last_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def resumed_after(cursor: str, page: DocumentPage) -> str:
    """The id a cursor resumes after; 400 for a cursor this listing did not give."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, *key, last_id = orjson.loads(raw)
    except (ValueError, binascii.Error, TypeError, orjson.JSONDecodeError) as e:
        raise InvalidRequest("cursor", "is not a cursor this listing gave") from e
    if version != 1 or not isinstance(last_id, str):
        raise InvalidRequest("cursor", "is not a cursor this listing gave")
    if key != listing_key(page):
        raise InvalidRequest(
            "cursor", "belongs to a listing of other parameters (collection, source_type, source)"
        )
    return last_id
