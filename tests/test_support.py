"""Support retrieval: the sidecar contract's fields, scoring, coverage and gaps, and
the fallback answer for every failure (bad input, timeout, store, model)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api import support as sidecar
from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.connectors.kb import Article
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import Chunk, SearchHit, normalize_query
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import support
from knowledge_api.usecases.support import Scored, SupportRequest
from tests.cli_env import cli_home
from tests.conftest import ingested_client, make_settings
from tests.kb_host import article

SUPPORT = "/v1/knowledge/support"
HASHING = "My Apollo shows 0 H/s for 3 days. Already tried restarting."
KB = [
    article(
        "kb-001",
        "Apollo Not Hashing Troubleshooting",
        "Apollo II not hashing: My Apollo shows 0 H/s for 3 days. Already tried restarting. "
        "First check that your pool configuration is correct, then look at the miner log.",
        ["not_hashing"],
        ["Apollo", "Apollo II"],
    ),
    article(
        "kb-002",
        "Apollo III Hashrate",
        "Apollo II not hashing: My Apollo shows 0 H/s for 3 days. Already tried restarting. "
        "The Apollo III needs the new power supply.",
        ["not_hashing"],
        ["Apollo III"],
    ),
    article(
        "kb-003",
        "Returns and warranty " + "x" * 300,
        "Devices can be returned within 30 days. " * 20,
        ["refund"],
        [],
    ),
]
PATIENT_MS = 30000.0
"""The retrieval budget of the tests about what is found: the 100 ms default is met by
a quiet machine and missed by a loaded one. The fallback past the budget is the slow
retrieval's test, on 100 ms."""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, support_timeout_ms=PATIENT_MS)


def documents() -> list[Any]:
    return [Article.parse(raw).document("support", "https://host.example.com") for raw in KB]


@pytest.fixture
async def kb(service: KnowledgeService) -> AsyncIterator[KnowledgeService]:
    await service.ingest(documents())
    yield service


def cosine(query: str, embedded_text: str) -> float:
    fake = FakeEmbedder()
    return float(np.dot(fake.embed_query(normalize_query(query)), fake.embed_query(embedded_text)))


async def test_sources_follow_the_contract(kb: KnowledgeService) -> None:
    body = await support.retrieve(kb, "not_hashing", HASHING, {"product": "Apollo II"})
    assert set(body) == {"sources_consulted", "coverage", "gaps", "retrieval_time_ms"}
    assert isinstance(body["retrieval_time_ms"], int) and body["retrieval_time_ms"] >= 1
    (source,) = body["sources_consulted"]  # kb-002 is for another device, kb-003 unrelated
    assert source["title"] == "Apollo Not Hashing Troubleshooting"
    assert source["url"] == "https://docs.example.com/kb-001"
    assert source["last_updated"] == "2024-12-15T10:00:00Z"
    assert datetime.fromisoformat(source["last_updated"])
    assert len(source["excerpt"]) <= 150 and source["excerpt"].endswith("…")
    assert source["excerpt"].startswith("Apollo II not hashing: My Apollo shows 0 H/s")
    query = SupportRequest("not_hashing", HASHING, "Apollo II").query
    assert query == f"Apollo II not hashing: {HASHING}"
    similarity = cosine(query, f"{source['title']}\n{KB[0]['content']}")
    assert source["relevance_score"] == round(min(1.0, similarity + 0.1 + 0.05), 4)
    assert source["relevance_score"] >= 0.8
    assert (body["coverage"], body["gaps"]) == ("high", [])


async def test_product_filters_and_gaps_name_what_is_missing(kb: KnowledgeService) -> None:
    body = await support.retrieve(kb, "not_hashing", HASHING, {"product": "Apollo III"})
    assert [s["title"] for s in body["sources_consulted"]] == ["Apollo III Hashrate"]
    body = await support.retrieve(kb, "not_hashing", HASHING, {"product": "Compac F"})
    assert body["sources_consulted"] == []  # every hashing article is for other devices
    assert body["coverage"] in ("low", "none")
    assert "No Compac F specific article for not hashing" in body["gaps"]


async def test_long_titles_are_clipped_and_generic_articles_are_medium(
    kb: KnowledgeService,
) -> None:
    message = "Devices can be returned within 30 days."
    body = await support.retrieve(kb, "refund", message, {"product": "Apollo II"})
    (source,) = [s for s in body["sources_consulted"] if "Returns" in s["title"]]
    assert len(source["title"]) <= 200 and source["title"].endswith("…")
    # an article for the intent, but not for the product: not high
    assert body["coverage"] == "medium"
    assert body["gaps"] == ["No Apollo II specific article for refund"]


def scored(score: float, intent: bool, device: bool) -> Scored:
    chunk = Chunk("c", "d", 0, "text")
    return Scored(SearchHit(chunk, "d", "knowledge", "a", {}, 0.0, score), score, intent, device)


