"""POST/GET/DELETE /v1/knowledge/documents: index, fetch and delete documents."""

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES, Document
from knowledge_api.routes.http import JSONResponse, read_json, service

DOCUMENT_FIELDS = ("source_type", "source_id", "content", "title", "metadata", "collection")
MAX_BATCH = 100


async def create(request: Request) -> Response:
    payload = validation.require_object(await read_json(request))
    if "documents" in payload:
        validation.reject_unknown(payload, ("documents",))
        items = payload["documents"]
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
            raise InvalidRequest("documents", f"must be a list of 1 to {MAX_BATCH} documents")
        docs = [parse_document(item, f"documents[{i}]") for i, item in enumerate(items)]
    else:
        docs = [parse_document(payload, "body")]
    summary = await service(request).ingest(docs)
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
    return JSONResponse(await service(request).document(request.path_params["id"]))


async def delete(request: Request) -> Response:
    return JSONResponse(await service(request).delete_document(request.path_params["id"]))


def parse_document(item: Any, where: str) -> Document:
    body = validation.require_object(item, where)
    validation.reject_unknown(body, DOCUMENT_FIELDS)
    source_type = validation.text(body, "source_type", max_length=32)
    if source_type not in SOURCE_TYPES:
        raise InvalidRequest("source_type", f"must be one of: {', '.join(SOURCE_TYPES)}")
    return Document(
        source_type=source_type,
        source_id=validation.text(body, "source_id", max_length=500).strip(),
        content=validation.text(body, "content", max_length=60000),
        title=validation.text(body, "title", max_length=500, default="").strip(),
        metadata=validation.scalar_mapping(body, "metadata"),
        collection=validation.collection_name(body.get("collection", DEFAULT_COLLECTION)),
    )
