"""What the Qdrant store does beyond the conformance suite: Qdrant's fusion against the
shared one, server mode through the real client (its HTTP answered by respx), local
persistence, payload filters, the service on it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import respx

from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError, ConfigurationError
from knowledge_api.models import Document, SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.fusion import DEFAULT_TUNING
from knowledge_api.stores.points.qdrant import QdrantStore
from knowledge_api.stores.points.qdrant_search import document_frequency, idf
from tests.conftest import corpus, pairs
from tests.test_store_conformance import EMBEDDER, KNOWN_ANSWERS, index, vector

URL = "https://qdrant.test:6333"
API_KEY = "qdrant-key-123"


@pytest.fixture
async def local() -> AsyncIterator[QdrantStore]:
    store = QdrantStore(":memory:")
    await store.open()
    yield store
    await store.close()


RRF = replace(DEFAULT_TUNING, fusion="rrf")
"""Qdrant's own fusion query fuses by rank: only rrf fusion can run there."""


async def test_qdrant_fusion_ranks_like_the_shared_fusion() -> None:
    stores = [
        QdrantStore(":memory:", fusion="auto", tuning=RRF),
        QdrantStore(":memory:", fusion="shared", tuning=RRF),
    ]
    for store in stores:
        await store.open()
        await index(store, corpus())
    assert [s.server_fusion for s in stores] == [True, False]
    queries = [*KNOWN_ANSWERS, "search", "test case Jira ticket", "release testing"]
    try:
        for query in queries:
            qdrant, shared = [
                await s.search(SearchRequest(query, vector(query), 10, SearchFilters()))
                for s in stores
            ]
            assert ranked(qdrant) == ranked(shared), query
            assert [h.similarity for h in qdrant] == pytest.approx([h.similarity for h in shared])
    finally:
        for store in stores:
            await store.close()


def ranked(hits: list[Any]) -> list[tuple[float, str]]:
    """(score, chunk id) best first; chunks of equal score may come in either order."""
    return sorted((-round(h.score, 9), h.chunk.id) for h in hits)


async def test_convex_fusion_is_the_shared_one(local: QdrantStore) -> None:
    assert local.fusion == "auto" and local.tuning.fusion == "convex"
    assert not local.server_fusion
    assert (await local.health_check())["fusion"] == "shared"


async def test_documents_and_the_embedder_outlive_the_process(tmp_path: Path) -> None:
    first = QdrantStore(str(tmp_path / "qdrant"))
    await first.open()
    await index(first, corpus())
    await first.close()
    again = QdrantStore(str(tmp_path / "qdrant"))
    await again.open()
    try:
        assert await again.count() == 6
        hits = await again.search(SearchRequest("FLAC", None, 5, SearchFilters()))
        assert [h.source_id for h in hits] == ["kb-7"]
        with pytest.raises(ConfigurationError, match="Mixing vector spaces"):
            await again.check_embedder("local:all-MiniLM-L6-v2", 384)
    finally:
        await again.close()


async def test_a_folder_in_use_is_a_visible_store_error(tmp_path: Path) -> None:
    first = QdrantStore(str(tmp_path / "qdrant"))
    await first.open()
    second = QdrantStore(str(tmp_path / "qdrant"))
    try:
        with pytest.raises(BackendConnectionError, match="in use by another process"):
            await second.open()
        assert (await second.health_check())["status"] == "unavailable"
    finally:
        await first.close()


async def test_payload_filters_match_every_scalar_type(local: QdrantStore) -> None:
    docs = [
        Document(
            "wiki",
            f"p{i}",
            f"Release note {i}.",
            f"R{i}",
            {"n": i, "ratio": i / 2, "ok": i % 2 == 0, "team.name": f"t{i % 2}"},
        )
        for i in range(4)
    ]
    await index(local, docs)
    cases = [
        ((("n", 2),), ["p2"]),
        ((("ratio", 1.5),), ["p3"]),
        ((("ok", True),), ["p0", "p2"]),
        ((("team.name", "t1"),), ["p1", "p3"]),
        ((("n", 3), ("ok", True)), []),
    ]
    for mode in ("vector", "keyword", "hybrid"):
        for metadata, expected in cases:
            hits = await local.search(
                SearchRequest(
                    "release note",
                    vector("release note"),
                    10,
                    SearchFilters(where=pairs(metadata)),
                    mode=mode,
                ),  # type: ignore[arg-type]
            )
            assert sorted(h.source_id for h in hits) == expected, (mode, metadata)


async def test_ids_that_are_not_uuids_are_simply_not_found(local: QdrantStore) -> None:
    await index(local, corpus())
    assert await local.get_by_id("SIAM-101") is None
    assert await local.delete("not-a-uuid") is False
    [found] = await local.find_documents("jira", "SIAM-101", "default")
    assert found.title == "Login timeout"


