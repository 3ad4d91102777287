"""GET /v1/models and GET /v1/models/{id}: the collections as OpenAI's models, asked
on a real port by the OpenAI SDK and as Open WebUI's connection check asks, with keys
required: each key sees the collections it may read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.conftest import make_settings
from tests.loopback import serving_app
from tests.test_access import bearer, make_key


@dataclass
class Served:
    url: str
    admin: str
    osprey: str
    """A key that may read the osprey collection only."""
    writer: str
    """A key without the read scope."""


def document(collection: str, n: int) -> Document:
    text = f"{collection.title()} rollback step {n}: drain the wave, then revert its release."
    return Document("knowledge", f"{collection}-{n}", text, f"{collection} {n}", {}, collection)


async def filled(settings: Settings) -> None:
    """The default collection, osprey and kestrel hold documents; a collection named
    knowledge too (it cannot be a model: that name is the default's)."""
    service = build_service(settings)
    await service.start()
    try:
        for collection in ("default", "osprey", "kestrel", "knowledge"):
            await service.ingest([document(collection, n) for n in range(2)])
    finally:
        await service.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("models")
    settings = make_settings(folder, auth="keys", answer_threshold="0.0")
    asyncio.run(filled(settings))
    admin = asyncio.run(make_key(settings, "admin", ["admin"]))
    osprey = asyncio.run(make_key(settings, "osprey", ["read"], ("osprey",)))
    writer = asyncio.run(make_key(settings, "writer", ["write"]))
    with serving_app(create_app(settings)) as url:
        yield Served(f"{url}/v1", admin, osprey, writer)


def sdk(served: Served, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key=key, max_retries=0)


def test_the_sdk_lists_the_collections_as_models(served: Served) -> None:
    listed = sdk(served, served.admin).models.list()
    assert [model.id for model in listed] == ["knowledge", "kestrel", "osprey"]
    for model in listed:
        assert model.object == "model" and model.owned_by == "knowledge-api"
        assert abs(model.created - time.time()) < 600  # the collection's last write
    assert [model.id for model in sdk(served, served.osprey).models.list()] == ["osprey"]


def test_the_sdk_retrieves_one_model_and_is_refused_the_others(served: Served) -> None:
    admin = sdk(served, served.admin)
    assert admin.models.retrieve("osprey").id == "osprey"
    assert admin.models.retrieve("knowledge").id == "knowledge"
    limited = sdk(served, served.osprey)
    assert limited.models.retrieve("osprey").object == "model"
    with pytest.raises(openai.PermissionDeniedError, match="collection 'kestrel'"):
        limited.models.retrieve("kestrel")
    with pytest.raises(openai.PermissionDeniedError):
        limited.models.retrieve("knowledge")  # the default collection is not osprey
    with pytest.raises(openai.NotFoundError, match="no model 'heron'") as missing:
        admin.models.retrieve("heron")
    assert missing.value.body["details"]["available"] == ["knowledge", "kestrel", "osprey"]
    with pytest.raises(openai.NotFoundError):
        admin.models.retrieve("not a collection")


def test_a_listed_model_is_one_the_key_may_chat_with(served: Served) -> None:
    client = sdk(served, served.osprey)
    [model] = client.models.list()
    question = [{"role": "user", "content": "How is an Osprey wave rolled back?"}]
    reply = client.chat.completions.create(model=model.id, messages=question)  # type: ignore[arg-type]
    assert reply.model == "osprey" and reply.choices[0].message.content
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="knowledge", messages=question)  # type: ignore[arg-type]


def test_open_webui_connection_check(served: Served) -> None:
    """What Open WebUI sends when a connection is added or verified: GET {base}/models
    with the key as a bearer token, a JSON content type and, when it forwards who asks,
    the user's headers; it reads `data[].id`."""
    headers = {
        "Authorization": f"Bearer {served.osprey}",
        "Content-Type": "application/json",
        "X-OpenWebUI-User-Name": "Ada Lovelace",
        "X-OpenWebUI-User-Id": "7f3c",
        "X-OpenWebUI-User-Email": "ada@example.com",
        "X-OpenWebUI-User-Role": "user",
    }
    response = httpx.get(f"{served.url}/models", headers=headers)
    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [
            {
                "id": "osprey",
                "object": "model",
                "created": response.json()["data"][0]["created"],
                "owned_by": "knowledge-api",
            }
        ],
    }
    unknown = httpx.get(f"{served.url}/models", headers={**headers, "Authorization": "Bearer x"})
    assert unknown.status_code == 401 and "error" in unknown.json()


def test_a_key_without_the_read_scope_is_refused(served: Served) -> None:
    with pytest.raises(openai.PermissionDeniedError):
        sdk(served, served.writer).models.list()
    response = httpx.get(f"{served.url}/models/osprey", headers=bearer(served.writer))
    assert response.status_code == 403


def test_an_empty_knowledge_base_still_lists_the_default_model(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        listed = client.get("/v1/models").json()
        assert listed["data"] == [
            {"id": "knowledge", "object": "model", "created": 0, "owned_by": "knowledge-api"}
        ]
        assert client.get("/v1/models/default").json()["id"] == "default"
        assert client.get("/v1/models/osprey").status_code == 404