@pytest.mark.parametrize(
    "sources, ranked, expected",
    [
        ([scored(0.85, True, True)], [], "high"),
        ([scored(0.95, True, False)], [], "medium"),  # not for the product
        ([scored(0.75, True, True)], [], "medium"),  # specific, but below 0.8
        ([], [scored(0.6, True, True)], "low"),
        ([], [scored(0.4, True, True)], "none"),
        ([], [], "none"),
    ],
)
def test_coverage_rules(sources: list[Scored], ranked: list[Scored], expected: str) -> None:
    settings = Settings.from_env(environ={}, env_file=None)
    request = SupportRequest("not_hashing", "x", "Apollo II")
    assert support.coverage_of(request, sources, ranked or sources, settings) == expected


def test_gaps_without_intent_or_product_speak_only_of_relevance() -> None:
    settings = Settings.from_env(environ={}, env_file=None)
    request = SupportRequest("", "x", "")
    assert support.gaps_of(request, [], [scored(0.42, False, False)], settings) == [
        "No article relevant enough to this message (best 0.42): none scores >= 0.7"
    ]
    assert support.coverage_of(request, [scored(0.8, False, False)], [], settings) == "high"


def test_clip_cuts_at_a_word() -> None:
    assert support.clip("short", 10) == "short"
    assert support.clip("one two three four five", 12) == "one two…"
    assert len(support.clip("x" * 400, 150)) == 150


@pytest.mark.parametrize(
    "intent, message, metadata, reason",
    [
        ("not_hashing", "", {}, "message: must not be empty or whitespace"),
        ("not_hashing", None, {}, "message: is required"),
        ("not_hashing", "x" * 2001, {}, "message: must be at most 2000 characters"),
        (42, "hello", {}, "intent: must be a string"),
        ("x", "hello", ["Apollo"], "metadata: must be a JSON object"),
        ("x", "hello", {"product": 7}, "metadata.product: must be a string"),
    ],
)
async def test_bad_input_gets_the_fallback_with_the_reason(
    kb: KnowledgeService, intent: Any, message: Any, metadata: Any, reason: str
) -> None:
    body = await support.retrieve(kb, intent, message, metadata)
    assert body["sources_consulted"] == [] and body["coverage"] == "none"
    assert body["retrieval_time_ms"] == 0
    assert body["gaps"][0].startswith("Invalid request: ") and reason in body["gaps"][0]


async def test_an_empty_knowledge_base_says_so(service: KnowledgeService) -> None:
    body = await support.retrieve(service, "not_hashing", HASHING, {})
    assert body["coverage"] == "none"
    assert body["gaps"] == ["No KB articles are indexed yet (run `knowledge-api sync`)"]


class SlowEmbedder(FakeEmbedder):
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.3)
        return super().embed_batch(texts)


async def test_a_slow_retrieval_times_out_into_the_fallback(settings: Settings) -> None:
    service = build_service(settings.replace(support_timeout_ms=100.0))
    service.embedder = SlowEmbedder()
    await service.start()
    try:
        body = await support.retrieve(service, "not_hashing", HASHING, {})
    finally:
        await service.stop()
    assert body == support.fallback("Knowledge retrieval unavailable: timed out after 100 ms")


class BrokenEmbedder(FakeEmbedder):
    def load(self) -> None:
        raise EmbeddingError("model files are missing")


async def test_no_model_means_the_fallback(settings: Settings) -> None:
    service = build_service(settings)
    service.embedder = BrokenEmbedder()
    await service.start()
    body = await support.retrieve(service, "not_hashing", HASHING, {})
    await service.stop()
    assert body["gaps"] == ["Knowledge retrieval unavailable: the embedding model is not available"]


@pytest.fixture
def support_client(settings: Settings) -> Iterator[TestClient]:
    yield from ingested_client(settings, documents())


