"""What every route shares: bounded JSON bodies, orjson responses, the error shape."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route

from knowledge_api import validation
from knowledge_api.errors import (
    InvalidJSON,
    KnowledgeAPIError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)
from knowledge_api.logs import request_id
from knowledge_api.service import KnowledgeService
from knowledge_api.web.observe import HEADER

log_unexpected = logging.getLogger("knowledge_api.errors")


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def service(request: Request) -> KnowledgeService:
    svc: KnowledgeService = request.app.state.service
    return svc


async def read_json(request: Request, extra_bytes: int = 0, limit: int | None = None) -> Any:
    """The parsed body; 415 unless it is declared JSON (a form or text/plain POST, which
    any web page may send cross-site without a preflight, is refused); 413 past the size
    limit (checked before reading it all): `limit`, or KNOWLEDGE_MAX_BODY_BYTES plus
    `extra_bytes` for a route whose content may be longer."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(
            f"the body must be sent as application/json (got {media_type or 'no content type'})",
            content_type=media_type,
        )
    settings = request.app.state.settings
    if limit is None:
        limit = settings.max_body_bytes + extra_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body is {declared} bytes; the limit is {limit}", limit=limit)
    body = bytearray()
    try:
        async with asyncio.timeout(settings.body_timeout):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes", limit=limit)
    except TimeoutError as e:
        raise RequestTimeout(
            f"the body did not arrive within {settings.body_timeout:g} s "
            f"({len(body)} bytes received)",
            timeout_s=settings.body_timeout,
        ) from e
    if not body:
        raise InvalidJSON("body", "must be a JSON object (the body is empty)")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        exact = exact_integers(body, None)  # an integer past the doubles reads as infinity
        if exact is None:
            raise InvalidJSON("body", f"must be valid JSON ({e})") from e
        return exact
    return exact_integers(body, parsed)


_LONG_NUMBER = re.compile(rb"\d{19}")
"""19 digits in a row: perhaps an integer past the doubles, which orjson refuses."""
_TOO_LONG = 2**64
_INT64 = validation.INT64
"""Stands for an integer literal too long to convert (Python refuses 4,300 digits)."""


def exact_integers(body: bytes | bytearray, parsed: Any) -> Any:
    """`parsed`, or for a body with a number that may be an integer past 64 bits the
    body parsed again with its integers exact (orjson reads 10**300 as 1e300, which a
    field would then take for a float): each field that reads a number refuses one past
    64 bits, naming itself (`validation.check_int64`). The rare body with such a number
    pays for the slower parser; `parsed` None is a body orjson refused."""
    if not (maybe_long(parsed) if parsed is not None else _LONG_NUMBER.search(body)):
        return parsed
    try:
        return json.loads(
            body,
            parse_int=lambda s: int(s) if len(s) < 30 else _TOO_LONG,
            parse_float=finite,
            parse_constant=refused,
        )
    except ValueError:
        return parsed


def maybe_long(value: Any) -> bool:
    """Whether a number in `value` is, or may have been written as, an integer past 64
    bits: orjson reads one within 64 unsigned bits as an int, and the others as floats
    (which a float of that size may be, too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif (kind is int and not -_INT64 <= item < _INT64) or (
            kind is float and abs(item) >= _INT64  # -2**63 - 1 reads as -2.0**63
        ):
            return True
    return False


def finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal} is past the doubles")
    return value


def refused(literal: str) -> Any:
    raise ValueError(f"{literal} is not JSON")


def route_list(request: Request) -> list[str]:
    return [
        f"{method} {route.path}"
        for route in request.app.routes
        if isinstance(route, Route)
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]


def error_response(error: KnowledgeAPIError, headers: dict[str, str] | None = None) -> Response:
    """The error shape, with the request's id in `details.request_id` and its header."""
    body = error.body()
    details = body["error"]["details"]  # an echoed integer past 64 bits is no JSON of orjson's
    body["error"]["details"] = {
        k: v if validation.is_int64(v) else str(v) for k, v in details.items()
    }
    headers = {**error.headers, **(headers or {})}
    if rid := request_id():
        body["error"]["details"] = {**body["error"]["details"], "request_id": rid}
        headers[HEADER] = rid
    return JSONResponse(body, status_code=error.status, headers=headers)


def allowed_methods(request: Request) -> str:
    """Every method the path takes: the router's own 405 names only those of the first
    route that matched the path, and GET and DELETE of a document are two routes."""
    methods = {
        method
        for route in request.app.routes
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE
        for method in route.methods or ()
    }
    return ", ".join(sorted(methods))


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, KnowledgeAPIError)
    return error_response(exc)


async def http_error(request: Request, exc: Exception) -> Response:
    """Router errors (unknown route, wrong method) in the one error shape."""
    assert isinstance(exc, HTTPException)
    error: KnowledgeAPIError
    headers = {name.lower(): value for name, value in (exc.headers or {}).items()}
    if exc.status_code == 404:
        error = NotFound(
            f"no route {request.method} {request.url.path}", routes=route_list(request)
        )
    elif exc.status_code == 405:
        headers["allow"] = allowed_methods(request) or headers.get("allow", "")
        error = MethodNotAllowed(
            f"{request.method} is not allowed on {request.url.path}", allowed=headers["allow"]
        )
    else:
        error = KnowledgeAPIError(str(exc.detail))
        error.status = exc.status_code
        error.type = "http_error"
    return error_response(error, headers)


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client went away before its request was read: nothing to answer. The request
    line says so (web/observe.py)."""
    return Response(status_code=400)


async def unexpected_error(request: Request, exc: Exception) -> Response:
    log_unexpected.exception("unhandled error on %s %s", request.method, request.url.path)
    error = KnowledgeAPIError("internal error: this is a bug, the log has the traceback")
    return error_response(error)


EXCEPTION_HANDLERS = {
    ClientDisconnect: client_gone,
    KnowledgeAPIError: api_error,
    HTTPException: http_error,
    Exception: unexpected_error,
}
