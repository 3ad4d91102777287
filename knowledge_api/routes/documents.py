"""POST/GET/DELETE /v1/knowledge/documents: index, fetch and delete documents."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.ledger import changes
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES, Document
from knowledge_api.principals import PUBLIC_ACL
from knowledge_api.routes.audit import actor
from knowledge_api.usecases import permissions
from knowledge_api.validation import REQUIRED
from knowledge_api.views import ACL, OFFSETS, acl_field, document_view
from knowledge_api.views import DOCUMENT as DOCUMENT_VIEW
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, CollectionName, Custom, Date, OneOf, Scalars, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import INTEGER, STRING, array, obj

MAX_BATCH = 100
MAX_CONTENT = validation.CONTENT_MAX_LENGTH
CONTENT_BYTES = 6 * MAX_CONTENT
r"""The most a document's content can take in a JSON body (a character escaped as
`\uXXXX` is 6 bytes): the body limit grows by this much, so a document of the longest
content fits."""
DOCUMENT = Body(
    # its fields' rules are validation.document_fields', which the other doors apply
    "Document",
    OneOf("source_type", "Where the document comes from.", allowed=SOURCE_TYPES),
    Text(
        "source_id",
        "Its id there: a Jira key, a commit, a URL.",
        max_length=validation.SOURCE_ID_MAX_LENGTH,
    ),
    Text(
        "content",
        "Its text (Markdown headings give passages their section).",
        max_length=MAX_CONTENT,
        strip=False,
    ),
    Text("title", "Its title.", "", max_length=validation.TITLE_MAX_LENGTH),
    Scalars("metadata", "Metadata values, e.g. app_under_test.", None),
    CollectionName("collection", "The collection to index into.", DEFAULT_COLLECTION),
    Date(
        "created_at",
        "When the item was created where it lives (ISO 8601; default: when first indexed).",
    ),
    Date(
        "updated_at",
        "When the item last changed where it lives (ISO 8601; default: when indexed).",
    ),
    acl_field(
        "Who may read it: principals (public, user:<id>, group:<name>); empty: "
        "closed, admin keys only.",
        PUBLIC_ACL,
    ),
)


DOCUMENTS = Body(
    "Documents",
    Custom(
        "documents",
        f"Up to {MAX_BATCH} documents; or send one document as the body itself.",
        check=lambda value: value,
        shape={
            "type": "array",
            "items": DOCUMENT.schema(),
            "minItems": 1,
            "maxItems": MAX_BATCH,
        },
    ),
    alternatives=(DOCUMENT,),
)
"""A batch; POST /v1/knowledge/documents also takes one DOCUMENT as the body."""

COUNT = {**INTEGER, "minimum": 0}
CREATED = obj(
    {
        "success": {"const": True},
        "ids": array(STRING, minItems=1, maxItems=MAX_BATCH),
        "indexed": COUNT,
        "chunks": COUNT,
        "embedded": COUNT,
        "skipped": COUNT,
    }
)
"""The body of `create`'s 201."""
STORED = DOCUMENT_VIEW
"""The body of `get`: the document with its chunks."""
PARAMETERS = (OFFSETS,)
"""The query of `get`: the unit of its chunks' offsets."""
DELETED = obj({"success": {"const": True}, "deleted": STRING})
"""The body of `delete`."""


def parse(payload: Any) -> list[Document]:
    """One document, or {"documents": [...]} (up to MAX_BATCH)."""
    body = validation.require_object(payload)
    if "documents" not in body:
        return [parse_document(body, "body")]
    validation.reject_unknown(body, ("documents",))
    items = body["documents"]
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise InvalidRequest("documents", f"must be a list of 1 to {MAX_BATCH} documents")
    return [parse_document(item, f"documents[{i}]") for i, item in enumerate(items)]


def parse_document(item: Any, where: str) -> Document:
    return Document(**validation.in_order(DOCUMENT.parse(item, where)))


async def create(request: Request) -> Response:
    docs = parse(await read_json(request, CONTENT_BYTES))
    caller = access(request)
    for doc in docs:
        caller.collection(doc.collection)
    summary = await service(request).ingest(docs)
    collections = sorted({doc.collection for doc in docs})
    extra = {} if len(collections) == 1 else {"collections": collections}
    await service(request).audit(
        actor(request),
        "POST /v1/knowledge/documents",
        collections[0] if len(collections) == 1 else None,
        changes(docs, summary, **extra),
    )
    return JSONResponse(
        {
            "success": True,
            "ids": [doc.id for doc in docs],
            "indexed": summary.documents,
            "chunks": summary.chunks,
            "embedded": summary.embedded,
            "skipped": summary.skipped,
        },
        status_code=201,
    )


async def get(request: Request) -> Response:
    unit = OFFSETS.parse(dict(request.query_params), OFFSETS.default)
    return JSONResponse(document_view(await reachable(request), unit))


ACL_CHANGE = Body(
    "AccessList",
    acl_field(
        "The new access list: principals (public, user:<id>, group:<name>); empty: "
        "closed, admin keys only.",
        REQUIRED,
    ),
)
ACL_CHANGED = obj(
    {
        "success": {"const": True},
        "acl": ACL,
        "documents": COUNT,
        "embedded": {"const": 0},
    }
)
"""The body of `change_acl` (and of a source's change): nothing is embedded again."""


async def change_acl(request: Request) -> Response:
    """PATCH /v1/knowledge/documents/{id}: a new access list, nothing embedded again."""
    doc = await reachable(request)
    values = ACL_CHANGE.parse(await read_json(request))
    knowledge = service(request)
    action = "PATCH /v1/knowledge/documents/{id}"
    said = await permissions.set_acl(knowledge, doc, values["acl"], action, actor(request))
    return JSONResponse({"success": True, **{k: said[k] for k in ("acl", "documents", "embedded")}})


async def delete(request: Request) -> Response:
    doc = await reachable(request)
    if not await service(request).delete_document(doc.id):
        raise NotFound(f"no document with id {doc.id!r}", id=doc.id)
    await service(request).audit(
        actor(request),
        "DELETE /v1/knowledge/documents/{id}",
        doc.collection,
        changes([doc], deleted=1),
    )
    return JSONResponse({"success": True, "deleted": doc.id})


async def reachable(request: Request) -> Document:
    """The document of the path, if it exists in a collection the caller may reach and
    its principals may read (a document of another tenant, or hidden from the caller,
    is as absent as one that does not exist)."""
    doc_id = request.path_params["id"]
    caller = access(request)
    doc = await service(request).document(doc_id, caller.principals)
    if doc is None or not caller.reaches(doc.collection):
        raise NotFound(f"no document with id {doc_id!r}", id=doc_id)
    return doc
