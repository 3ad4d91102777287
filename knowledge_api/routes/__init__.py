"""The route table: thin handlers, one module per resource.

Each route carries its contract beside its handler: the scope a caller needs, the
declared request body, parameters and response, the errors it answers with and whether
it answers as Server-Sent Events. Access control and the OpenAPI document
(`routes/openapi.py`) both read it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.routing import Route

from knowledge_api.routes import (
    answer,
    audit,
    catalog,
    chat,
    detail,
    documents,
    feedback,
    files,
    health,
    keys,
    models,
    openapi,
    permissions,
    playground,
    query,
    retrieve,
    sources,
    support,
)
from knowledge_api.routes.openapi import Contract
from knowledge_api.web import metrics
from knowledge_api.web.access import ADMIN, PUBLIC, READ, WRITE, guarded
from knowledge_api.web.fields import Body, Field, Schema


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
ROUTES = [
    page_route(
        "/",
        playground.page,
        "The playground: a page to ask a question, read the ranked results and the answer "
        "as it streams (its API calls carry the key typed into it).",
    ),
    asset_route("/playground/{asset}", playground.asset, "the playground", playground.ASSET),
    ApiRoute(
        "/health",
        health.health,
        "GET",
        PUBLIC,
        "Service status and its parts (503 when the store does not answer).",
        response=health.RESPONSE,
        statuses=(200, 503),
        errors=(),
    ),
    ApiRoute(
        "/openapi.json",
        openapi.openapi,
        "GET",
        PUBLIC,
        "This document: the OpenAPI 3.1 description of every route.",
        response=openapi.RESPONSE,
        errors=(),
    ),
    page_route(
        "/docs",
        openapi.docs,
        "An interactive page for this document (served with its assets, offline).",
    ),
    asset_route("/docs/{asset}", openapi.docs_asset, "the /docs page", openapi.ASSET),
    ApiRoute(
        "/livez",
        health.livez,
        "GET",
        PUBLIC,
        "The process is up (always 200).",
        response=health.ALIVE,
        errors=(),
    ),
    ApiRoute(
        "/readyz",
        health.readyz,
        "GET",
        PUBLIC,
        "200 when the store answers and the embedder is loaded; 503 naming what is not.",
        response=health.READY,
        errors=(503,),
    ),
    ApiRoute(
        metrics.METRICS_PATH,
        metrics.metrics,
        "GET",
        ADMIN,
        "Prometheus metrics (also open to KNOWLEDGE_METRICS_TOKEN as a bearer token).",
        media_type="text/plain",
        errors=(401,),
    ),
    search_route("/v1/knowledge/query", **query.ROUTE),
    search_route("/v1/knowledge/answer", **answer.ROUTE),
    chat_route(
        "/v1/chat",
        chat.chat,
        "The AI SDK's UI message stream (useChat): the grounded answer to the latest user "
        "message, its sources as source parts.",
        chat.UI_CHAT,
        media_type="text/event-stream",
        events=chat.UI_EVENTS,
    ),
    chat_route(
        "/v1/chat/completions",
        chat.completions,
        "OpenAI chat completions (model: a collection, or knowledge): the grounded answer, "
        "url_citation annotations and numbered sources; stream: true for chunks.",
        chat.COMPLETION_REQUEST,
        response=chat.COMPLETION,
        events=chat.COMPLETION_EVENTS,
    ),
    ApiRoute(
        "/v1/models",
        models.models,
        "GET",
        READ,
        "OpenAI's model list: the collections the key may read, as chat models (knowledge "
        "for the default one), for chat clients' model pickers.",
        response=models.MODELS,
        errors=(503,),
    ),
    ApiRoute(
        "/v1/models/{id}",
        models.model,
        "GET",
        READ,
        "One model of GET /v1/models: 403 for a collection the key may not read, 404 for "
        "one that does not exist.",
        response=models.MODEL,
        parameters=(models.ID,),
        errors=(403, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/retrieve",
        retrieve.retrieve,
        "POST",
        READ,
        "Chunks of one collection with source metadata and the query embedding.",
        retrieve.RETRIEVE,
        response=retrieve.RETRIEVED,
        errors=COLLECTION_ERRORS,
    ),
    ApiRoute(
        "/v1/knowledge/validate",
        retrieve.validate,
        "POST",
        ADMIN,
        "Validation runs of test queries: relevance, metadata, consistency, accuracy.",
        retrieve.VALIDATE,
        response=retrieve.VALIDATED,
        errors=COLLECTION_ERRORS,
    ),
    ApiRoute(
        "/v1/knowledge/support",
        support.support,
        "POST",
        READ,
        "Support retrieval over the KB articles (never an error).",
        support.SUPPORT,
        response=support.RESPONSE,
        errors=(),
    ),
    ApiRoute(
        "/v1/knowledge/detail/{type}/{id:path}",
        detail.detail,
        "GET",
        READ,
        "The full record behind a result.",
        response=detail.RESPONSE,
        parameters=detail.PARAMETERS,
        errors=(400, 404, 409, 503),
    ),
    ApiRoute(
        "/v1/knowledge/documents",
        documents.create,
        "POST",
        WRITE,
        "Index one document, or up to 100.",
        documents.DOCUMENTS,
        response=documents.CREATED,
        statuses=(201,),
    ),
    ApiRoute(
        "/v1/knowledge/documents",
        catalog.documents,
        "GET",
        READ,
        "A page of a collection's documents (without their text), in a stable order; "
        "`next_cursor` asks for the next page.",
        response=catalog.DOCUMENTS,
        parameters=catalog.LISTING.fields,
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/collections",
        catalog.collections,
        "GET",
        READ,
        "Every collection the key may read: documents, chunks, sources, last update.",
        response=catalog.COLLECTIONS,
    ),
    ApiRoute(
        "/v1/knowledge/sources",
        catalog.sources,
        "GET",
        READ,
        "The sources (ingested paths, KB hosts, uploads, connectors): documents and last "
        "run of each, and a connector's kind, cursor, next run and last error.",
        response=catalog.SOURCES,
        parameters=(catalog.SOURCE_COLLECTION,),
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/sources",
        sources.add,
        "POST",
        ADMIN,
        "Register a connector source (a mailbox, a Prometheus server); no sync yet.",
        sources.ADD,
        response=catalog.SOURCE_VIEW,
        statuses=(201,),
        errors=(400, 403, 409, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/sources/{name:path}/sync",
        sources.sync,
        "POST",
        WRITE,
        "Sync a connector source as a job: 202 with its id (GET /v1/knowledge/jobs/{id}).",
        sources.SYNC,
        response=sources.ACCEPTED,
        parameters=(catalog.NAME,),
        statuses=(202,),
        errors=(400, 403, 404, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/sources/{name:path}",
        catalog.delete_source,
        "DELETE",
        WRITE,
        "Delete every document of a source, and the source: how many documents went.",
        response=catalog.DELETED,
        parameters=(catalog.NAME, catalog.COLLECTION),
        errors=(400, 404, 409, 503),
    ),
    ApiRoute(
        "/v1/knowledge/sources/{name:path}",
        permissions.source_acl,
        "PATCH",
        WRITE,
        "Set the access list of every document of a source, and the source's own for its "
        "next runs; nothing is embedded again.",
        documents.ACL_CHANGE,
        response=documents.ACL_CHANGED,
        parameters=(catalog.NAME, permissions.COLLECTION),
        errors=(400, 403, 404, 409, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/documents/{id}",
        documents.get,
        "GET",
        READ,
        "A stored document with its chunks.",
        response=documents.STORED,
        parameters=documents.PARAMETERS,
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/documents/{id}",
        documents.delete,
        "DELETE",
        WRITE,
        "Delete a document and its chunks.",
        response=documents.DELETED,
    ),
    ApiRoute(
        "/v1/knowledge/documents/{id}",
        documents.change_acl,
        "PATCH",
        WRITE,
        "Set a document's access list (who may read it); nothing is embedded again.",
        documents.ACL_CHANGE,
        response=documents.ACL_CHANGED,
        errors=(400, 403, 404, 409, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/principals/{id}",
        permissions.principal,
        "GET",
        ADMIN,
        "The groups the service knows for a user id (404 when it knows none).",
        parameters=(permissions.USER,),
        response=permissions.PRINCIPAL,
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/principals/{id}",
        permissions.set_principal,
        "PUT",
        ADMIN,
        "Replace the groups of a user id: in force at once, within 5 s on every replica.",
        permissions.GROUPS,
        parameters=(permissions.USER,),
        response=permissions.PRINCIPAL,
        errors=(400, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/keys",
        keys.create,
        "POST",
        ADMIN,
        "Create an API key: its token is in this answer, and never again.",
        keys.CREATE,
        response=keys.CREATED,
        statuses=(201,),
        errors=(400, 403, 409, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/keys",
        keys.listed,
        "GET",
        ADMIN,
        "Every API key: name, scopes, collections, user, groups, created; never a token.",
        response=keys.LISTED,
        errors=(503,),
    ),
    ApiRoute(
        "/v1/knowledge/keys/{name}",
        keys.get,
        "GET",
        ADMIN,
        "One API key (never its token).",
        response=keys.KEY,
        parameters=(keys.NAME,),
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/keys/{name}",
        keys.revoke,
        "DELETE",
        ADMIN,
        "Revoke an API key: refused at once here, within 5 s on every replica.",
        response=keys.REVOKED,
        parameters=(keys.NAME,),
        errors=(400, 404, 503),
    ),
    ApiRoute(
        "/v1/knowledge/feedback",
        feedback.rate,
        "POST",
        READ,
        "Rate an answer or query this service returned, by its query_id.",
        feedback.FEEDBACK,
        response=feedback.CREATED,
        statuses=(201,),
        errors=(400, 403, 404, 413, 415, 503),
    ),
    admin_page(
        "/v1/knowledge/feedback",
        feedback.ratings,
        "Readers' ratings, newest first, each with its query.",
        feedback.PAGE,
        feedback.PARAMETERS,
    ),
    admin_page(
        "/v1/knowledge/audit",
        audit.audit,
        "The audit trail of writes, newest first, by key, collection and time.",
        audit.RESPONSE,
        audit.PARAMETERS,
    ),
    ApiRoute(
        "/v1/knowledge/files",
        files.upload,
        "POST",
        WRITE,
        "Upload files (multipart/form-data) to be indexed by a job; 202 with its id.",
        files.FILES,
        response=files.ACCEPTED,
        statuses=(202,),
        errors=(400, 403, 408, 409, 413, 415, 503),
    ),
    ApiRoute(
        "/v1/knowledge/jobs/{id}",
        files.job,
        "GET",
        READ,
        "An upload job: its status, files and passages done and to do, each file's error.",
        response=files.JOB,
    ),
]