class FakeQdrant:
    """Answers the Qdrant REST calls the store makes, keeps the points it is sent and
    records every request. Every query scores every stored point 0.5."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.points: dict[str, dict[str, Any]] = {}  # collection -> id -> point
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else {}
        parts = path.strip("/").split("/")
        name = parts[1] if len(parts) > 1 else ""
        stored = self.points.get(name, {})
        if path == "/":
            return httpx.Response(200, json={"title": "qdrant", "version": self.version})
        if path == "/collections":
            return ok({"collections": [{"name": n} for n in sorted(self.points)]})
        if parts[2:] == ["exists"]:
            return ok({"exists": name in self.points})
        if method == "PUT" and len(parts) == 2:
            self.points[name] = {}
            return ok(True)
        if method == "PUT" and parts[2:] == ["points"]:
            stored.update((str(point["id"]), point) for point in body["points"])
        elif parts[2:] == ["points", "query"]:
            scored = [{"id": i, "version": 0, "score": 0.5} for i in stored]
            return ok({"points": scored})
        elif parts[2:] == ["points", "scroll"]:
            return ok({"points": [], "next_page_offset": None})
        elif parts[2:] == ["points", "count"]:
            return ok({"count": len(stored)})
        elif method == "POST" and parts[2:] == ["points"]:  # retrieve
            found = [stored[str(i)] for i in body["ids"] if str(i) in stored]
            return ok([{"id": f["id"], "payload": f.get("payload")} for f in found])
        return ok({"operation_id": 1, "status": "completed"})

    def bodies(self, method: str, suffix: str) -> list[dict[str, Any]]:
        return [
            json.loads(r.content)
            for r in self.requests
            if r.method == method and r.url.path.endswith(suffix)
        ]


def ok(result: Any) -> httpx.Response:
    return httpx.Response(200, json={"result": result, "status": "ok", "time": 0.0})


@pytest.mark.parametrize("version, fusion", [("1.16.2", "qdrant"), ("1.15.5", "shared")])
async def test_server_mode_through_the_client(version: str, fusion: str) -> None:
    server = FakeQdrant(version)
    store = QdrantStore(url=URL, api_key=Secret(API_KEY), tuning=RRF)
    with respx.mock(assert_all_called=False) as mock:
        mock.route(host="qdrant.test").mock(side_effect=server)
        await store.open()
        await index(store, corpus()[:1])
        hits = await store.search(
            SearchRequest("login timeout", vector("login timeout"), 5, SearchFilters())
        )
        health = await store.health_check()
        await store.close()
    assert [(h.source_id, h.similarity) for h in hits] == [("SIAM-101", 0.5)]
    assert all(r.headers["api-key"] == API_KEY for r in server.requests)
    assert API_KEY not in f"{health} {store!r}"
    assert health["fusion"] == fusion and health["server_version"] == version
    assert set(server.points) == {"knowledge", "knowledge-default"}
    indexed = {
        (r.url.path, json.loads(r.content)["field_name"])
        for r in server.requests
        if r.url.path.endswith("/index")
    }
    assert indexed == {
        *(
            ("/collections/knowledge/index", f)
            for f in ("kind", "collection", "source_type", "source_id")
        ),
        *(
            ("/collections/knowledge-default/index", f)
            for f in ("source_type", "document_id", "content_hash")
        ),
        ("/collections/knowledge-default/index", "metadata.app_under_test"),
    }
    [chunks] = [b for b in server.bodies("PUT", "/collections/knowledge-default/points")]
    [point] = chunks["points"]
    assert len(point["vector"]["dense"]) == EMBEDDER.dimension
    assert (
        point["vector"]["keywords"]["indices"]
        and point["payload"]["metadata"]["priority"] == "high"
    )
    queries = server.bodies("POST", "/collections/knowledge-default/points/query")
    if fusion == "qdrant":
        fused, cosines = queries
        assert fused["query"] == {"rrf": {"k": 61}}
        assert [p["using"] for p in fused["prefetch"]] == ["dense", "keywords"]
        # the fused points' cosines, scored by the server: no vector travels back
        assert cosines["using"] == "dense"
        assert cosines["filter"]["must"][0]["has_id"] == [point["id"]]
    else:
        assert [q.get("using") for q in queries] == ["dense", "keywords"]


async def written_and_read(store: QdrantStore, server: FakeQdrant) -> None:
    """The store opened on the fake server, one document written, searched for and the
    store's health asked, then closed: what a client sends in each of these."""
    with respx.mock(assert_all_called=False) as mock:
        mock.route(host="qdrant.test").mock(side_effect=server)
        await store.open()
        await index(store, corpus()[:1])
        await store.search(
            SearchRequest("login timeout", vector("login timeout"), 5, SearchFilters())
        )
        await store.health_check()
        await store.close()


