import re

import pytest

from knowledge_api.models import Chunk, SearchHit
from knowledge_api.synthesis.extractive import (
    NO_RESULTS,
    Candidate,
    ExtractiveSynthesizer,
    compose,
    extract,
    sentences_of,
)
from knowledge_api.synthesis.sentences import candidate_sentences


def hit(content: str, similarity: float = 0.5, chunk_id: str = "c") -> SearchHit:
    chunk = Chunk(id=chunk_id, document_id="d", chunk_index=0, content=content)
    return SearchHit(chunk, "d", "wiki", "s", {}, 0.1, similarity)


def answer(question: str, hits: list[SearchHit]) -> tuple[str, list[int]]:
    """What the extractive answer to `question` from `hits` says, and what it cites."""
    synthesis = extract(question, hits)
    return synthesis.text, synthesis.citations


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


def test_no_results_and_no_answering_sentence_say_so_and_cite_nothing() -> None:
    assert extract("anything", []).text == NO_RESULTS
    assert answer("zebra migration season", HITS) == (NO_RESULTS, [])


def test_a_sentence_mentioning_one_word_of_the_question_is_not_an_answer() -> None:
    """Below the bar: a weak quote is not passed off as an answer."""
    weak = extract(
        "When does the zebra migration season start in Kenya?",
        [*HITS, hit("Kenya is a country in East Africa with many national parks.")],
    )
    assert weak.text == NO_RESULTS


def test_boilerplate_is_never_quoted() -> None:
    page = (
        "<!-- generated from docs/install.rst, do not edit -->\n"
        "# Installing the package\n\n"
        "« Previous | Next »\n\n"
        "Table of contents\n\n"
        "Edit this page\n\n"
        "$ pip install package\n"
        "install(package, upgrade=True)\n\n"
        "Install the package with pip from the index.\n\n"
        "Copyright 2024 Example Corp. All rights reserved. Install package."
    )
    assert candidate_sentences(page) == ["Install the package with pip from the index."]
    synthesis = extract("install package", [hit(page)])
    assert synthesis.text == "Install the package with pip from the index. [1]"


OFFERING_MORE = "For more control over retries, pass a RetryOptions object to the client."

