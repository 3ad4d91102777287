"""What a route is here: a Starlette route that carries its contract beside its
handler (the scope a caller needs, the declared request body, parameters and response,
the errors it answers with and whether it answers as Server-Sent Events), and the kinds
of route the table (`routes/__init__.py`) repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.routing import Route

from knowledge_api.routes.openapi import Contract
from knowledge_api.web.access import ADMIN, PUBLIC, READ, guarded
from knowledge_api.web.fields import Body, Field
from knowledge_api.web.schema import Schema


class ApiRoute(Route):
    def __init__(
        self,
        path: str,
        endpoint: Callable[..., Any],
        method: str,
        scope: str,
        summary: str,
        body: Body | None = None,
        streams: bool = False,
        *,
        response: Schema | None = None,
        statuses: tuple[int, ...] = (200,),
        parameters: tuple[Field, ...] = (),
        errors: tuple[int, ...] | None = None,
        media_type: str = "application/json",
        events: Schema | None = None,
    ) -> None:
        super().__init__(path, guarded(endpoint, scope), methods=[method])
        errors = self.own_errors(body) if errors is None else errors
        self.contract = Contract(
            method,
            scope,
            summary,
            body,
            streams,
            response,
            statuses,
            parameters,
            errors,
            media_type,
            events,
        )

    def own_errors(self, body: Body | None) -> tuple[int, ...]:
        """A body can be malformed, too large or of another type; a path parameter can
        name nothing; anything that reaches the store can find it unavailable."""
        found = [400, 413, 415] if body else []
        if self.param_convertors:
            found.append(404)
        return (*found, 503)


COLLECTION_ERRORS = (400, 404, 413, 415, 503)
"""A body's errors, and 404 for a collection that does not exist."""


def search_route(
    path: str, endpoint: Callable[..., Any], summary: str, body: Body, **contract: Any
) -> ApiRoute:
    """A search that answers as JSON, or as Server-Sent Events with `stream: true`; its
    resource module declares the rest (`ROUTE`)."""
    contract.setdefault("errors", COLLECTION_ERRORS)
    return ApiRoute(path, endpoint, "POST", READ, summary, body, streams=True, **contract)


def chat_route(
    path: str, endpoint: Callable[..., Any], summary: str, body: Body, **contract: Any
) -> ApiRoute:
    """A chat client's route: read scope, a conversation in, a stream or a completion out."""
    contract.setdefault("errors", CHAT_ERRORS)
    return ApiRoute(path, endpoint, "POST", READ, summary, body, streams=True, **contract)


def page_route(path: str, endpoint: Callable[..., Any], summary: str) -> ApiRoute:
    """A public HTML page."""
    return ApiRoute(path, endpoint, "GET", PUBLIC, summary, media_type="text/html", errors=())


def asset_route(path: str, endpoint: Callable[..., Any], page: str, asset: Field) -> ApiRoute:
    """A script, style sheet or icon of a public page, named by `asset`."""
    return ApiRoute(
        path,
        endpoint,
        "GET",
        PUBLIC,
        f"A script, style sheet or icon of {page}.",
        media_type="*/*",
        parameters=(asset,),
        errors=(404,),
    )


def admin_page(
    path: str,
    endpoint: Callable[..., Any],
    summary: str,
    response: Schema,
    parameters: tuple[Field, ...],
) -> ApiRoute:
    """A page of records kept for the admins (ratings, the audit trail), newest first,
    chosen by its query parameters: a 400 names one that breaks its rule."""
    return ApiRoute(
        path,
        endpoint,
        "GET",
        ADMIN,
        summary,
        response=response,
        parameters=parameters,
        errors=(400, 503),
    )


CHAT_ERRORS = (400, 403, 404, 413, 415, 503)
"""404: a collection (or a model naming one) that does not exist."""


def posted(
    path: str,
    endpoint: Callable[..., Any],
    scope: str,
    summary: str,
    body: Body,
    response: Schema,
    status: int = 201,
    **contract: Any,
) -> ApiRoute:
    """A POST that makes a record (201 with it) or starts a job (202 with its id, which
    the job's route answers for)."""
    statuses = (status,)
    return ApiRoute(
        path,
        endpoint,
        "POST",
        scope,
        summary,
        body,
        response=response,
        statuses=statuses,
        **contract,
    )
