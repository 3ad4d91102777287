"""Citation repair and the confidence of an answer, on crafted cases."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from knowledge_api import grounding
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.grounding import CitationFilter, Claim, Confidence
from tests.test_extractive import hit

EMBEDDER = FakeEmbedder()


async def embed(texts: Sequence[str]) -> np.ndarray:
    return EMBEDDER.embed_documents(texts)


def streamed(pieces: Sequence[str], passages: int) -> tuple[str, CitationFilter]:
    citations = CitationFilter(passages)
    text = "".join(citations.feed(piece) for piece in pieces) + citations.finish()
    return text, citations


@pytest.mark.parametrize(
    ("pieces", "text", "cited", "removed"),
    [
        (["Plain text."], "Plain text.", set(), []),
        (["A [1]. B [2]."], "A [1]. B [2].", {1, 2}, []),
        (["A [", "1", "]. B [", "3]."], "A [1]. B.", {1}, [3]),
        (["A [1, 2]", " and [2,5]."], "A [1][2] and [2].", {1, 2}, [5]),
        (["A [0] [1]."], "A [1].", {1}, [0]),
        (["See [note] and [x1]."], "See [note] and [x1].", set(), []),
        (["Cut off [1"], "Cut off", set(), []),
        (["A", " ", " ", "[4]", "."], "A.", set(), [4]),
    ],
)
def test_citation_filter(pieces: list[str], text: str, cited: set[int], removed: list[int]) -> None:
    out, citations = streamed(pieces, passages=2)
    assert out == text
    assert citations.cited == cited and citations.removed == removed


def test_citation_filter_never_holds_back_more_than_a_citation() -> None:
    citations = CitationFilter(3)
    assert citations.feed("Open bracket [ but a long aside follows") == (
        "Open bracket [ but a long aside follows"
    )
    assert citations.feed("Ends with a space ") == "Ends with a space"
    assert citations.feed("[2] x") == " [2] x"


def test_claims_keep_their_citations() -> None:
    found = grounding.claims("WAV is accepted [1]. FLAC too. [2] MP3 is converted [1][2]. [3]")
    assert found == [
        Claim("WAV is accepted.", (1,)),
        Claim("FLAC too.", (2,)),
        Claim("MP3 is converted.", (1, 2, 3)),
    ]


def test_a_sentence_ending_in_several_marks_keeps_its_citation() -> None:
    """An extractive answer quotes "... two airports..." as it reads: its [1] is its own."""
    found = grounding.claims("Paris has two airports... [1] Is it far?! [2]")
    assert found == [Claim("Paris has two airports...", (1,)), Claim("Is it far?!", (2,))]


PASSAGES = [
    hit("Asset ingestion accepts WAV and FLAC audio files. MP3 uploads are converted.", 0.9),
    hit("The release of version 4.2 moves to Friday because of the migration.", 0.6),
]


def test_confidence_weights_calibration_and_levels() -> None:
    """overall = sigmoid(a + b x the contract's weighted sum), (a, b) = CALIBRATION."""
    a, b = grounding.CALIBRATION
    spec_example = Confidence(0.89, 0.85, 0.92, 0.78)
    assert spec_example.raw == pytest.approx(0.871)
    assert spec_example.overall == pytest.approx(1 / (1 + math.exp(-(a + b * 0.871))))
    assert spec_example.overall == pytest.approx(0.7715, abs=1e-4)
    assert spec_example.level == "medium"
    perfect = Confidence(1.0, 1.0, 1.0, 1.0)
    assert spec_example.overall < perfect.overall < 0.9  # no answer on msmarco earned high
    assert Confidence(0.4, 0.3, 0.3, 0.3).level == "low"  # raw 0.335 -> 0.56
    assert Confidence(0.45, 0.0, 0.0, 0.0).overall == 0.0  # nothing cited: no answer
    assert Confidence(0.45, 0.0, 0.0, 0.0).level == "low"
    view = spec_example.view()
    assert set(view) == {
        "retrieval_quality",
        "coverage_score",
        "entailment_score",
        "lexical_overlap",
        "overall",
        "level",
        "entailment_method",
    }


def test_retrieval_quality_is_the_best_score() -> None:
    assert grounding.retrieval_quality(PASSAGES) == 0.9
    assert grounding.retrieval_quality([]) == 0.0


def test_coverage_counts_query_terms_found_in_the_cited_passages() -> None:
    cited = PASSAGES[:1]
    assert grounding.coverage("Which audio formats does ingestion accept?", cited) == 0.75
    assert grounding.coverage("audio ingestion", cited) == 1.0
    assert grounding.coverage("release date of version 4.2", cited) == 0.0
    assert grounding.coverage("release date of version 4.2", PASSAGES) == 0.8  # not: date
    assert grounding.coverage("what is it?", PASSAGES) == 0.0


def test_lexical_overlap_ignores_citation_markers() -> None:
    cited = PASSAGES[:1]
    assert grounding.lexical_overlap("Ingestion accepts WAV and FLAC [1].", cited) == 1.0
    half = grounding.lexical_overlap("WAV files sound wonderful [1].", cited)
    assert half == 0.5  # wav, files found; sound, wonderful not


async def test_entailment_separates_supported_from_unsupported_claims() -> None:
    supported = grounding.claims("Asset ingestion accepts WAV and FLAC audio files [1].")
    invented = grounding.claims("Version 4.2 ships with a dark theme and new icons [2].")
    quoted, method = await grounding.entailment(supported, PASSAGES, embed)
    assert quoted == pytest.approx(1.0) and method == "embedding-similarity"
    made_up, _ = await grounding.entailment(invented, PASSAGES, embed)
    assert made_up < 0.5
    mixed, _ = await grounding.entailment(supported + invented, PASSAGES, embed)
    assert mixed == pytest.approx((quoted + made_up) / 2)


async def test_a_claim_is_checked_against_the_passages_it_cites() -> None:
    right = grounding.claims("Asset ingestion accepts WAV and FLAC audio files [1].")
    wrong = grounding.claims("Asset ingestion accepts WAV and FLAC audio files [2].")
    assert (await grounding.entailment(right, PASSAGES, embed))[0] == pytest.approx(1.0)
    assert (await grounding.entailment(wrong, PASSAGES, embed))[0] < 0.5


async def test_without_an_embedder_support_is_term_overlap() -> None:
    claims = grounding.claims("Ingestion accepts WAV [1]. Icons are new [1].")
    score, method = await grounding.entailment(claims, PASSAGES, None)
    assert method == "term-overlap"
    assert score == pytest.approx((1.0 + 0.0) / 2)


async def test_no_citation_no_entailment() -> None:
    assert await grounding.entailment(grounding.claims("No passage cited."), PASSAGES, embed) == (
        0.0,
        "none",
    )
