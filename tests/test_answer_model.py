"""Grounded answers with the real all-MiniLM-L6-v2 model judging entailment."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api import grounding
from knowledge_api.app import create_app
from knowledge_api.embeddings.local import LocalEmbedder
from knowledge_api.ingest.chunker import chunk_document
from knowledge_api.models import Document
from tests.conftest import corpus, make_settings
from tests.providers import GEMINI_GENERATE, gemini_answer, llm_settings
from tests.test_extractive import hit

pytestmark = pytest.mark.model

LOGIN = hit(
    "The login page times out after 30 seconds when SSO is slow. "
    "Increase the gateway timeout to fix the login timeout.",
    0.6,
)
AUDIO = hit("Asset ingestion accepts WAV and FLAC audio files. MP3 uploads become FLAC.", 0.5)


@pytest.fixture(scope="module")
def model() -> LocalEmbedder:
    embedder = LocalEmbedder(precision="auto")
    embedder.load()
    return embedder


async def support(model: LocalEmbedder, answer: str) -> float:
    async def embed(texts: Sequence[str]) -> np.ndarray:
        return model.embed_documents(texts)

    score, method = await grounding.entailment(grounding.claims(answer), [LOGIN, AUDIO], embed)
    assert method == "embedding-similarity"
    return score


async def test_paraphrases_are_supported_and_inventions_are_not(model: LocalEmbedder) -> None:
    quoted = await support(model, "The login page times out after 30 seconds when SSO is slow [1].")
    paraphrase = await support(model, "Sign-in hangs for half a minute when SSO is slow [1].")
    invented = await support(model, "The release of version 4.2 moves to Friday [1].")
    miscited = await support(model, "WAV and FLAC files are accepted [1].")
    assert quoted == pytest.approx(1.0, abs=1e-5)
    assert quoted > paraphrase > 0.5 > invented
    assert miscited < 0.2  # true, but not what [1] says


def test_an_llm_answer_graded_with_the_real_model(
    model: LocalEmbedder, tmp_path: Path, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(
        side_effect=[
            gemini_answer(["Sign-in hangs when SSO is slow; ", "raise the gateway timeout [1]."]),
            gemini_answer(["Sign-in hangs when SSO is slow [1]. It also deletes user data [1]."]),
        ]
    )
    app = create_app(llm_settings(tmp_path, embedder="local"))
    app.state.service.embedder = model
    question = {"query": "Why does the login page time out?", "threshold": 0.3}
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())
        grounded = client.post("/v1/knowledge/answer", json=question).json()
        other = client.post("/v1/knowledge/answer", json={**question, "limit": 4}).json()
    assert grounded["status"] == "success"
    assert grounded["sources"][0]["metadata"]["source_id"] == "SIAM-101"
    assert grounded["confidence"]["entailment_score"] > 0.6
    assert grounded["confidence"]["overall"] > 0.5  # calibrated: better than a coin toss
    assert other["confidence"]["entailment_score"] < grounded["confidence"]["entailment_score"]
    assert other["confidence"]["overall"] < grounded["confidence"]["overall"]


FIELDS = """- `source_type` (required): one of the six source types.
- `source_id` (required): at most 500 characters. Trimmed.
- `content` (required): not blank. At most 60000 characters.
- `title` (optional): at most 500 characters.
- `metadata` (optional): string, number or boolean values (HTTP headers are not read)."""
WRITES = Document(
    "wiki",
    "writes.md",
    "# Writes\n\nTo index one document, send it as the body. Each document has these "
    f"fields:\n\n{FIELDS}",
    "Reference",
)


def test_a_passage_whose_sentence_answers_grounds_an_answer_below_its_own_similarity(
    model: LocalEmbedder, tmp_path: Path
) -> None:
    """A passage of a sentence and the bullets it introduces is 0.37 from "How do I add
    documents over HTTP?" (its bullets dilute it) and its first sentence 0.45: the
    answer is written from it at the default 0.4, not refused. (One bullet names HTTP:
    a passage that does not name what the question names gives no answer.)"""
    question = "How do I add documents over HTTP?"
    (passage,) = chunk_document(WRITES)
    assert (
        float(model.embed_documents([passage.embedded_text])[0] @ model.embed_query(question)) < 0.4
    )
    app = create_app(make_settings(tmp_path, embedder="local", synthesizer="extractive"))
    app.state.service.embedder = model
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, [WRITES])
        asked = client.post("/v1/knowledge/answer", json={"query": question})
        unrelated = client.post(
            "/v1/knowledge/answer", json={"query": "Who won the football world cup in 1998?"}
        )
    answer = asked.json()
    assert answer["status"] == "success", answer
    assert "To index one document, send it as the body." in answer["answer"]
    assert unrelated.json()["status"] == "insufficient_context"