# A page, and what of it may be quoted: its sentences in reading order.
PAGES = [
    pytest.param(
        "Getting Started Guide\n\nSee also.\n\nRun it once a day.",
        ["Run it once a day."],
        id="fragments_and_headings_alone_are_skipped",
    ),
    # a `~~~` underline is a heading's, not a code fence swallowing the section
    pytest.param(
        "Work Factor\n~~~~~~~~~~~\n"
        "One of the features is an adjustable logarithmic work factor.\n\n"
        "Maximum Length\n~~~~~~~~~~~~~~\n"
        "Passwords are cut at 72 characters before hashing.\n",
        [
            "One of the features is an adjustable logarithmic work factor.",
            "Passwords are cut at 72 characters before hashing.",
        ],
        id="a_restructuredtext_section_is_read_under_its_title",
    ),
    pytest.param(
        "The tool was compared by [Bevendorff et al. 2023](https://example.org/paper.pdf) "
        "and came first.\n\n"
        "- Barbaresi, A. [Trafilatura: A Web Scraping Library and Command-Line Tool for Text "
        "Discovery and Extraction](https://example.org/acl), Proceedings of ACL 2021, p. 122-131.",
        ["The tool was compared by Bevendorff et al. 2023 and came first."],
        id="links_read_as_their_text_and_references_are_not_sentences",
    ),
    pytest.param(
        "The following textbooks and tutorials are great resources for learning hashing.\n\n"
        "For more information, see the hashing guide.\n\n"
        "Please refer to the documentation for the full list of hash functions.\n\n"
        "The module implements MurmurHash3, a family of fast non-cryptographic hashes.",
        ["The module implements MurmurHash3, a family of fast non-cryptographic hashes."],
        id="a_sentence_sending_the_reader_elsewhere_is_not_an_answer",
    ),
    pytest.param(
        OFFERING_MORE,
        [OFFERING_MORE],
        id="a_sentence_offering_more_of_something_can_still_answer",
    ),
    # 'from the ...', 'For example, ...:' and 'If you ..., use:' are prose; the statements
    # they look like are dropped
    pytest.param(
        "The module offers hasher objects with interfaces like those in hashlib\n"
        "from the standard library, although they are still experimental.\n\n"
        "For example, to hash a file in chunks, use the update method:\n\n"
        "from mmh3 import mmh3_32\n"
        "for chunk in chunks:\n"
        "if total == 0:\n"
        "with open(path, 'rb') as f:\n",
        [
            "The module offers hasher objects with interfaces like those in hashlib\n"
            "from the standard library, although they are still experimental.",
            "For example, to hash a file in chunks, use the update method:",
        ],
        id="prose_lines_starting_like_python_are_kept",
    ),
    pytest.param(
        "For the zone name alone, use `get_localzone_name()`:\n\n    >>> get_localzone_name()\n",
        ["For the zone name alone, use `get_localzone_name()`:"],
        id="code_the_sentence_already_names_is_not_repeated",
    ),
    pytest.param(
        "`KNOWLEDGE_FUSION=rrf` fuses by reciprocal rank instead of by score.\n\n"
        "Restart Falcon with `systemctl restart falcon`.\n\n"
        "`x = load(path)`",
        [
            "`KNOWLEDGE_FUSION=rrf` fuses by reciprocal rank instead of by score.",
            "Restart Falcon with `systemctl restart falcon`.",
        ],
        id="prose_holding_inline_code_is_an_answer_not_code",
    ),
    pytest.param(
        "- `threshold` (number, default 0.2): from 0 to 1. The lowest similarity a result "
        "may have.\n"
        "- **stdio**: one client on stdin. Use an `https://` URL with a key.\n",
        [
            "`threshold` (number, default 0.2): from 0 to 1. The lowest similarity a result "
            "may have.",
            "stdio: one client on stdin. Use an `https://` URL with a key.",
        ],
        id="a_short_list_item_is_one_sentence_without_its_marker",
    ),
]


@pytest.mark.parametrize(("page", "sentences"), PAGES)
def test_what_of_a_page_may_be_quoted(page: str, sentences: list[str]) -> None:
    assert candidate_sentences(page) == sentences


def test_a_sentence_repeating_the_question_loses_to_one_that_answers_it() -> None:
    stuffed = hit("Login timeout: login page timeout, login timeout page, timeout login.")
    answering = hit("The login page times out after 30 seconds when SSO is slow.", 0.4)
    synthesis = extract("login page timeout", [stuffed, answering])
    assert synthesis.text == "The login page times out after 30 seconds when SSO is slow. [2]"
    assert synthesis.citations == [2]


def test_answers_keep_reading_order_and_their_numbers() -> None:
    """The best sentences are chosen by score, then quoted in the order they are read."""
    first = hit("Audio ingestion accepts WAV files from any field recorder or studio desk.")
    second = hit(
        "Uploads are checked first. "
        "Audio ingestion accepts FLAC files from mixers and field recorders."
    )
    synthesis = extract("Which audio files does audio ingestion accept?", [first, second])
    assert synthesis.text == (
        "Audio ingestion accepts WAV files from any field recorder or studio desk. [1] "
        "Audio ingestion accepts FLAC files from mixers and field recorders. [2]"
    )
    assert synthesis.citations == [1, 2]


def test_chosen_sentences_are_quoted_in_reading_order_not_score_order() -> None:
    scored = [
        Candidate(0.90, 2, 0, "Best of the second passage."),
        Candidate(0.86, 1, 3, "Fourth sentence of the first."),
        Candidate(0.84, 1, 1, "Second sentence of the first."),
        Candidate(0.70, 1, 0, "Too far below the best."),
    ]
    assert compose(scored, by_meaning=True).text == (
        "Second sentence of the first. [1] Fourth sentence of the first. [1] "
        "Best of the second passage. [2]"
    )