def test_the_route_answers_the_contract(support_client: TestClient) -> None:
    payload = {"intent": "not_hashing", "message": HASHING, "metadata": {"product": "Apollo II"}}
    response = support_client.post(SUPPORT, json=payload)
    assert response.status_code == 200
    body = response.json()
    assert body["coverage"] == "high"
    assert [s["url"] for s in body["sources_consulted"]] == ["https://docs.example.com/kb-001"]


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"[]", "Invalid request: body: must be a JSON object"),
        (b"{", "Invalid request: body: must be valid JSON"),
        (b"x" * 70000, "Invalid request: body is 70000 bytes; the limit is 65536"),
        (b'{"message": "hi", "ticket": 1}', "Invalid request: ticket: is not a known field"),
    ],
)
def test_the_route_never_answers_an_error_status(
    support_client: TestClient, content: bytes, reason: str
) -> None:
    response = support_client.post(
        SUPPORT, content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["sources_consulted"] == [] and body["coverage"] == "none"
    assert body["gaps"][0].startswith(reason)


def test_a_body_not_sent_as_json_is_the_fallback_too(support_client: TestClient) -> None:
    response = support_client.post(
        SUPPORT, content=b'{"message": "hi"}', headers={"content-type": "text/plain"}
    )
    assert response.status_code == 200
    assert response.json()["gaps"][0].startswith("Invalid request: the body must be sent as")


def test_an_unavailable_store_is_the_fallback_too(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    with TestClient(create_app(make_settings(tmp_path, db_path=tmp_path / "folder"))) as client:
        response = client.post(SUPPORT, json={"intent": "x", "message": "hello"})
    assert response.status_code == 200
    assert response.json()["gaps"][0].startswith("Knowledge retrieval unavailable: store")


def test_the_in_process_function_for_programs_that_are_not_async(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, support_timeout_ms=PATIENT_MS)
    retriever = sidecar.SupportRetriever(settings)
    try:
        retriever._started.result(timeout=60)  # a guard against hanging only
        empty = retriever.retrieve_knowledge("not_hashing", HASHING, {"product": "Apollo II"})
        assert empty["coverage"] == "none" and "No KB articles" in empty["gaps"][0]
        retriever.run(retriever.service.ingest(documents()))
        body = retriever.retrieve_knowledge("not_hashing", HASHING, {"product": "Apollo II"})
        assert body["coverage"] == "high"
        assert retriever.retrieve_knowledge("x", "", {})["gaps"][0].startswith("Invalid request")
    finally:
        retriever.close()


def test_retrieve_knowledge_starts_in_the_background_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_home(tmp_path, monkeypatch)
    monkeypatch.setenv("KNOWLEDGE_SUPPORT_TIMEOUT_MS", str(PATIENT_MS))
    monkeypatch.setattr(sidecar, "_default", None)
    first = sidecar.retrieve_knowledge("not_hashing", HASHING, {})
    assert first["coverage"] == "none" and first["retrieval_time_ms"] == 0
    default = sidecar._default
    assert default is not None
    try:
        default._started.result(timeout=60)  # a guard against hanging only
        body = sidecar.retrieve_knowledge("not_hashing", HASHING, {})
        assert body["gaps"] == ["No KB articles are indexed yet (run `knowledge-api sync`)"]
    finally:
        default.close()
    monkeypatch.setenv("KNOWLEDGE_SUPORT_TIMEOUT_MS", "5")
    monkeypatch.setattr(sidecar, "_default", None)
    broken = sidecar.retrieve_knowledge("not_hashing", HASHING, {})
    assert "did you mean KNOWLEDGE_SUPPORT_TIMEOUT_MS" in broken["gaps"][0]


FUTUREBIT = [
    article(
        "kb-001",
        "Apollo Not Hashing Troubleshooting",
        "If your Apollo shows 0 H/s, first check that your pool configuration is correct: "
        "the pool URL, worker name and password in the miner settings. Then check that the "
        "hashboard is connected and powered, and look at the miner log for errors.",
        ["not_hashing", "performance_issue"],
        ["Apollo", "Apollo II", "Apollo III"],
    ),
    article(
        "kb-002",
        "Apollo II Hashrate Issues",
        "Apollo II devices may show 0 H/s if the Bitcoin node is not fully synced. Solo "
        "mining waits for the node; pool mining needs a working pool.",
        ["not_hashing"],
        ["Apollo II"],
    ),
    article(
        "kb-003",
        "Updating Apollo Firmware",
        "To update the firmware, download the latest image, open the web dashboard, go to "
        "Settings > Update and upload the file. Do not power off during the update.",
        ["firmware_update"],
        ["Apollo", "Apollo II"],
    ),
    article(
        "kb-005",
        "Returns and Warranty",
        "Devices can be returned within 30 days. The warranty covers manufacturing defects "
        "for one year. Contact support with your order number.",
        ["refund", "warranty"],
        [],
    ),
]


@pytest.mark.model
async def test_the_local_model_finds_the_right_articles(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, embedder="local", support_timeout_ms=PATIENT_MS)
    service = build_service(settings)
    await service.start()
    try:
        host = "https://host.example.com"
        await service.ingest(Article.parse(a).document("support", host) for a in FUTUREBIT)
        hashing = await support.retrieve(service, "not_hashing", HASHING, {"product": "Apollo II"})
        billing = await support.retrieve(
            service, "billing", "Can I pay with a credit card in euros?", {"product": "Apollo II"}
        )
        refund = await support.retrieve(
            service, "refund", "I want my money back, the unit arrived broken", {}
        )
    finally:
        await service.stop()
    assert hashing["coverage"] == "high" and hashing["gaps"] == []
    titles = [s["title"] for s in hashing["sources_consulted"]]
    assert titles == ["Apollo Not Hashing Troubleshooting", "Apollo II Hashrate Issues"]
    assert all(s["relevance_score"] >= 0.7 for s in hashing["sources_consulted"])
    assert (billing["coverage"], billing["sources_consulted"]) == ("none", [])
    assert "No article tagged for the intent 'billing'" in billing["gaps"]
    assert (refund["coverage"], refund["sources_consulted"]) == ("low", [])
    assert refund["gaps"][0].startswith("No article relevant enough to this message (best 0.")
