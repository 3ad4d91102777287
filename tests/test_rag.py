"""POST /v1/knowledge/retrieve and /validate, and named collections."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import Chunk, SearchHit, document_id
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import retrieval as rag
from tests.cli_env import cli_home
from tests.conftest import corpus, make_settings
from tests.test_errors import assert_error_shape

RETRIEVE, VALIDATE = "/v1/knowledge/retrieve", "/v1/knowledge/validate"
MANUALS = [
    {
        "source_type": "wiki",
        "source_id": "manual/printer",
        "title": "Printer manual",
        "content": "# Printer manual\n\n## Paper jams\n\nOpen tray 2 and pull the jammed sheet.",
        "metadata": {"url": "https://manuals.example.com/printer"},
        "collection": "manuals",
    },
    {
        "source_type": "wiki",
        "source_id": "manual/scanner",
        "title": "Scanner manual",
        "content": "The scanner saves every page as a PDF in the shared folder.",
        "collection": "manuals",
    },
]


@pytest.fixture
def rag_client(client: TestClient) -> TestClient:
    response = client.post("/v1/knowledge/documents", json={"documents": MANUALS})
    assert response.status_code == 201, response.text
    return client


def retrieve(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(RETRIEVE, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_retrieve_returns_chunks_with_their_source_and_the_query_vector(
    rag_client: TestClient,
) -> None:
    body = retrieve(rag_client, query="paper jam in tray 2", collection="manuals", top_k=1)
    assert body["success"] is True
    assert body["retrieved_chunks"] == [
        {
            "content": "Open tray 2 and pull the jammed sheet.",
            "source_url": "https://manuals.example.com/printer",
            "page_title": "Printer manual",
            "section_hierarchy": "Paper jams",
            "chunk_index": 0,
            "similarity_score": body["retrieved_chunks"][0]["similarity_score"],
            "vector_id": body["retrieved_chunks"][0]["vector_id"],
            "collection": "manuals",
            "start": 33,  # where it sits in the document, after its heading
            "end": 71,
        }
    ]
    assert 0 < body["retrieved_chunks"][0]["similarity_score"] <= 1
    expected = FakeEmbedder().embed_query("paper jam in tray 2")
    assert body["query_embedding"]["model"] == "fake:hash-64"
    assert np.allclose(body["query_embedding"]["vector"], expected, atol=1e-6)
    assert body["metrics"]["retrieval_count"] == 1 and body["metrics"]["response_time_ms"] > 0
    detail = rag_client.get(f"/v1/knowledge/detail/wiki/{body['retrieved_chunks'][0]['vector_id']}")
    assert detail.status_code == 404  # the detail route reads the default collection only


def test_searches_stay_inside_one_collection(rag_client: TestClient) -> None:
    manuals = retrieve(rag_client, query="login timeout scanner", collection="manuals", top_k=20)
    assert {c["source_url"] for c in manuals["retrieved_chunks"]} == {
        "https://manuals.example.com/printer",
        "manual/scanner",
    }
    default = retrieve(rag_client, query="scanner PDF shared folder", collection="default")
    assert len(default["retrieved_chunks"]) == 5  # top_k defaults to 5
    assert "manual/scanner" not in {c["source_url"] for c in default["retrieved_chunks"]}


def test_an_unknown_collection_is_a_404_that_lists_the_real_ones(rag_client: TestClient) -> None:
    response = rag_client.post(RETRIEVE, json={"query": "x", "collection": "nope"})
    error = assert_error_shape(response, 404)
    assert error["type"] == "collection_not_found"
    assert error["details"] == {
        "collection": "nope",
        "available": ["default", "manuals"],
        "request_id": response.headers["x-request-id"],
    }


@pytest.mark.parametrize(
    "body, field, kind",
    [
        ({"query": "", "collection": "default"}, "query", "invalid_query"),
        ({"query": "x" * 1000, "collection": "default"}, "query", "invalid_query"),
        ({"query": "x"}, "collection", "invalid_request"),
        ({"query": "x", "collection": "no spaces"}, "collection", "invalid_request"),
        ({"query": "x", "collection": "default", "top_k": 0}, "top_k", "invalid_request"),
        ({"query": "x", "collection": "default", "top_k": 101}, "top_k", "invalid_request"),
        ({"query": "x", "collection": "default", "k": 3}, "k", "invalid_request"),
        (
            {"query": "x", "collection": "default", "query_embedding_model": "embed-english-v3.0"},
            "query_embedding_model",
            "invalid_request",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str, kind: str
) -> None:
    error = assert_error_shape(client.post(RETRIEVE, json=body), 400)
    assert (error["type"], error["details"]["field"]) == (kind, field)


def test_the_configured_model_may_be_named(client: TestClient) -> None:
    for name in ("fake:hash-64", "HASH-64"):
        body = retrieve(client, query="login", collection="default", query_embedding_model=name)
        assert body["query_embedding"]["model"] == "fake:hash-64"


def test_an_unavailable_store_is_a_503(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    with TestClient(create_app(make_settings(tmp_path, db_path=tmp_path / "folder"))) as client:
        error = assert_error_shape(
            client.post(RETRIEVE, json={"query": "x", "collection": "a"}), 503
        )
        assert error["type"] == "store_unavailable"


class BrokenEmbedder(FakeEmbedder):
    def load(self) -> None:
        raise EmbeddingError("model files are missing")


@pytest.fixture
def keyword_only(settings: Settings) -> Iterator[TestClient]:
    """A service whose model failed to load, over a store indexed beforehand."""
    indexer = build_service(settings)
    asyncio.run(index_corpus(indexer))
    service = build_service(settings)
    service.embedder = BrokenEmbedder()
    with TestClient(create_app(settings, service)) as client:
        yield client


async def index_corpus(service: KnowledgeService) -> None:
    await service.start()
    await service.ingest(corpus())
    await service.stop()


def test_without_the_embedder_retrieval_is_by_keyword_and_says_so(keyword_only: TestClient) -> None:
    body = retrieve(keyword_only, query="FLAC audio", collection="default")
    assert body["query_embedding"] is None
    assert body["retrieved_chunks"][0]["source_url"] == "kb-7"
    assert "keyword" in body["warnings"][0]


# -- validate ---------------------------------------------------------------------------


def test_validate_scores_relevance_metadata_consistency_and_expected_sources(
    client: TestClient,
) -> None:
    formats, login = "Which audio formats does asset ingestion accept?", "login page timeout"
    response = client.post(
        VALIDATE,
        json={
            "collection": "default",
            "test_queries": [formats, login],
            "expected_sources": [{"query": formats, "sources": ["kb-7", "msg-42"]}],
            "consistency_runs": 3,
            "top_k": 3,
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    first, second = body["validation_results"]
    assert first["query"] == formats and len(first["retrieved_chunks"]) == 3
    ranked = [c["source_url"] for c in first["retrieved_chunks"]]
    assert ranked[0] == "kb-7" and "msg-42" not in ranked
    assert first["relevance_valid"] is True and first["metadata_correct"] is True
    assert first["consistency_score"] == 1.0
    assert first["validation_metrics"]["consistency_variance"] == 0.0
    similarities = [c["similarity_score"] for c in first["retrieved_chunks"]]
    assert first["validation_metrics"]["relevance_score"] == pytest.approx(
        statistics.fmean(similarities), abs=1e-3
    )
    # one of two expected sources found, at rank 1
    ideal = 1 + 1 / np.log2(3)
    assert first["retrieval_metrics"] == {
        "ndcg@10": round(1 / ideal, 4),
        "recall@3": 0.5,
        "mrr": 1.0,
    }
    assert first["validation_metrics"]["accuracy"] == 0.5
    assert second["validation_metrics"]["accuracy"] is None and "retrieval_metrics" not in second
    score = statistics.fmean(
        [statistics.fmean([1, 1, 1, 0.5]), statistics.fmean([second["relevance_valid"], 1, 1])]
    )
    overall = body["overall_validation"]
    assert overall["score"] == round(score, 4)
    assert overall["passed"] is (score >= 0.7)
    assert "metadata correct for 2/2" in overall["summary"]


def test_validation_fails_below_the_pass_mark(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, validate_min_similarity=0.99, validate_pass_score=0.9)
    app = create_app(settings)
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())  # type: ignore[union-attr]
        body = client.post(
            VALIDATE,
            json={
                "collection": "default",
                "test_queries": ["release date"],
                "expected_sources": [{"query": "release date", "sources": ["nowhere"]}],
                "consistency_runs": 1,
            },
        ).json()
    result = body["validation_results"][0]
    assert result["relevance_valid"] is False and result["validation_metrics"]["accuracy"] == 0.0
    assert body["overall_validation"]["passed"] is False
    assert (
        body["overall_validation"]["score"] == 0.5
    )  # relevance 0, metadata 1, consistency 1, accuracy 0


@pytest.mark.parametrize(
    "change, field",
    [
        ({"consistency_runs": 0}, "consistency_runs"),
        ({"consistency_runs": 11}, "consistency_runs"),
        ({"test_queries": []}, "test_queries"),
        ({"test_queries": ["ok", " "]}, "test_queries[1]"),
        ({"expected_sources": [{"query": "other", "sources": ["a"]}]}, "expected_sources[0].query"),
        ({"expected_sources": [{"query": "login", "sources": []}]}, "expected_sources[0].sources"),
        ({"expected_sources": {"login": ["a"]}}, "expected_sources"),
    ],
)
def test_validate_rejects_bad_input(client: TestClient, change: dict[str, Any], field: str) -> None:
    body = {"collection": "default", "test_queries": ["login"], **change}
    error = assert_error_shape(client.post(VALIDATE, json=body), 400)
    assert error["details"]["field"] == field


def test_validate_of_an_unknown_collection_is_a_404(client: TestClient) -> None:
    response = client.post(VALIDATE, json={"collection": "nope", "test_queries": ["x"]})
    assert assert_error_shape(response, 404)["type"] == "collection_not_found"


def hit(chunk: str, similarity: float, doc: str = "") -> SearchHit:
    doc = doc or document_id("default", "wiki", chunk)
    return SearchHit(Chunk(chunk, doc, 0, f"text {chunk}"), doc, "wiki", chunk, {}, 0.0, similarity)


def test_consistency_and_variance_across_differing_runs() -> None:
    runs = [[hit("a", 0.8), hit("b", 0.6)], [hit("a", 0.8), hit("c", 0.4)]]
    assert rag.consistency(runs) == pytest.approx(1 / 3)  # {a} of {a, b, c}
    assert rag.score_variance(runs) == pytest.approx(0.0025)  # means 0.7 and 0.6
    assert rag.consistency(runs[:1]) == 1.0 and rag.score_variance(runs[:1]) == 0.0


def test_metadata_is_incorrect_for_a_chunk_from_another_collection() -> None:
    stored = {document_id("default", "wiki", "a"), document_id("default", "wiki", "a", "/srv")}
    assert rag.metadata_complete(hit("a", 0.5), stored) is True
    sourced = hit("a", 0.5, doc=document_id("default", "wiki", "a", "/srv"))
    assert rag.metadata_complete(sourced, stored) is True  # a document of a source
    stranger = hit("a", 0.5, doc=document_id("other", "wiki", "a"))
    assert rag.metadata_complete(stranger, stored) is False
    assert rag.metadata_complete(hit("a", 1.5), stored) is False


# -- collections on the documents API and the CLI ----------------------------------------


def test_documents_reject_a_bad_collection_name(client: TestClient) -> None:
    doc = {"source_type": "wiki", "source_id": "a", "content": "b", "collection": "a/b"}
    error = assert_error_shape(client.post("/v1/knowledge/documents", json=doc), 400)
    assert error["details"]["field"] == "collection"


def test_ingest_into_a_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    (tmp_path / "page.md").write_text("# Page\n\nText of the page.")
    assert main(["ingest", str(tmp_path / "page.md"), "--collection", "manuals"]) == 0
    assert main(["ingest", str(tmp_path / "page.md"), "--collection", "no good"]) == 2
    assert "--collection: must be 1-64 letters" in capsys.readouterr().err
    with TestClient(create_app(make_settings(tmp_path, db_path=tmp_path / "k.db"))) as client:
        body = retrieve(client, query="page text", collection="manuals")
        assert [c["source_url"] for c in body["retrieved_chunks"]] == ["page.md"]
