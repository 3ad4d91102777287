"""What a question asks for beyond its words: the kind of thing that answers it, and the
words it denies; and how the offline answer reads them."""

import pytest

from knowledge_api.synthesis.asked import Kind, absent, agreeing, asked_kind, holders
from knowledge_api.synthesis.extractive import extract, stems
from tests.test_extractive import hit


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("What status does a request without a key get?", Kind.STATUS),
        ("Which error code does a revoked key get?", Kind.NUMBER),
        ("What exit code does the check return?", Kind.NUMBER),
        ("How many jobs does Kestrel run at the same time?", Kind.NUMBER),
        ("How long do cached responses live?", Kind.NUMBER),
        ("What is the longest content a document may have?", Kind.NUMBER),
        ("What lock timeout does each adoption step use?", Kind.NUMBER),
        ("Which table counts the passages per facet value?", Kind.NAME),
        ("Which setting holds the API host?", Kind.NAME),
        ("What is the default API host?", Kind.VALUE),
        ("Which embedder is the default?", Kind.VALUE),
        # no kind: what happens, what something means, how to do something
        ("What happens to an unknown KNOWLEDGE_ variable?", None),
        ("What does a 500 internal_error mean?", None),
        ("How do I set a rate limit per API key?", None),
        ("When does /readyz answer 503?", None),
        ("What is the status of a stopped job?", None),
        ("Which metadata keys of a very long list get a payload index?", None),
    ],
)
def test_the_wh_phrase_says_what_kind_of_thing_answers(question: str, kind: Kind | None) -> None:
    assert asked_kind(question) is kind


@pytest.mark.parametrize(
    ("question", "holding", "lacking"),
    [
        (
            "What status does a request without a key get?",
            ["No key: 401 `unauthorized`.", "A key guess gets `429` once spent."],
            ["Only `status` and `version`, 1200 ms.", "Then call `/v1/keys`."],
        ),
        ("What status does a 503 mean?", ["It answers 200 or 404."], ["It answers 503."]),
        (
            "How many processes does PM2 run by default?",
            ["`KNOWLEDGE_API_INSTANCES` (default 2)", "At most eight run.", "Waits 5s."],
            ["PM2 runs `start.sh` via /v1/run.", "One process at a time."],
        ),
        (
            "Which table counts the passages?",
            ["`siam_vector_facets`: counts"],
            ["The table of counts, 12 of them."],
        ),
        ("What is the default host?", ["`127.0.0.1`", "Port 8000."], ["The host binds."]),
        ("How do I add documents?", [], ["Send `POST /documents`.", "Run it."]),
    ],
)
def test_a_sentence_holds_the_kind_asked_unless_the_question_gives_it(
    question: str, holding: list[str], lacking: list[str]
) -> None:
    assert holders(question, [*holding, *lacking]) == set(holding)


def test_a_thing_asked_absent_counts_only_where_it_is_denied_too() -> None:
    assert absent("What does a request without a key get?") == {"key"}
    assert absent("What does a request with no body get?") == {"body"}
    assert absent("Why is my file not indexed?") == set()
    words = stems("A request with a key gets the report.")
    assert agreeing("A request with a key gets the report.", words, {"key"}) == words - {"key"}
    denying = "A request with no key gets the summary."
    assert {"key", "without"} <= agreeing(denying, stems(denying), {"key"})


def test_the_line_giving_the_asked_kind_outranks_one_repeating_the_question() -> None:
    """Asked what status a session gets, a line on a `status` field holds every word of
    the question and no status; the line with the status holds three of its four."""
    field = hit("An expired session gets only the `status` field of its report.")
    status = hit("Expired sessions get 419 `session_expired`, and the client logs in again.")
    synthesis = extract("What status does an expired session get?", [field, status])
    assert synthesis.citations == [2]


def test_where_no_sentence_holds_the_asked_kind_the_answer_is_unchanged() -> None:
    """Plain prose writes its values without code or digits: no line is scaled down, and
    the one that answers is not refused for it."""
    prose = hit("The default mode of the exporter is strict, which stops at the first error.")
    synthesis = extract("What is the default mode of the exporter tool?", [prose])
    assert synthesis.citations == [1]


def test_a_question_denying_a_word_is_answered_by_the_line_that_denies_it() -> None:
    """Asked what a request without a key gets, the line on requests with a key holds
    as many of the question's words as the one on requests with none."""
    with_key = hit("A request with a key gets the full report of its collection.")
    without = hit("A request with no key gets only the public summary.")
    synthesis = extract("What does a request without a key get?", [with_key, without])
    assert synthesis.text == "A request with no key gets only the public summary. [2]"
