"""Who may read what: GET/PUT /v1/knowledge/principals/{id}, the groups the service knows
for a user id (admin), and PATCH /v1/knowledge/sources/{name}?collection=C, the access
list of every document of a source (write). A document's own list is changed by PATCH
/v1/knowledge/documents/{id} (routes/documents.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.models import DEFAULT_COLLECTION
from knowledge_api.principals import GROUP_PATTERN, ID_PATTERN, groups_of, user_id
from knowledge_api.routes.audit import actor
from knowledge_api.routes.documents import ACL_CHANGE
from knowledge_api.usecases import permissions
from knowledge_api.validation import REQUIRED
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, CollectionName, Custom
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import STRING, array, obj

GROUPS = Body(
    "Groups",
    Custom(
        "groups",
        "The user's groups (without `group:`), replacing those it had; empty: none.",
        REQUIRED,
        check=lambda value: groups_of(value, "groups"),
        shape=array({**STRING, "pattern": GROUP_PATTERN}, maxItems=100),
    ),
)
PRINCIPAL = obj({"id": STRING, "groups": array(STRING)})
USER = Custom(
    "id",
    "A user id: an e-mail address or any stable id (no spaces, commas or control characters).",
    check=lambda value: user_id(value, "id"),
    shape={"type": "string", "pattern": ID_PATTERN},
)
"""The body of `principal` and `set_principal`."""
COLLECTION = CollectionName("collection", "The collection of the source.", DEFAULT_COLLECTION)


async def principal(request: Request) -> Response:
    """A user id's groups; 404 for one the service knows no groups of."""
    user = request.path_params["id"]
    found = await permissions.groups(service(request), user)
    if not found:
        raise NotFound(f"no groups are kept for {user!r}", id=user)
    return JSONResponse({"id": user, "groups": list(found)})


async def set_principal(request: Request) -> Response:
    values = GROUPS.parse(await read_json(request))
    user = request.path_params["id"]
    found = await permissions.set_groups(service(request), user, values["groups"], actor(request))
    return JSONResponse({"id": user, "groups": list(found)})


async def source_acl(request: Request) -> Response:
    params: dict[str, Any] = dict(request.query_params)
    unknown = sorted(set(params) - {"collection"})
    if unknown:
        raise InvalidRequest(unknown[0], "is not a known parameter (known: collection)")
    collection = access(request).collection(COLLECTION.parse(params, COLLECTION.default))
    name = request.path_params["name"]
    await permissions.source_documents(service(request), collection, name)
    values = ACL_CHANGE.parse(await read_json(request))
    action = "PATCH /v1/knowledge/sources/{name}"
    source = permissions.Source(collection, name)
    acl = values["acl"]
    said = await permissions.set_acl(service(request), source, acl, action, actor(request))
    shown = {key: said[key] for key in ("acl", "documents", "embedded")}
    return JSONResponse({"success": True, **shown})
