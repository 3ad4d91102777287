"""Schema-driven fuzzing: requests generated from GET /openapi.json, valid and invalid,
sent to every route of the app in-process (a fake embedder, a SQLite file of the test's
own). No route may answer 5xx, and every response must match what the document
declares for its status: the status itself, the content type and the body's schema."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    ignored_auth,
    negative_data_rejection,
    positive_data_acceptance,
)
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.models import SearchHit
from knowledge_api.rerankers import rerankers
from knowledge_api.rerankers.base import OrderingReranker
from knowledge_api.routes import ROUTES
from knowledge_api.routes.openapi import document
from knowledge_api.settings import Settings
from tests.conftest import corpus, make_settings

SEMANTIC = {
    "/v1/knowledge/retrieve",
    "/v1/knowledge/validate",
    "/v1/knowledge/documents",
    "/v1/knowledge/audit",
    "/v1/knowledge/feedback",
    "/v1/knowledge/sources",
    "/v1/knowledge/files",
    "/v1/knowledge/keys",
}
"""Routes with rules beyond JSON Schema, where a schema-valid request may still be a 400:
query_embedding_model must be the store's own model, an expected_sources query must be
one of test_queries, a page's cursor must be one the service gave for that listing (it
is opaque), a source's URL must be one its kind reads (imap:// for a mailbox, http://
for a Prometheus server), an item's `updated_at` may not come before its `created_at`
(a document's, an upload's), a new key's name must be one no key has (409). Every other
route accepts what its document declares valid."""
OVERLAPPING = "/v1/knowledge/sources/{name}/sync"
"""A source's name may hold a slash, so `.../sources/x/sync` is also the source named
`x/sync`, which DELETE takes: the Allow header of this path lists both routes' methods."""
NOT_YET = [ignored_auth]
"""Access control is not enforced yet: a made-up key is still let in."""
NEVER_AN_ERROR = "/v1/knowledge/support"
"""Answers even a malformed body 200, with the reason in `gaps` (its contract)."""
EXAMPLES = 12
"""Per route and mode: enough to reach each field's edges, small enough for `make test`."""


class FusedOrder(OrderingReranker):
    """A reranker that keeps the fused order: with one configured, every request the
    document declares valid is one the service takes (`ranking.rerank: true` is a 400
    only where no reranker is configured)."""

    name = "fused-order"

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        return list(range(len(hits)))


rerankers.register(FusedOrder.name, FusedOrder)


async def index_corpus(app_settings: Settings) -> None:
    """The corpus goes into the app's SQLite file before the app starts on it."""
    service = build_service(app_settings)
    await service.start()
    try:
        await service.ingest(corpus())
    finally:
        await service.stop()


schema = schemathesis.openapi.from_dict(document(ROUTES))
"""The document GET /openapi.json serves (tests/test_openapi.py checks they are one)."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app, started once, with the corpus indexed; cases are sent through Starlette's
    test client (schemathesis' own ASGI client would run the app's lifespan again)."""
    app_settings = make_settings(Path(tmp_path_factory.mktemp("fuzz")), reranker=FusedOrder.name)
    asyncio.run(index_corpus(app_settings))
    with TestClient(create_app(app_settings)) as test_client:
        yield test_client


def for_httpx(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A case's request in the test client's terms: a raw body is `content` in httpx,
    and the API reads no cookies."""
    kwargs = {name: value for name, value in kwargs.items() if name != "cookies"}
    if isinstance(kwargs.get("data"), bytes | str):
        kwargs["content"] = kwargs.pop("data")
    if kwargs.get("files"):
        kwargs["files"] = [(name, as_part(value)) for name, value in kwargs["files"]]
    return kwargs


def as_part(value: Any) -> Any:
    """A form part as httpx sends it: a negative case's file may be a number or a list,
    which a multipart body carries as its text."""
    if isinstance(value, tuple) and not isinstance(value[1], bytes | str):
        return (value[0], str(value[1]).encode(), *value[2:])
    return value


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_route_answers_as_its_document_declares(
    case: schemathesis.Case, client: TestClient
) -> None:
    response = client.request(**for_httpx(case.as_transport_kwargs(str(client.base_url))))
    assert response.status_code < 500, response.text
    response.request.read()  # a multipart body the app refused unread (405) is read here
    excluded = list(NOT_YET)
    if case.path in SEMANTIC:
        excluded.append(positive_data_acceptance)
    if case.path == NEVER_AN_ERROR:
        excluded.append(negative_data_rejection)
    if case.path == OVERLAPPING:
        excluded.append(allow_header_conformance)
    case.validate_response(response, excluded_checks=excluded)
