import re

from knowledge_api.models import Chunk, SearchHit
from knowledge_api.synthesis.extractive import NO_RESULTS, extract


def hit(content: str, similarity: float = 0.5) -> SearchHit:
    chunk = Chunk(id="c", document_id="d", chunk_index=0, content=content)
    return SearchHit(chunk, "d", "wiki", "s", {}, 0.1, similarity)


HITS = [
    hit("Test cases live in the Test Manager. Press New Case to create a test case."),
    hit("Every test case needs a title. Steps are optional for drafts."),
    hit("Unrelated text about release dates."),
]


def test_every_sentence_is_quoted_from_the_result_it_cites() -> None:
    synthesis = extract("How do I create a test case and what does it need?", HITS)
    parts = re.findall(r"(.+?) \[(\d+)\]", synthesis.text)
    assert parts
    for sentence, n in parts:
        assert sentence.strip() in HITS[int(n) - 1].chunk.content
    assert synthesis.citations == sorted({int(n) for _, n in parts})
    assert 3 not in synthesis.citations


def test_later_sentences_must_add_query_terms() -> None:
    synthesis = extract("create test case title", HITS)
    assert "Press New Case to create a test case. [1]" in synthesis.text
    assert "Every test case needs a title. [2]" in synthesis.text
    assert len(re.findall(r"\[\d+\]", synthesis.text)) == 2


def test_no_results_and_no_overlap() -> None:
    assert extract("anything", []).text == NO_RESULTS
    fallback = extract("zebra", HITS)
    assert fallback.text == "Closest match: Test cases live in the Test Manager. [1]"
    assert fallback.citations == [1]


def test_long_sentences_are_shortened_at_a_word() -> None:
    long = "Create " + "word " * 200 + "end."
    text = extract("create", [hit(long)]).text
    assert text.endswith("… [1]") and len(text) < 340
