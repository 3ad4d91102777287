"""API keys over HTTP (admin): POST /v1/knowledge/keys creates one and answers its token
once; GET /v1/knowledge/keys lists them and GET /v1/knowledge/keys/{name} reads one
(never a token); DELETE /v1/knowledge/keys/{name} revokes one. The same values and rules
as `knowledge-api keys create | list | revoke` (usecases/keys.py).

An admin key limited to some collections manages only keys limited to those (or to
fewer): it cannot mint a key that reaches further than itself, and the keys beyond its
reach are answered as missing."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import Forbidden, NotFound
from knowledge_api.models import ApiKey
from knowledge_api.principals import GROUP_PATTERN, ID_PATTERN, groups_of, user_id
from knowledge_api.routes.audit import actor
from knowledge_api.usecases import keys
from knowledge_api.validation import COLLECTION_PATTERN, REQUIRED
from knowledge_api.web.access import Access, access
from knowledge_api.web.fields import Body, Custom
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import STRING, array, enum, nullable, obj

NAME = Custom(
    "name",
    "The key's name, unique among the keys.",
    REQUIRED,
    check=keys.key_name,
    shape={"type": "string", "pattern": keys.NAME_PATTERN},
)
CREATE = Body(
    "KeyCreate",
    NAME,
    Custom(
        "scopes",
        "What the key may do: read, write, admin (which implies the others), delegate "
        "(send X-Knowledge-User).",
        REQUIRED,
        check=keys.scopes_of,
        shape=array(enum(*keys.SCOPES), minItems=1),
    ),
    Custom(
        "collections",
        "The collections the key may reach; absent or empty: every collection.",
        None,
        check=lambda value: () if value is None else keys.collections_of(value),
        shape=nullable(
            array({"type": "string", "pattern": COLLECTION_PATTERN}, maxItems=keys.MAX_COLLECTIONS)
        ),
    ),
    Custom(
        "user",
        "The user id the key reads as (an e-mail address or any stable id).",
        None,
        check=lambda value: "" if value is None else user_id(value, "user"),
        shape=nullable({"type": "string", "pattern": ID_PATTERN}),
    ),
    Custom(
        "groups",
        "Groups (without `group:`) the key's own principals hold, beside those the service "
        "keeps for its user.",
        None,
        check=lambda value: () if value is None else groups_of(value, "groups"),
        shape=nullable(array({"type": "string", "pattern": GROUP_PATTERN}, maxItems=100)),
    ),
)
KEY = obj(
    {
        "name": STRING,
        "scopes": array(enum(*keys.SCOPES)),
        "collections": nullable(array(STRING)),
        "user": nullable(STRING),
        "groups": array(STRING),
        "created_at": STRING,
    }
)
"""A key as it is kept, never its token; `collections` null: every collection."""
CREATED = obj({**KEY["properties"], "token": STRING})
"""The body of `create`'s 201: the key and its token, the one time it is shown."""
LISTED = obj({"keys": array(KEY)})
REVOKED = obj({"success": {"const": True}, "revoked": STRING})


def key_view(key: ApiKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "scopes": list(key.scopes),
        "collections": None if key.collections is None else list(key.collections),
        "user": key.user or None,
        "groups": list(key.groups),
        "created_at": key.created_at,
    }


def manages(caller: Access, key: ApiKey) -> bool:
    """Whether `caller` may see and revoke `key`: a caller reaching every collection
    any key; one limited to some, the keys limited to those."""
    if caller.collections is None:
        return True
    return key.collections is not None and set(key.collections) <= caller.collections


async def create(request: Request) -> Response:
    values = CREATE.parse(await read_json(request))
    caller = access(request)
    if caller.collections is not None and not values["collections"]:
        raise Forbidden(
            f"the key {caller.name!r} reaches some collections only: a key it creates "
            "must name its collections, among those",
            key=caller.name,
            field="collections",
        )
    caller.searches(values["collections"])
    key, token = await keys.create(
        service(request),
        values["name"],
        values["scopes"],
        values["collections"],
        actor(request),
        values["user"],
        values["groups"],
        prefix="",
        action="POST /v1/knowledge/keys",
    )
    return JSONResponse({**key_view(key), "token": token}, status_code=201)


async def listed(request: Request) -> Response:
    caller = access(request)
    found = [key for key in await keys.listed(service(request)) if manages(caller, key)]
    return JSONResponse({"keys": [key_view(key) for key in found]})


async def managed(request: Request) -> ApiKey:
    """The key the path names, if the caller manages it; 404 otherwise."""
    name = keys.key_name(request.path_params["name"], "name")
    key = await keys.named(service(request), name)
    if key is None or not manages(access(request), key):
        raise NotFound(f"no key named {name!r}", name=name)
    return key


async def get(request: Request) -> Response:
    return JSONResponse(key_view(await managed(request)))


async def revoke(request: Request) -> Response:
    key = await managed(request)
    action = "DELETE /v1/knowledge/keys/{name}"
    if not await keys.revoke(service(request), key.name, actor(request), action):
        raise NotFound(f"no key named {key.name!r}", name=key.name)
    return JSONResponse({"success": True, "revoked": key.name})
