"""The offline answer chosen with the real all-MiniLM-L6-v2 model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from knowledge_api.embeddings.local import LocalEmbedder
from knowledge_api.errors import EmbeddingError
from knowledge_api.synthesis.extractive import NO_RESULTS, ExtractiveSynthesizer
from tests.test_extractive import hit

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def synthesizer() -> ExtractiveSynthesizer:
    model = LocalEmbedder(precision="auto")
    model.load()

    async def embed(texts: Sequence[str]) -> np.ndarray:
        return model.embed_documents(texts)

    link = ExtractiveSynthesizer()
    link.use_embedder(embed)
    return link


async def test_the_answering_sentence_beats_a_keyword_stuffed_one(
    synthesizer: ExtractiveSynthesizer,
) -> None:
    stuffed = hit(
        "Login timeout: the login page timeout and the login session timeout. Edit this page",
        0.7,
        "stuffed",
    )
    answering = hit(
        "Copyright 2025 Example Corp.\n\n"
        "The login page times out after 30 seconds when the identity provider is slow.",
        0.5,
        "answering",
    )
    synthesis = await synthesizer.synthesize("How long is the login timeout?", [stuffed, answering])
    assert synthesis.text == (
        "The login page times out after 30 seconds when the identity provider is slow. [2]"
    )
    assert synthesis.citations == [2]


async def test_an_unrelated_question_gets_no_quote(synthesizer: ExtractiveSynthesizer) -> None:
    passages = [hit("Asset ingestion accepts WAV and FLAC audio files. MP3 becomes FLAC.")]
    synthesis = await synthesizer.synthesize("Who won the football world cup in 1998?", passages)
    assert synthesis.text == NO_RESULTS and synthesis.citations == []


async def test_a_failing_embedder_falls_back_to_words() -> None:
    async def broken(texts: Sequence[str]) -> np.ndarray:
        raise EmbeddingError("model gone")

    link = ExtractiveSynthesizer()
    link.use_embedder(broken)
    synthesis = await link.synthesize(
        "which audio files are accepted", [hit("Asset ingestion accepts WAV and FLAC audio files.")]
    )
    assert synthesis.text == "Asset ingestion accepts WAV and FLAC audio files. [1]"


async def test_support_reads_only_the_passages_holding_the_share_of_words_asked() -> None:
    """A passage holding less than the share of the question's words asked for is not
    embedded and supports nothing; one holding it is read by meaning and words, the
    words of a snake-case name counted by its parts."""
    embedded: list[str] = []

    async def embed(texts: Sequence[str]) -> np.ndarray:
        embedded.extend(texts[1:])
        return np.ones((len(texts), 4)) / 2

    link = ExtractiveSynthesizer()
    link.use_embedder(embed)
    question = "What lock timeout does each adoption step use?"
    held = hit("Each adoption step runs with `lock_timeout = 5s` and fails instead of waiting.")
    other = hit("A sentence about adoption that says nothing more of the steps in it.")
    support = await link.support(question, [held, other], words=0.5)
    assert support is not None
    assert support[0].meaning == pytest.approx(1.0) and support[0].answers > 0.4
    assert support[1].meaning == support[1].answers == 0.0
    assert embedded and all("lock_timeout" in text for text in embedded)
    everything = await link.support(question, [held, other])
    assert everything is not None and everything[1].meaning == pytest.approx(1.0)


async def test_an_answer_written_after_its_support_was_read_calls_the_model_no_more() -> None:
    """The question's vector is kept with its sentences': the answer read after their
    support (as /answer reads passages past the limit) embeds nothing again."""
    calls: list[list[str]] = []

    async def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.ones((len(texts), 4)) / 2

    link = ExtractiveSynthesizer()
    link.use_embedder(embed)
    question = "What lock timeout does each adoption step use?"
    passages = [hit("Each adoption step runs with `lock_timeout = 5s` and fails instead.")]
    assert await link.support(question, passages) is not None
    synthesis = await link.synthesize(question, passages)
    assert synthesis.citations == [1]
    assert len(calls) == 1 and calls[0][0] == question
