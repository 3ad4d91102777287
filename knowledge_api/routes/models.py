"""GET /v1/models and GET /v1/models/{id}: the collections as OpenAI's models, so that a
chat client (Open WebUI, LibreChat, the OpenAI SDKs) finds them in its model picker
before it posts to /v1/chat/completions. The default collection is the model
`knowledge`, listed once; the others go by their names; a key sees only the
collections it may read."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import NotFound
from knowledge_api.models import DEFAULT_COLLECTION, CollectionInfo
from knowledge_api.usecases import catalog as use
from knowledge_api.web.access import access
from knowledge_api.web.fields import Custom
from knowledge_api.web.http import JSONResponse, service
from knowledge_api.web.schema import INTEGER, STRING, array, obj

DEFAULT_MODEL = "knowledge"
"""The model that names the default collection."""
OWNER = "knowledge-api"

MODEL = obj(
    {
        "id": {**STRING, "description": "A collection's name, or knowledge for the default."},
        "object": {"const": "model"},
        "created": {
            **INTEGER,
            "description": "The collection's last write, in Unix seconds (0: none yet).",
        },
        "owned_by": {"const": OWNER},
    }
)
MODELS = obj({"object": {"const": "list"}, "data": array(MODEL)})
ID = Custom(
    "id",
    "A collection's name, or knowledge for the default one.",
    shape={"type": "string"},
)


def collection_of(model: str) -> str:
    """The collection a model names."""
    return DEFAULT_COLLECTION if model == DEFAULT_MODEL else model


def model_view(model: str, info: CollectionInfo) -> dict[str, object]:
    return {"id": model, "object": "model", "created": unix(info.updated_at), "owned_by": OWNER}


def unix(stamp: str) -> int:
    """An ISO 8601 time (UTC when it names no offset) as Unix seconds; 0 for none."""
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return 0
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp())


def model_name(info: CollectionInfo) -> str:
    return DEFAULT_MODEL if info.name == DEFAULT_COLLECTION else info.name


async def models(request: Request) -> Response:
    caller = access(request)
    found = await use.chat_models(service(request), caller.reaches, caller.principals)
    # a collection named `knowledge` cannot be a model: that name is the default's
    listed = [info for info in found if info.name != DEFAULT_MODEL]
    data = [model_view(model_name(info), info) for info in listed]
    return JSONResponse({"object": "list", "data": data})


async def model(request: Request) -> Response:
    """One model: 403 for a collection the key may not read, 404 for one that does
    not exist (or holds nothing to answer from)."""
    asked = request.path_params["id"]
    caller = access(request)
    if validation.valid_collection(asked):
        caller.collection(collection_of(asked))
    found = await use.chat_models(service(request), caller.reaches, caller.principals)
    for info in found:
        if info.name == collection_of(asked):
            return JSONResponse(model_view(asked, info))
    available = [model_name(info) for info in found if info.name != DEFAULT_MODEL]
    raise NotFound(
        f"no model {asked!r}: a model is a collection's name, or {DEFAULT_MODEL} for the "
        f"default one (models: {', '.join(available) or 'none'})",
        model=asked,
        available=available,
    )
