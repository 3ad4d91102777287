"""A write empties only its own collection's cached answers, and never leaves one of
its own stale: in one process's memory (the hit path in front of the app included, on
every embedded backend), in Redis shared by replicas, and when another process writes
the SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cache.redis import SharedTier
from knowledge_api.compose import build_service
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService
from tests.conftest import ask, make_settings, query_params, replicas_sharing
from tests.redis_server import RedisServer

QUERY = "/v1/knowledge/query"
ASKED = "zebra crossing sensor"
ZEBRA = "The zebra crossing sensor reports pedestrians to the traffic lights."


def documents(collection: str) -> list[Document]:
    return [
        Document("wiki", "roadmap", "The quarterly roadmap names the next release.", "Roadmap",
                 collection=collection),
        Document("jira", "SIAM-9", "Crossing the street sensor lights stay red.", "Lights",
                 collection=collection),
    ]  # fmt: skip


def payload(collection: str) -> dict[str, Any]:
    return {"query": ASKED, "collection": collection, "synthesize": False, "threshold": 0}


def sources(body: dict[str, Any]) -> list[str]:
    return [result["source_id"] for result in body["results"]]


def post(client: TestClient, collection: str) -> dict[str, Any]:
    response = client.post(QUERY, json=payload(collection))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def embedded(backend: str, tmp_path: Path) -> dict[str, object]:
    """The settings of a store that runs in the process, its files under `tmp_path`."""
    paths = {
        "chroma": {"chroma_path": tmp_path / "chroma"},
        "qdrant": {"qdrant_path": str(tmp_path / "qdrant")},
    }
    return {"store": backend, **paths.get(backend, {})}


@pytest.mark.parametrize("backend", ["sqlite", "chroma", "qdrant"])
def test_a_write_empties_only_its_own_collections_answers(tmp_path: Path, backend: str) -> None:
    app = create_app(make_settings(tmp_path, **embedded(backend, tmp_path)))
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, documents("a") + documents("b"))
        for collection in "ab":
            assert post(client, collection)["metrics"]["cache_hit"] is False
            assert post(client, collection)["metrics"]["cache_hit"] is True  # the hit path
        written = {"source_type": "wiki", "source_id": "zebra-1", "content": ZEBRA}
        response = client.post("/v1/knowledge/documents", json={**written, "collection": "a"})
        assert response.status_code == 201, response.text
        b = post(client, "b")
        assert b["metrics"]["cache_hit"] is True and "zebra-1" not in sources(b)
        a = post(client, "a")
        assert a["metrics"]["cache_hit"] is False and sources(a)[0] == "zebra-1"
        assert post(client, "a")["metrics"]["cache_hit"] is True
        deleted = client.delete(f"/v1/knowledge/documents/{response.json()['ids'][0]}")
        assert deleted.status_code == 200, deleted.text
        assert post(client, "b")["metrics"]["cache_hit"] is True
        a = post(client, "a")
        assert a["metrics"]["cache_hit"] is False and "zebra-1" not in sources(a)


async def hit(service: KnowledgeService, collection: str) -> bool:
    body = await ask(service, query_params(payload(collection)))
    return bool(body["metrics"]["cache_hit"])


async def test_replicas_sharing_redis_keep_the_collections_a_write_left_alone(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    async with replicas_sharing(tmp_path, redis_server, "collections:") as (first, second):
        await first.ingest(documents("a") + documents("b"))
        assert not await hit(first, "a") and not await hit(first, "b")
        await second.ingest([Document("wiki", "zebra-1", ZEBRA, collection="a")])
        tier = second.caches.responses
        assert isinstance(tier, SharedTier)
        assert await hit(second, "b") and tier.shared_hits == 1  # b's answer, from Redis
        assert await hit(first, "b")  # from its own memory
        fresh = await ask(second, query_params(payload("a")))
        assert fresh["metrics"]["cache_hit"] is False and sources(fresh)[0] == "zebra-1"
        shared = await ask(first, query_params(payload("a")))  # what second just kept
        assert shared["metrics"]["cache_hit"] is True and sources(shared)[0] == "zebra-1"


async def test_a_cli_ingest_beside_the_service_empties_only_its_collection(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    service = build_service(settings)
    await service.start()
    try:
        await service.ingest(documents("a") + documents("b"))
        for collection in "ab":
            assert not await hit(service, collection) and await hit(service, collection)
        folder = tmp_path / "pages"
        folder.mkdir()
        (folder / "zebra.md").write_text(f"# Zebra crossing\n\n{ZEBRA}\n", encoding="utf-8")
        env = {
            **os.environ,
            "KNOWLEDGE_DB_PATH": str(settings.db_path),
            "KNOWLEDGE_EMBEDDER": "fake",
            "KNOWLEDGE_SEED_ON_EMPTY": "false",
        }
        command = [sys.executable, "-m", "knowledge_api", "ingest", str(folder)]
        done = subprocess.run(
            [*command, "--collection", "a"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert await hit(service, "b")
        fresh = await ask(service, query_params(payload("a")))
        assert fresh["metrics"]["cache_hit"] is False
        assert any("zebra" in source for source in sources(fresh)[:1]), sources(fresh)
    finally:
        await service.stop()
