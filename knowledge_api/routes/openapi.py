"""GET /openapi.json and GET /docs: the OpenAPI 3.1 document, generated from the route
table's own declarations (path, method, scope, request body, parameters, response,
errors, streaming), and an interactive page for it that needs no network.

Nothing here is written by hand per route: a route's contract lives beside its handler
(`routes/__init__.py` and its resource module), so the document cannot drift from what
the routes parse and render.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, runtime_checkable

from starlette.convertors import Convertor, FloatConvertor, IntegerConvertor, UUIDConvertor
from starlette.requests import Request
from starlette.responses import Response
from swagger_ui_bundle import swagger_ui_path

from knowledge_api import __version__
from knowledge_api.errors import NotFound
from knowledge_api.web.fields import Body, Field, OneOf, filter_schema
from knowledge_api.web.http import JSONResponse
from knowledge_api.web.schema import STRING, Schema, obj

ERROR = "#/components/schemas/Error"
ERROR_SCHEMA = obj(
    {
        "success": {"const": False},
        "error": obj(
            {
                "type": {**STRING, "description": "A stable error type, e.g. invalid_query."},
                "message": {**STRING, "description": "What went wrong; names the field."},
                "details": obj({}, extra=True),
            }
        ),
    }
)
"""The one error shape of every error status (`errors.KnowledgeAPIError.body`)."""

ERROR_STATUSES = {
    400: "Invalid request: the message names the field and the rule it broke.",
    401: "No credentials, or unknown ones.",
    403: "The credentials lack the route's scope; or a browser page of an origin the "
    "service does not accept (KNOWLEDGE_CORS_ORIGINS) sent a write.",
    404: "Nothing found at this path or with this id.",
    405: "The path does not take this method.",
    408: "The body stopped arriving (KNOWLEDGE_BODY_TIMEOUT), an upload's arrived too slowly "
    "(KNOWLEDGE_UPLOAD_MIN_RATE), or the headers did not arrive in time "
    "(KNOWLEDGE_HEADER_TIMEOUT).",
    409: "The store serves tables other pipelines own: writes are refused.",
    413: "The body exceeds the size limit.",
    415: "The body is not of the route's media type (application/json, multipart/form-data "
    "for files).",
    421: "The Host header names no host this service answers to (KNOWLEDGE_ALLOWED_HOSTS).",
    429: "Too many requests: retry later.",
    503: "A part the route needs (the store, the embedder) is unavailable.",
}
ACCESS_ERRORS = (401, 403)
"""Answered by access control before a route that needs a scope runs."""
EVERY_ROUTE_ERRORS = (421, 429)

SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key as a bearer token: `Authorization: Bearer kapi_...`.",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "The same API key in the X-API-Key header.",
    },
}

RESPONSE: Schema = {
    "type": "object",
    "required": ["openapi", "info", "paths", "components"],
    "properties": {"openapi": {"const": "3.1.0"}},
}
"""The body of GET /openapi.json (its own shape is the OpenAPI 3.1 schema's)."""

EVENT: Schema = obj({"event": STRING, "data": STRING})
"""A Server-Sent Event of a route that names none of its own."""

_CONVERTOR_SUFFIX = re.compile(r"{([^}:]+):[^}]+}")
PUBLIC = "public"
"""`routes.PUBLIC` (the route table imports this module, so not the other way)."""


@dataclass(frozen=True, slots=True)
class Contract:
    """What a route declares (`routes.ApiRoute`), as the document reads it."""

    method: str
    scope: str
    """The scope a caller's key needs (PUBLIC: none)."""
    summary: str
    body: Body | None
    streams: bool
    """With `stream: true` the route answers text/event-stream."""
    response: Schema | None
    """JSON Schema of the body answered with `statuses` (None: not JSON)."""
    statuses: tuple[int, ...]
    parameters: tuple[Field, ...]
    """Declared path and query parameters (a path's own names are path parameters)."""
    errors: tuple[int, ...]
    """Statuses the route itself answers in the error shape (access adds its own)."""
    media_type: str
    events: Schema | None
    """JSON Schema of one event (`event`, `data`) of a streamed answer."""


@runtime_checkable
class Declared(Protocol):
    """A route the document covers: its path, its convertors and its contract."""

    path: str
    param_convertors: dict[str, Convertor[Any]]
    contract: Contract


def document(routes: Iterable[Declared]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes`."""
    routes = list(routes)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(openapi_path(route.path), {})[route.contract.method.lower()] = operation(
            route
        )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Knowledge API",
            "version": __version__,
            "description": "Hybrid retrieval over an organisation's knowledge, with grounded "
            "answers. Every error answers in one shape: `Error`.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA, "Filter": filter_schema(), **body_schemas(routes)},
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def openapi_path(path: str) -> str:
    """Starlette's `{id:path}` is OpenAPI's `{id}`."""
    return _CONVERTOR_SUFFIX.sub(r"{\1}", path)


def body_schemas(routes: Sequence[Declared]) -> dict[str, Schema]:
    schemas: dict[str, Schema] = {}
    for route in routes:
        if route.contract.body is not None:
            for body in (route.contract.body, *route.contract.body.alternatives):
                schemas[body.name] = body.schema()
    return schemas


def operation(route: Declared) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": operation_id(route),
        "summary": route.contract.summary,
        "description": scope_description(route.contract.scope),
        "security": security(route.contract.scope),
    }
    if route.contract.scope != PUBLIC:
        op["x-required-scope"] = route.contract.scope
    parameters = [parameter(route, name) for name in route.param_convertors]
    parameters += [
        query_parameter(f)
        for f in route.contract.parameters
        if f.name not in route.param_convertors
    ]
    if parameters:
        op["parameters"] = parameters
    if route.contract.body is not None:
        op["requestBody"] = request_body(route.contract.body)
    op["responses"] = {**success_responses(route), **error_responses(route)}
    return op


def operation_id(route: Declared) -> str:
    words = re.findall(r"[a-z]+", openapi_path(route.path).replace("/v1/knowledge", ""))
    return (
        "_".join([route.contract.method.lower(), *words])
        if words
        else route.contract.method.lower()
    )


def scope_description(scope: str) -> str:
    if scope == PUBLIC:
        return "Public: no credentials needed."
    return f"Required scope: `{scope}` (a bearer token or an X-API-Key with it)."


def security(scope: str) -> list[dict[str, list[str]]]:
    """Either scheme, with the scope as the required role (OpenAPI 3.1 allows roles on
    any scheme); none for a public route."""
    if scope == PUBLIC:
        return []
    return [{name: [scope]} for name in SECURITY_SCHEMES]


def declared(route: Declared, name: str) -> Field | None:
    return next((f for f in route.contract.parameters if f.name == name), None)


def parameter(route: Declared, name: str) -> dict[str, Any]:
    """A path parameter: its declared field's schema, or the type its convertor takes."""
    field = declared(route, name)
    schema = field.schema() if field else convertor_schema(route.param_convertors[name])
    found: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": schema}
    if field and field.description:
        found["description"] = field.description
    return found


def query_parameter(field: Field) -> dict[str, Any]:
    found = {"name": field.name, "in": "query", "required": field.required}
    found["schema"] = field.described()
    if field.description:
        found["description"] = field.description
    return found


def convertor_schema(convertor: Convertor[Any]) -> Schema:
    if isinstance(convertor, IntegerConvertor):
        return {"type": "integer", "minimum": 0}
    if isinstance(convertor, FloatConvertor):
        return {"type": "number", "minimum": 0}
    if isinstance(convertor, UUIDConvertor):
        return {"type": "string", "format": "uuid"}
    return {"type": "string", "pattern": f"^{convertor.regex}$"}


def request_body(body: Body) -> dict[str, Any]:
    refs = [{"$ref": f"#/components/schemas/{b.name}"} for b in (body, *body.alternatives)]
    schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"required": True, "content": {body.media_type: {"schema": schema}}}


def success_responses(route: Declared) -> dict[str, Any]:
    content: dict[str, Any] = {
        route.contract.media_type: {"schema": route.contract.response or STRING}
    }
    description = route.contract.summary
    if route.contract.streams:
        content["text/event-stream"] = {"schema": route.contract.events or EVENT}
        description += " With `stream: true`, Server-Sent Events (text/event-stream)."
    return {
        str(s): {"description": description, "content": content} for s in route.contract.statuses
    }


def error_responses(route: Declared) -> dict[str, Any]:
    statuses = set(route.contract.errors) | set(EVERY_ROUTE_ERRORS)
    if route.contract.scope != PUBLIC:
        statuses |= set(ACCESS_ERRORS)
    return {
        str(status): {
            "description": ERROR_STATUSES[status],
            "content": {"application/json": {"schema": {"$ref": ERROR}}},
        }
        for status in sorted(statuses - set(route.contract.statuses))
    }


async def openapi(request: Request) -> Response:
    return JSONResponse(document(r for r in request.app.routes if isinstance(r, Declared)))


# -- GET /docs: Swagger UI (5.x reads OpenAPI 3.1) from the swagger-ui-bundle-v2 package --

ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
"""The bundle's files the page uses, by name, with their media type."""
INIT = "docs.js"
"""The page's own script; a file rather than an inline script, so a strict
Content-Security-Policy (script-src 'self') still lets the page run."""
ASSET = OneOf("asset", "A file of the page.", allowed=(*ASSETS, INIT))

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Knowledge API</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head>
<body>
  <div id="docs"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/docs.js"></script>
</body>
</html>
"""
SCRIPT = """window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#docs",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
  });
};
"""
"""`validatorUrl: null`: no call to the public validator, the page stays offline."""


async def docs(request: Request) -> Response:
    return Response(PAGE, media_type="text/html")


async def docs_asset(request: Request) -> Response:
    name = request.path_params["asset"]
    if name not in ASSET.allowed:
        raise NotFound(f"no file {name!r} in /docs", allowed=list(ASSET.allowed))
    if name == INIT:
        return Response(SCRIPT, media_type="text/javascript")
    return Response(asset(name), media_type=ASSETS[name])


@cache
def asset(name: str) -> bytes:
    """A file of the bundle, read once."""
    data: bytes = (swagger_ui_path / name).read_bytes()
    return data