def ranked(*sentences: tuple[int, int, str]) -> list[Candidate]:
    """Candidates (result, place in it, text) best first, each close to the one before:
    all within KEEP_WITHIN of the best."""
    return [Candidate(0.9 - 0.01 * rank, *sentence) for rank, sentence in enumerate(sentences)]


def test_a_sentence_that_refers_back_is_quoted_only_after_the_one_it_leans_on() -> None:
    scored = ranked(
        (1, 2, "`WORKERS` (default 2): how many processes run."),
        (2, 0, "It starts the app under PM2 on a free port."),
        (3, 5, "Then it reports the refused connections."),
        (3, 4, "The check runs `pm2 reload` in a loop."),
        (1, 3, "So two processes answer at once."),
    )
    opens_its_passage = [scored[0], scored[1], scored[4]]
    assert compose(opens_its_passage, by_meaning=True).text == (
        "`WORKERS` (default 2): how many processes run. [1] So two processes answer at once. [1]"
    )
    assert compose(scored, by_meaning=True).text == (
        "`WORKERS` (default 2): how many processes run. [1] "
        "The check runs `pm2 reload` in a loop. [3] "
        "Then it reports the refused connections. [3]"
    )


def test_the_best_sentence_is_quoted_whatever_it_opens_with() -> None:
    scored = [
        Candidate(0.90, 1, 1, "It answers 503 when the store is unavailable."),
        Candidate(0.85, 1, 0, "`/health` answers 200 while the store works."),
    ]
    assert compose(scored[:1], by_meaning=True).text == (
        "It answers 503 when the store is unavailable. [1]"
    )
    assert compose(scored, by_meaning=True).text == (
        "`/health` answers 200 while the store works. [1] "
        "It answers 503 when the store is unavailable. [1]"
    )


def test_the_top_ranked_passage_wins_a_near_tie() -> None:
    same = "Backups run every night at two and are kept for thirty days."
    synthesis = extract("How long are backups kept?", [hit(same), hit(same + " ")])
    assert synthesis.text == f"{same} [1]" and synthesis.citations == [1]


def test_a_sentence_is_read_under_its_section_or_its_documents_title() -> None:
    """Asked about a query's limit, the limit of the section about queries is the
    answer, not the same words under another heading; a passage before any section is
    read under its document's title."""
    answer = Chunk("a", "d", 0, "The limit defaults to 3 passages per answer.", section="Answers")
    query = "The limit defaults to 5 results per page."
    for under in (
        Chunk("q", "d", 0, query, section="Query request"),
        Chunk("q", "d", 0, query, title="Query request"),
    ):
        hits = [SearchHit(c, "d", "wiki", "s", {}, 0.1, 0.5) for c in (answer, under)]
        assert extract("What is the default limit of a query?", hits).text == f"{query} [2]"


def test_long_sentences_are_shortened_at_a_word() -> None:
    long = "Create the report " + "from every table in the warehouse " * 20 + "at the end."
    text = extract("create report", [hit(long)]).text
    assert text.endswith("… [1]") and len(text) < 340


def test_a_sentence_introducing_code_is_quoted_with_its_first_call() -> None:
    page = (
        "Limit the threads of the BLAS libraries in one block of your program:\n\n"
        "```python\n"
        "from threadpoolctl import threadpool_limits\n"
        "# one thread for BLAS\n"
        "with threadpool_limits(limits=1, user_api='blas'):\n"
        "    compute()\n"
        "```\n"
    )
    synthesis = extract("How do I limit the threads of BLAS?", [hit(page)])
    assert synthesis.text == (
        "Limit the threads of the BLAS libraries in one block of your program: "
        "`with threadpool_limits(limits=1, user_api='blas'):` [1]"
    )


