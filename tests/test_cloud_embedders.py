"""The gemini and cohere embedders through their real SDKs, answered by respx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import respx

from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.embeddings import embedders
from knowledge_api.embeddings.cloud import CloudEmbedder
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import EmbedderMismatchError, EmbeddingError
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from tests.conftest import ask, corpus, make_settings, query_params
from tests.providers import COHERE_KEY, COHERE_URL, GEMINI_KEY, GEMINI_URL

GEMINI_EMBED = f"{GEMINI_URL}/v1/models/gemini-embedding-001:batchEmbedContents"
COHERE_EMBED = f"{COHERE_URL}/v2/embed"


def vectors(texts: list[str], dimension: int) -> list[list[float]]:
    """Vectors that mean something (shared words, similar vectors), not unit length."""
    return [(3.0 * row).tolist() for row in FakeEmbedder(dimension).embed_batch(texts)]


def gemini_embeddings(request: httpx.Request) -> httpx.Response:
    texts = [r["content"]["parts"][0]["text"] for r in json.loads(request.content)["requests"]]
    return httpx.Response(200, json={"embeddings": [{"values": v} for v in vectors(texts, 768)]})


def cohere_embeddings(request: httpx.Request) -> httpx.Response:
    texts = json.loads(request.content)["texts"]
    body = {
        "id": "emb-1",
        "embeddings": {"float": vectors(texts, 1024)},
        "texts": texts,
        "response_type": "embeddings_by_type",
    }
    return httpx.Response(200, json=body)


PROVIDERS: dict[str, dict[str, Any]] = {
    "gemini": {
        "settings": {"gemini_api_key": Secret(GEMINI_KEY), "gemini_base_url": GEMINI_URL},
        "url": GEMINI_EMBED,
        "answer": gemini_embeddings,
        "dimension": 768,
        "batch": 100,
    },
    "cohere": {
        "settings": {"cohere_api_key": Secret(COHERE_KEY), "cohere_base_url": COHERE_URL},
        "url": COHERE_EMBED,
        "answer": cohere_embeddings,
        "dimension": 1024,
        "batch": 96,
    },
}


def settings_for(name: str, tmp_path: Path, **changes: Any) -> Settings:
    return make_settings(tmp_path, embedder=name, **{**PROVIDERS[name]["settings"], **changes})


def sent(route: respx.Route) -> list[dict[str, Any]]:
    return [json.loads(call.request.content) for call in route.calls]


def kinds(name: str, bodies: list[dict[str, Any]]) -> list[str]:
    if name == "gemini":
        return [body["requests"][0]["taskType"] for body in bodies]
    return [body["input_type"] for body in bodies]


def sizes(name: str, bodies: list[dict[str, Any]]) -> list[int]:
    return [len(body["requests"] if name == "gemini" else body["texts"]) for body in bodies]


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_documents_in_batches_and_queries_with_their_own_task_type(
    provider: str, tmp_path: Path, mock: respx.MockRouter
) -> None:
    spec = PROVIDERS[provider]
    route = mock.post(spec["url"]).mock(side_effect=spec["answer"])
    embedder = embedders.create(provider, settings_for(provider, tmp_path))
    embedder.load()
    texts = [f"passage number {n} about audio" for n in range(spec["batch"] * 2 + 5)]
    matrix = embedder.embed_documents(texts)
    assert matrix.shape == (len(texts), spec["dimension"]) and matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert sizes(provider, sent(route)) == [spec["batch"], spec["batch"], 5]
    query = embedder.embed_query("audio passage")
    assert query.shape == (spec["dimension"],)
    expected = {"gemini": ["RETRIEVAL_DOCUMENT"] * 3 + ["RETRIEVAL_QUERY"]}
    expected["cohere"] = ["search_document"] * 3 + ["search_query"]
    assert kinds(provider, sent(route)) == expected[provider]
    assert embedder.name == {"gemini": "gemini:gemini-embedding-001"}.get(
        provider, "cohere:embed-english-v3.0"
    )


def test_the_request_carries_the_model_key_and_dimension(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    gemini = mock.post(GEMINI_EMBED).mock(side_effect=gemini_embeddings)
    cohere = mock.post(COHERE_EMBED).mock(side_effect=cohere_embeddings)
    for name in PROVIDERS:
        embedder = embedders.create(name, settings_for(name, tmp_path))
        embedder.load()
        embedder.embed_query("hello")
    first = sent(gemini)[0]["requests"][0]
    assert first["model"] == "models/gemini-embedding-001" and first["outputDimensionality"] == 768
    assert gemini.calls.last.request.headers["x-goog-api-key"] == GEMINI_KEY
    assert sent(cohere)[0]["model"] == "embed-english-v3.0"
    assert sent(cohere)[0]["embedding_types"] == ["float"]
    assert cohere.calls.last.request.headers["authorization"] == f"Bearer {COHERE_KEY}"


def malformed(name: str, kind: str) -> httpx.Response:
    if kind == "not json":
        return httpx.Response(200, content=b"<html>gateway</html>")
    if name == "gemini":
        return httpx.Response(200, json={"embeddings": [{"values": [0.1, 0.2]}]})
    return httpx.Response(
        200,
        json={
            "id": "x",
            "embeddings": {"float": [[0.1, 0.2]]},
            "response_type": "embeddings_by_type",
        },
    )


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ("429", "HTTP 429"),
        ("500", "HTTP 500"),
        ("503", "HTTP 503"),
        ("timeout", "ReadTimeout"),
        ("wrong dimension", "malformed response"),
        ("not json", "malformed response"),
    ],
)
def test_failures_are_embedding_errors_and_show_in_health(
    provider: str, tmp_path: Path, mock: respx.MockRouter, failure: str, reason: str
) -> None:
    answers: dict[str, Any] = {
        "429": httpx.Response(429, json={"error": {"code": 429, "message": "quota"}}),
        "500": httpx.Response(500, json={"error": {"code": 500, "message": "internal"}}),
        "503": httpx.Response(503, json={"message": "unavailable"}),
        "timeout": httpx.ReadTimeout("read timed out"),
        "wrong dimension": malformed(provider, "wrong dimension"),
        "not json": malformed(provider, "not json"),
    }
    spec = PROVIDERS[provider]
    mock.post(spec["url"]).mock(side_effect=[answers[failure], spec["answer"]])
    embedder = embedders.create(provider, settings_for(provider, tmp_path))
    embedder.load()
    with pytest.raises(EmbeddingError, match=reason) as raised:
        embedder.embed_query("hello")
    assert raised.value.status == 503
    health = embedder.health()
    assert health["status"] == "failing" and reason in health["error"]
    assert embedder.embed_query("hello").shape == (spec["dimension"],)
    assert embedder.health()["status"] == "ok"


def test_a_missing_key_is_reported_not_raised_at_start(provider: str, tmp_path: Path) -> None:
    key = {"gemini": "gemini_api_key", "cohere": "cohere_api_key"}[provider]
    embedder = embedders.create(provider, settings_for(provider, tmp_path, **{key: Secret("")}))
    with pytest.raises(EmbeddingError, match="has no key"):
        embedder.load()
    assert embedder.health()["status"] == "missing_key"


@pytest.fixture
async def served(
    provider: str, tmp_path: Path, mock: respx.MockRouter
) -> AsyncIterator[tuple[KnowledgeService, respx.Route]]:
    """The service on the provider's embedder, started, and the route its calls take."""
    spec = PROVIDERS[provider]
    route = mock.post(spec["url"]).mock(side_effect=spec["answer"])
    service = build_service(settings_for(provider, tmp_path))
    await service.start()
    yield service, route
    await service.stop()


