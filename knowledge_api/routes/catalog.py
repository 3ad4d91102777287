"""What is stored, listed: GET /v1/knowledge/collections, GET /v1/knowledge/documents
(paged by an opaque cursor), GET /v1/knowledge/sources and DELETE
/v1/knowledge/sources/{name} (every document of a source)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.ledger import changes
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES, DocumentPage
from knowledge_api.routes.audit import actor
from knowledge_api.usecases import catalog as use
from knowledge_api.usecases import connectors
from knowledge_api.views import ACL
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, CollectionName, Custom, Integer, Text
from knowledge_api.web.http import JSONResponse, service
from knowledge_api.web.schema import INTEGER, SCALAR, STRING, array, nullable, obj

COUNT = nullable({**INTEGER, "minimum": 0})
COLLECTIONS = obj(
    {
        "collections": array(
            obj(
                {
                    "name": STRING,
                    "documents": COUNT,
                    "chunks": COUNT,
                    "sources": COUNT,
                    "updated_at": STRING,
                }
            )
        )
    }
)
"""Every collection the key may read; counts are null where the store does not count
(tables other pipelines fill)."""


def source_filter(value: str | None) -> str | None:
    """A source's name; empty names the documents of no source."""
    return value if not value else validation.source_name(value, "source")


def source_type_filter(value: str | None) -> str:
    """A source type; absent (or empty): every type."""
    if value and value not in SOURCE_TYPES:
        raise InvalidRequest("source_type", f"must be one of: {', '.join(SOURCE_TYPES)}")
    return value or ""


LISTING = Body(
    "DocumentListing",
    CollectionName("collection", "The collection to list.", DEFAULT_COLLECTION),
    Custom(
        "source_type",
        "Only documents of this source type.",
        None,
        check=source_type_filter,
        shape={"type": "string", "enum": list(SOURCE_TYPES)},
    ),
    Custom(
        "source",
        "Only the documents of this source (its name; empty: the documents of no source).",
        None,
        check=source_filter,
        shape={"type": "string", "pattern": f"^$|{validation.SOURCE_PATTERN}"},
    ),
    Integer("limit", "Documents per page.", 100, low=1, high=use.MAX_PAGE),
    Text("cursor", "The `next_cursor` of the page before (absent: the first page).", "", 2000),
)
DOCUMENT_SUMMARY = obj(
    {
        "id": STRING,
        "title": STRING,
        "source_type": STRING,
        "source_id": STRING,
        "source": STRING,
        "collection": STRING,
        "metadata": obj({}, extra=SCALAR),
        "chunks": {**INTEGER, "minimum": 0},
        "created_at": STRING,
        "updated_at": STRING,
        "acl": ACL,
    }
)
DOCUMENTS = obj({"documents": array(DOCUMENT_SUMMARY), "next_cursor": nullable(STRING)})
"""A page of documents in a stable order (by id), without their text or chunks."""

SOURCE_COLLECTION = CollectionName("collection", "Only this collection's sources.", None)
NULL_STRING = nullable(STRING)
SOURCE_VIEW = obj(
    {
        "collection": STRING,
        "name": STRING,
        "documents": COUNT,
        "last_run": STRING,
        "kind": NULL_STRING,
        "url": NULL_STRING,
        "settings": nullable(obj({}, extra=STRING)),
        "secrets": nullable(obj({}, extra=STRING)),
        "cursor": NULL_STRING,
        "next_run": NULL_STRING,
        "last_error": NULL_STRING,
        "warning": NULL_STRING,
        "last_prune": NULL_STRING,
    }
)
"""A source; the connector fields are null for a source `ingest` or an upload fills.
`secrets` names the environment variables holding them, never a value."""
SOURCES = obj({"sources": array(SOURCE_VIEW)})
NAME = Custom(
    "name",
    "The source's name (it may contain '/').",
    check=lambda value: validation.source_name(value, "name"),
    shape={"type": "string", "pattern": validation.SOURCE_PATTERN},
)
COLLECTION = CollectionName("collection", "The collection of the source.", DEFAULT_COLLECTION)
DELETED = obj(
    {
        "success": {"const": True},
        "collection": STRING,
        "source": STRING,
        "deleted": {**INTEGER, "minimum": 0},
    }
)


def query(request: Request) -> dict[str, Any]:
    """The query string as a body: numbers written as digits become numbers."""
    params: dict[str, Any] = dict(request.query_params)
    if isinstance(params.get("limit"), str) and params["limit"].isdigit():
        params["limit"] = int(params["limit"])
    return params


async def collections(request: Request) -> Response:
    caller = access(request)
    found = await use.collections(service(request), caller.reaches, caller.principals)
    return JSONResponse(
        {
            "collections": [
                {
                    "name": info.name,
                    "documents": info.documents,
                    "chunks": info.chunks,
                    "sources": info.sources,
                    "updated_at": info.updated_at,
                }
                for info in found
            ]
        }
    )


async def documents(request: Request) -> Response:
    values = LISTING.parse(query(request), "query")
    caller = access(request)
    collection = caller.collection(values["collection"])
    page = DocumentPage(collection, values["limit"], "", values["source_type"], values["source"])
    found, next_cursor = await use.documents(
        service(request), page, values["cursor"], caller.reaches, caller.principals
    )
    return JSONResponse(
        {
            "documents": [
                {
                    "id": doc.id,
                    "title": doc.title,
                    "source_type": doc.source_type,
                    "source_id": doc.source_id,
                    "source": doc.source,
                    "collection": doc.collection,
                    "metadata": doc.metadata,
                    "chunks": doc.chunks,
                    "created_at": doc.created_at,
                    "updated_at": doc.updated_at,
                    "acl": list(doc.acl),
                }
                for doc in found
            ],
            "next_cursor": next_cursor,
        }
    )


async def sources(request: Request) -> Response:
    params = query(request)
    validation.reject_unknown(params, ("collection",))
    collection = SOURCE_COLLECTION.parse(params, None) if "collection" in params else None
    caller = access(request)
    if collection is not None:
        caller.collection(collection)
    found = await use.sources(service(request), collection, caller.principals)
    every = service(request).settings.sync_interval
    if collection is not None and not found:
        await use.require_collection(
            service(request), collection, caller.reaches, caller.principals
        )
    return JSONResponse(
        {
            "sources": [
                connectors.source_view(info, every)
                for info in found
                if caller.reaches(info.collection)
            ]
        }
    )


async def delete_source(request: Request) -> Response:
    name = validation.source_name(request.path_params["name"], "name")
    params = query(request)
    validation.reject_unknown(params, ("collection",))
    caller = access(request)
    collection = caller.collection(COLLECTION.parse(params, COLLECTION.default))
    deleted = await use.delete_source(service(request), collection, name, caller.reaches)
    if deleted is None:
        raise NotFound(
            f"no source {name!r} in collection {collection!r}", source=name, collection=collection
        )
    changed = {"source": name, **changes(ids=deleted)}
    action = "DELETE /v1/knowledge/sources/{name}"
    await service(request).audit(actor(request), action, collection, changed)
    return JSONResponse(
        {"success": True, "collection": collection, "source": name, "deleted": len(deleted)}
    )