def test_a_clearly_better_sentence_further_down_is_not_outranked_by_position() -> None:
    """Rank only breaks near ties: the fifth result covers one more of the question's
    ten words than the first (0.6 against 0.5), and four places must not undo that."""
    query = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
    first = hit(
        "Alpha bravo charlie delta echo appear beside several unrelated nouns, verbs, adjectives."
    )
    filler = [
        hit(f"Zulu yankee xray whiskey number {n} carries nothing relevant.") for n in range(3)
    ]
    fifth = hit(
        "Alpha bravo charlie delta echo foxtrot appear beside several unrelated nouns, "
        "verbs, adjectives."
    )
    synthesis = extract(query, [first, *filler, fifth])
    assert 5 in synthesis.citations


def test_the_sentence_completing_the_question_is_not_dropped_for_repeating_it() -> None:
    """The command repeats "restart" and "Falcon": it still answers."""
    notes = hit(
        "Restart Falcon with `systemctl restart falcon`. "
        "Its health check is `GET /falcon/ping`, which answers 200 when the queue is up."
    )
    synthesis = extract("How do I restart Falcon?", [notes])
    assert synthesis.text.startswith("Restart Falcon with `systemctl restart falcon`. [1]")
    replaced = extract(
        "What happens when I post the same source_type and source_id again?",
        [hit("Posting the same `source_type` and `source_id` again replaces that document.")],
    )
    assert replaced.citations == [1]


def test_a_passage_about_another_entity_is_not_quoted_as_the_asked_ones() -> None:
    osprey = hit(
        "Roll back an Osprey wave with `osprey rollback --wave N`, which reinstalls the "
        "previous release on every server of the wave."
    )
    assert answer("How do I roll back Kestrel?", [osprey]) == (NO_RESULTS, [])
    assert extract("How do I roll back an Osprey wave?", [osprey]).citations == [1]


def test_a_sentence_that_only_denies_what_is_asked_does_not_answer_it() -> None:
    """ "without a restart" names a restart and says nothing of how to do one."""
    kestrel = hit(
        "Jobs are declared in `kestrel.yaml`, one entry per job with its cron expression. "
        "Run `kestrel apply` to load a changed file without a restart."
    )
    load = extract("How do I load a changed Kestrel file?", [kestrel])
    assert load.text == "Run `kestrel apply` to load a changed file without a restart. [1]"
    assert answer("How do I restart Kestrel?", [kestrel]) == (NO_RESULTS, [])


def test_the_line_that_defines_the_named_setting_is_quoted() -> None:
    """In a list of settings the asked one is named by many lines; the one that defines it
    (its name before the colon) answers, although others hold as many of the words."""
    mentions = [
        hit(
            f"`KNOWLEDGE_{name}` (default empty): {what} besides `localhost` and "
            "`KNOWLEDGE_API_HOST`."
        )
        for name, what in (
            ("ALLOWED_HOSTS", "host names every route answers to"),
            ("MCP_ALLOWED_ORIGINS", "browser origins `/mcp` accepts from hosts"),
            ("CORS_ORIGINS", "origins a browser page may call from hosts"),
            ("TRUSTED_PROXIES", "proxies whose forwarded host headers are read"),
        )
    ]
    defining = hit("`KNOWLEDGE_API_HOST` (default `127.0.0.1`): the interface the server binds to.")
    synthesis = extract("What is the default API host?", [*mentions, defining])
    assert "`KNOWLEDGE_API_HOST` (default `127.0.0.1`): the interface" in synthesis.text
    assert 5 in synthesis.citations


def test_a_passage_read_again_is_not_split_again() -> None:
    """Whether an answer's passages hold a quotable sentence, then the answer: each
    passage is cut into sentences once."""
    sentences_of.cache_clear()
    question = "How do I create a test case?"
    assert ExtractiveSynthesizer().quotable(question, HITS)
    extract(question, HITS)
    assert sentences_of.cache_info().misses == len({h.chunk.content for h in HITS})
    assert sentences_of(HITS[0].chunk.content) == tuple(candidate_sentences(HITS[0].chunk.content))