async def test_the_service_ingests_searches_and_caches_with_a_cloud_embedder(
    served: tuple[KnowledgeService, respx.Route],
) -> None:
    service, route = served
    summary = await service.ingest(corpus())
    assert summary.embedded == summary.chunks == 7
    ingest_calls = route.call_count
    body = await ask(
        service,
        query_params({"query": "Which audio formats does ingestion accept?", "synthesize": False}),
    )
    assert body["results"][0]["source_id"] == "kb-7" and "warnings" not in body
    assert route.call_count == ingest_calls + 1
    again = await ask(
        service,
        query_params(
            {
                "query": "which AUDIO formats does ingestion accept?",
                "limit": 3,
                "synthesize": False,
            }
        ),
    )
    assert again["metrics"]["cache_hit"] is False  # another limit: tier 1 misses ...
    assert route.call_count == ingest_calls + 1  # ... tier 2 has the query's vector
    health = await service.health()
    assert health["embedder"]["status"] == "ok" and health["status"] == "healthy"


async def test_a_failing_embedder_degrades_queries_to_keywords(
    served: tuple[KnowledgeService, respx.Route],
) -> None:
    service, route = served
    await service.ingest(corpus())
    route.mock(return_value=httpx.Response(503, json={"message": "unavailable"}))
    request = {"query": "audio formats ingestion", "synthesize": False}
    body = await ask(service, query_params(request))
    assert body["results"][0]["source_id"] == "kb-7"
    [warning] = body["warnings"]
    assert "embedding failed" in warning and "keyword relevance only" in warning
    health = await service.health()
    assert health["status"] == "degraded" and health["embedder"]["status"] == "failing"


async def test_switching_embedder_on_a_built_store_is_refused(
    provider: str, tmp_path: Path, mock: respx.MockRouter
) -> None:
    built = build_service(make_settings(tmp_path))
    await built.start()
    await built.ingest([Document("wiki", "a", "some text")])
    await built.stop()
    mock.post(PROVIDERS[provider]["url"]).mock(side_effect=PROVIDERS[provider]["answer"])
    switched = build_service(settings_for(provider, tmp_path))
    with pytest.raises(EmbedderMismatchError, match=r"fake:hash-64.*" + provider):
        await switched.start()
    await switched.stop()


def test_names_keep_vector_spaces_apart(tmp_path: Path) -> None:
    names = set()
    for provider in PROVIDERS:
        embedder = embedders.create(provider, settings_for(provider, tmp_path))
        assert isinstance(embedder, CloudEmbedder)
        names.add((embedder.name, embedder.dimension))
    other = settings_for("gemini", tmp_path, gemini_embedding_model="text-embedding-004")
    names.add((embedders.create("gemini", other).name, 768))
    assert len(names) == 3
