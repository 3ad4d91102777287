"""The route table: thin handlers, one module per resource.

Each route carries its contract beside its handler: the scope a caller needs, the
declared request body and whether it answers as Server-Sent Events. Access control
and the OpenAPI document both read it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.routing import Route

from knowledge_api.routes import (
    answer,
    detail,
    documents,
    health,
    metrics,
    query,
    retrieve,
    support,
)
from knowledge_api.routes.access import ADMIN, PUBLIC, READ, WRITE, guarded
from knowledge_api.routes.fields import Body


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
    ) -> None:
        super().__init__(path, guarded(endpoint, scope), methods=[method])
        self.method = method
        self.scope = scope
        """The scope a caller's key needs (PUBLIC: none)."""
        self.summary = summary
        self.body = body
        self.streams = streams
        """With `stream: true` the route answers text/event-stream."""


ROUTES = [
    ApiRoute("/health", health.health, "GET", PUBLIC, "Service status and its parts."),
    ApiRoute("/livez", health.livez, "GET", PUBLIC, "The process is up (always 200)."),
    ApiRoute(
        "/readyz",
        health.readyz,
        "GET",
        PUBLIC,
        "200 when the store answers and the embedder is loaded; 503 naming what is not.",
    ),
    ApiRoute(
        metrics.METRICS_PATH,
        metrics.metrics,
        "GET",
        ADMIN,
        "Prometheus metrics (also open to KNOWLEDGE_METRICS_TOKEN as a bearer token).",
    ),
    ApiRoute(
        "/v1/knowledge/query",
        query.query,
        "POST",
        READ,
        "Search every source; optionally a synthesis with citations.",
        query.QUERY,
        streams=True,
    ),
    ApiRoute(
        "/v1/knowledge/answer",
        answer.answer,
        "POST",
        READ,
        "A grounded answer with numbered sources and confidence.",
        answer.ANSWER,
        streams=True,
    ),
    ApiRoute(
        "/v1/knowledge/retrieve",
        retrieve.retrieve,
        "POST",
        READ,
        "Chunks of one collection with source metadata and the query embedding.",
        retrieve.RETRIEVE,
    ),
    ApiRoute(
        "/v1/knowledge/validate",
        retrieve.validate,
        "POST",
        ADMIN,
        "Validation runs of test queries: relevance, metadata, consistency, accuracy.",
        retrieve.VALIDATE,
    ),
    ApiRoute(
        "/v1/knowledge/support",
        support.support,
        "POST",
        READ,
        "Support retrieval over the KB articles (never an error).",
        support.SUPPORT,
    ),
    ApiRoute(
        "/v1/knowledge/detail/{type}/{id:path}",
        detail.detail,
        "GET",
        READ,
        "The full record behind a result.",
    ),
    ApiRoute(
        "/v1/knowledge/documents",
        documents.create,
        "POST",
        WRITE,
        "Index one document, or up to 100.",
        documents.DOCUMENTS,
    ),
    ApiRoute(
        "/v1/knowledge/documents/{id}",
        documents.get,
        "GET",
        READ,
        "A stored document with its chunks.",
    ),
    ApiRoute(
        "/v1/knowledge/documents/{id}",
        documents.delete,
        "DELETE",
        WRITE,
        "Delete a document and its chunks.",
    ),
]