async def test_cluster_settings_reach_the_server_in_each_request() -> None:
    """No Qdrant cluster runs here: the settings are checked in what the client sends.
    Each collection is created with them, every read (query, scroll, retrieve) asks
    the read consistency, and a count, which takes none, is sent without it."""
    server = FakeQdrant("1.16.2")
    store = QdrantStore(
        url=URL,
        api_key=Secret(API_KEY),
        shards=6,
        replication=3,
        write_consistency=2,
        read_consistency="majority",
        tuning=RRF,
    )
    await written_and_read(store, server)
    created = {
        r.url.path: json.loads(r.content)
        for r in server.requests
        if r.method == "PUT" and r.url.path.count("/") == 2
    }
    assert set(created) == {"/collections/knowledge", "/collections/knowledge-default"}
    for body in created.values():
        assert (body["shard_number"], body["replication_factor"]) == (6, 3)
        assert body["write_consistency_factor"] == 2
    reads = [
        r
        for r in server.requests
        if r.method == "POST"
        and r.url.path.endswith(("/points/query", "/points/scroll", "/points"))
    ]
    assert {r.url.path.rsplit("/", 1)[-1] for r in reads} >= {"query", "points"}
    assert all(r.url.params.get("consistency") == "majority" for r in reads)
    counts = [r for r in server.requests if r.url.path.endswith("/points/count")]
    assert counts and all("consistency" not in r.url.params for r in counts)


async def test_without_cluster_settings_the_server_chooses() -> None:
    server = FakeQdrant("1.16.2")
    store = QdrantStore(url=URL, api_key=Secret(API_KEY))
    await written_and_read(store, server)
    created = [json.loads(r.content) for r in server.requests if r.method == "PUT"]
    assert not any("shard_number" in body or "replication_factor" in body for body in created)
    assert all("consistency" not in r.url.params for r in server.requests)


async def test_local_mode_takes_the_cluster_settings_and_answers_alike() -> None:
    store = QdrantStore(":memory:", shards=2, replication=2, write_consistency=2,
                        read_consistency="2")  # fmt: skip
    await store.open()
    await index(store, corpus())
    for query, source_id in KNOWN_ANSWERS.items():
        hits = await store.search(SearchRequest(query, vector(query), 5, SearchFilters()))
        assert hits[0].source_id == source_id, query
    await store.close()


def test_a_write_consistency_beyond_the_replication_is_refused() -> None:
    with pytest.raises(ConfigurationError) as refused:
        QdrantStore(":memory:", replication=2, write_consistency=3)
    message = refused.value.message
    assert "KNOWLEDGE_QDRANT_WRITE_CONSISTENCY" in message
    assert "KNOWLEDGE_QDRANT_REPLICATION" in message


@pytest.mark.parametrize("value", ["most", "0", "-1"])
def test_a_read_consistency_is_a_level_or_a_number_of_copies(value: str) -> None:
    from knowledge_api.settings import Settings

    env = {"KNOWLEDGE_QDRANT_READ_CONSISTENCY": value}
    with pytest.raises(ConfigurationError, match="KNOWLEDGE_QDRANT_READ_CONSISTENCY must be"):
        Settings.from_env(environ=env, env_file=None)


async def test_an_unanswering_server_degrades_visibly() -> None:
    store = QdrantStore(url="https://admin:hunter2@qdrant.test:6333", api_key=Secret(API_KEY))
    with respx.mock() as mock:
        mock.route(host="qdrant.test").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(BackendConnectionError) as raised:
            await store.open()
        health = await store.health_check()
    assert health["status"] == "unavailable"
    shown = f"{raised.value.message} {health} {store!r}"
    assert API_KEY not in shown and "hunter2" not in shown and "qdrant.test:6333" in shown


@pytest.mark.parametrize("points", [1, 2, 10, 1_000, 100_000, 10_000_000])
def test_a_document_frequency_is_read_back_from_the_idf_qdrant_applies(points: int) -> None:
    """Several collections searched as one weigh each term by the union's IDF, from each
    collection's document frequency read back from the IDF Qdrant gave it (a float32
    score on a server: the frequency survives its rounding)."""
    for frequency in sorted({0, 1, 2, points // 3, points // 2, points - 1, points}):
        if frequency > points:
            continue
        weight = float(np.float32(idf(frequency, points)))
        assert document_frequency(weight, points) == frequency
