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


UNDO = Document(
    "wiki",
    "existing-database.md",
    "## Undo: migrate --undo\n\n```bash\nknowledge-api migrate --undo\n```\n\n"
    "Undo runs the recorded SQL of every step, newest first (indexes dropped "
    "`CONCURRENTLY`, functions dropped, the access list columns and the wiki vector "
    "column dropped), then drops `knowledge_adoption`. The database is back to its "
    "original shape; the rows were never touched.",
    "Point it at your existing data",
)
CHANGELOG = Document(
    "wiki",
    "dateparser.txt",
    "Improvements:\n\n"
    '- Indonesian: add old-style month abbreviations, such as "Djan" or "Peb"\n  (#1501)\n'
    "- Korean: parse absolute dates written with 년, 월, 일, 시 and 분 (#1434)\n"
    '- Slovak: parse "pozajtra" (#1430)\n'
    '- Swedish: parse ordinal day suffixes like "24:e" and "1:a" (#1484)\n'
    "- Thai: parse relative dates with spaced ago/in words (#1411)\n"
    "- Vietnamese: parse dates with zero-padded months (#1338, #1563)\n"
    "- Add type hints (#1457)\n",
    "dateparser",
)


def test_a_passage_far_below_grounds_an_answer_only_by_a_sentence_holding_the_words(
    model: LocalEmbedder, tmp_path: Path
) -> None:
    """Asked in a product's own terms, "How do I undo an adoption?" is under 0.3 from
    the passage that answers it, and its closest sentence under 0.4: no passage
    reaches what grounds an answer by meaning alone, and the question was refused
    although the search found its passage first. Its sentence holds the question's
    words: scored by meaning and words, as the answer is chosen, it reaches the
    threshold and grounds the answer. A changelog line on Thai dates is as far from
    "What is the daily life of thai people?" (0.27) and about as close in meaning
    (0.40), but holds one word of the question's four: still refused."""
    undo, thai = "How do I undo an adoption?", "What is the daily life of thai people?"
    (passage,) = chunk_document(UNDO)
    similarity = model.embed_documents([passage.embedded_text])[0] @ model.embed_query(undo)
    assert 0.2 <= float(similarity) < 0.3
    app = create_app(make_settings(tmp_path, embedder="local", synthesizer="extractive"))
    app.state.service.embedder = model
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, [UNDO, CHANGELOG])
        asked = client.post("/v1/knowledge/answer", json={"query": undo}).json()
        unrelated = client.post("/v1/knowledge/answer", json={"query": thai}).json()
    assert unrelated["status"] == "insufficient_context", unrelated
    assert asked["status"] == "success", asked
    assert "Undo runs the recorded SQL of every step" in asked["answer"]
