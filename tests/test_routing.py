"""Semantic routing: the rule on hand-made centroids, then the query path with the real
MiniLM model over the six-source corpus (one document per source type)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.models import SOURCE_TYPES, Document
from knowledge_api.routing import Centroids, cued_sources, route
from knowledge_api.service import KnowledgeService
from tests.conftest import ask, corpus, make_settings, query_params

COMMIT_QUESTION = "which commit fixed pagination of asset search"


def centroids(**rows: list[float]) -> Centroids:
    matrix = np.array([np.array(v) / np.linalg.norm(v) for v in rows.values()], np.float32)
    return Centroids(0, tuple(rows), matrix)


def test_cue_words_name_their_sources() -> None:
    assert cued_sources("Which COMMIT changed the cache?") == {"git"}
    assert cued_sources("the jira ticket and the e-mail about it") == {"jira", "email"}
    assert cued_sources("what was said on Slack about the freeze") == {"chat"}
    assert cued_sources("how does hybrid search rank passages") == set()


def test_without_a_cue_every_source_near_the_best_is_kept() -> None:
    known = centroids(git=[1, 0, 0], jira=[0.9, 0.44, 0], wiki=[0, 0, 1])
    query = np.array([1.0, 0.0, 0.0], np.float32)
    assert route("how is it done", query, known, margin=0.15).sources == ("git", "jira")
    assert route("how is it done", query, known, margin=0.05).sources == ("git",)
    assert route("how is it done", query, known, margin=1.0).sources is None  # all: no filter


def test_a_cue_adds_its_source_to_the_close_ones() -> None:
    known = centroids(git=[1, 0, 0], jira=[0, 1, 0], wiki=[0, 0, 1])
    query = np.array([0.0, 0.0, 1.0], np.float32)
    decided = route("which commit added this page", query, known, margin=0.0)
    assert decided.sources == ("git", "wiki") and decided.cued == ("git",)
    assert route("who added this page", query, known, margin=0.0).sources == ("wiki",)


def test_without_centroids_or_a_second_source_everything_is_searched() -> None:
    query = np.array([1.0, 0.0], np.float32)
    assert route("which commit", query, None, 0.1) == route("x", query, None, 0.1)
    assert route("which commit", query, None, 0.1).searched == SOURCE_TYPES
    assert route("which commit", query, centroids(git=[1, 0]), 0.1).sources is None


def test_without_a_query_vector_only_a_cue_narrows() -> None:
    known = centroids(git=[1, 0], jira=[0, 1])
    assert route("which commit", None, known, 0.1).sources == ("git",)
    assert route("what happened", None, known, 0.1).sources is None


async def started(tmp_path: Path, routing: str = "on") -> KnowledgeService:
    service = build_service(make_settings(tmp_path, embedder="local", routing=routing))
    await service.start()
    return service


@pytest.fixture
async def routed(tmp_path: Path) -> AsyncIterator[KnowledgeService]:
    service = await started(tmp_path)
    await service.ingest(corpus())
    await service.learn_routes("default")
    yield service
    await service.stop()


async def test_a_commit_question_searches_only_git(routed: KnowledgeService) -> None:
    body = await ask(routed, query_params({"query": COMMIT_QUESTION, "synthesize": False}))
    assert body["metrics"]["routed"] == ["git"]
    assert [r["source_id"] for r in body["results"]] == ["a1b2c3d"]


async def test_a_question_without_cue_keeps_the_source_of_its_answer(
    routed: KnowledgeService,
) -> None:
    question = "Which audio formats does asset ingestion accept?"
    body = await ask(routed, query_params({"query": question, "synthesize": False}))
    assert "knowledge" in body["metrics"]["routed"]
    assert len(body["metrics"]["routed"]) < len(SOURCE_TYPES)
    assert body["results"][0]["source_id"] == "kb-7"


async def test_explicit_sources_always_win(routed: KnowledgeService) -> None:
    payload = {"query": COMMIT_QUESTION, "sources": ["jira", "wiki"], "synthesize": False}
    body = await ask(routed, query_params(payload))
    assert body["metrics"]["routed"] == ["jira", "wiki"]
    assert {r["source_type"] for r in body["results"]} <= {"jira", "wiki"}


async def test_routing_off_searches_every_source_and_says_nothing(tmp_path: Path) -> None:
    service = await started(tmp_path, routing="off")
    try:
        await service.ingest(corpus())
        params = query_params({"query": COMMIT_QUESTION, "synthesize": False, "threshold": 0})
        body = await ask(service, params)
    finally:
        await service.stop()
    assert "routed" not in body["metrics"]
    assert len({r["source_type"] for r in body["results"]}) > 1
    assert service.centroids == {}  # nothing learned either


async def test_centroids_are_learned_in_the_background_and_again_after_a_change(
    tmp_path: Path,
) -> None:
    service = await started(tmp_path)
    try:
        await service.ingest([d for d in corpus() if d.source_type != "metrics"])
        first = await ask(service, query_params({"query": COMMIT_QUESTION}))
        assert first["metrics"]["routed"] == list(SOURCE_TYPES)  # not learned yet: all
        learned = await service.learn_routes("default")
        assert "metrics" not in learned.sources
        note = Document("metrics", "p95", "The p95 latency of search was 420 ms.", "Latency")
        await service.ingest([note])
        assert "metrics" in (await service.learn_routes("default")).sources
    finally:
        await service.stop()


def test_the_query_route_reports_the_sources_searched(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, routing="on"))
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())  # type: ignore[union-attr]
        client.portal.call(app.state.service.learn_routes, "default")  # type: ignore[union-attr]
        asked = {"query": COMMIT_QUESTION, "synthesize": False}
        routed = client.post("/v1/knowledge/query", json=asked).json()["metrics"]["routed"]
        named = client.post("/v1/knowledge/query", json={**asked, "sources": ["email"]})
    assert "git" in routed  # the cue word's source, whatever the fake vectors say
    assert named.json()["metrics"]["routed"] == ["email"]
