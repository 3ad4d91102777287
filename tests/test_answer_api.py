"""POST /v1/knowledge/answer: the AgentResponse contract over HTTP, real SQLite store."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.errors import BackendConnectionError
from knowledge_api.models import SearchHit, SentenceSupport
from knowledge_api.service.retrieval import Retrieval
from knowledge_api.settings import Settings
from knowledge_api.synthesis.extractive import NO_RESULTS, ExtractiveSynthesizer
from knowledge_api.usecases import answers
from tests.conftest import corpus, ingested_client, make_settings
from tests.providers import GEMINI_GENERATE, gemini_answer, llm_settings
from tests.test_extractive import hit

ANSWER = "/v1/knowledge/answer"
QUESTION = "Which audio formats does asset ingestion accept?"


def serve(settings: Settings) -> Iterator[TestClient]:
    yield from ingested_client(settings, corpus())


@pytest.fixture
def llm_client(tmp_path: Path, mock: respx.MockRouter) -> Iterator[TestClient]:
    yield from serve(llm_settings(tmp_path))


def answer(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(ANSWER, json={"query": QUESTION, **body})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def assert_grounded(body: dict[str, Any]) -> None:
    """The contract's rules: every [n] is a source, every source is cited."""
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", body["answer"])}
    assert cited and cited == {s["citation_index"] for s in body["sources"]}
    confidence = body["confidence"]
    factors = ("retrieval_quality", "coverage_score", "entailment_score", "lexical_overlap")
    assert all(0.0 <= confidence[name] <= 1.0 for name in (*factors, "overall"))


def test_a_grounded_answer_has_every_field_of_the_contract(client: TestClient) -> None:
    body = answer(client, threshold=0.3)
    assert set(body) == {
        "query_id",
        "status",
        "answer",
        "confidence",
        "sources",
        "citations",
        "metadata",
        "error_message",
    }
    assert uuid.UUID(body["query_id"]).version == 4
    assert body["status"] == "success" and body["error_message"] is None
    assert body["answer"] == "Asset ingestion accepts WAV and FLAC audio files. [1]"
    assert_grounded(body)
    [source] = body["sources"]
    assert set(source) == {
        "chunk_id",
        "citation_index",
        "relevance_score",
        "excerpt",
        "collection",
        "metadata",
    }
    assert source["collection"] == "default"
    assert source["metadata"]["source_id"] == "kb-7"
    assert source["metadata"]["title"] == "Supported audio formats"
    assert source["excerpt"].startswith("Asset ingestion accepts WAV and FLAC")
    assert 0.3 <= source["relevance_score"] <= 1.0
    [citation] = body["citations"]  # the quoted sentence, where it reads
    quote = "Asset ingestion accepts WAV and FLAC audio files."
    assert citation["n"] == 1 and citation["chunk_id"] == source["chunk_id"]
    assert citation["quote"] == quote
    assert citation["answer"] == {"start": 0, "end": len(body["answer"])}
    assert citation["document_id"] == source["metadata"]["document_id"]
    assert citation["passage"] == {"start": 0, "end": len(quote)}
    confidence = body["confidence"]
    assert confidence["retrieval_quality"] == source["relevance_score"]
    assert confidence["coverage_score"] == 1.0  # 'formats' is in the passage's title
    assert confidence["entailment_score"] == 1.0  # a quoted sentence supports itself
    assert confidence["entailment_method"] == "embedding-similarity"
    metadata = body["metadata"]
    assert metadata["model"] == "extractive" and metadata["tokens_used"] == 0
    assert metadata["total_time_ms"] >= metadata["retrieval_time_ms"] >= 0
    assert metadata["generation_time_ms"] >= 0 and metadata["timestamp"].endswith("Z")
    assert metadata["cache_hit"] is False


def test_no_passage_above_the_threshold_is_insufficient_context(client: TestClient) -> None:
    body = answer(client)  # the default threshold: auto, 0.7 for the fake embedder
    assert body["status"] == "insufficient_context"
    assert body["answer"] is None and body["sources"] == []
    assert "below the 0.7 threshold" in body["error_message"]
    best = body["confidence"]["retrieval_quality"]
    assert 0 < best < 0.7 and f"(best: {best:.2f})" in body["error_message"]
    assert body["confidence"]["level"] == "low"
    assert body["confidence"]["overall"] == 0.0  # no answer: no chance of being right
    assert body["metadata"]["generation_time_ms"] == 0.0


def test_the_default_threshold_is_a_setting(tmp_path: Path) -> None:
    for client in serve(make_settings(tmp_path, answer_threshold="0.3")):
        assert answer(client)["status"] == "success"


@pytest.mark.parametrize(
    ("embedder", "configured", "threshold"),
    [("fake", "auto", 0.7), ("local", "auto", 0.4), ("local", "0.55", 0.55)],
)
def test_auto_takes_the_embedders_threshold(
    tmp_path: Path, embedder: str, configured: str, threshold: float
) -> None:
    settings = make_settings(tmp_path, embedder=embedder, answer_threshold=configured)
    assert build_service(settings).answer_threshold == threshold


def test_nothing_found_says_so(client: TestClient) -> None:
    body = answer(client, filters={"app_under_test": "no-such-app"})
    assert body["status"] == "insufficient_context"
    assert "no passage matches" in body["error_message"]


def test_repeat_is_a_cache_hit_with_the_cached_answers_query_id(client: TestClient) -> None:
    first, again = answer(client, threshold=0.3), answer(client, threshold=0.3)
    assert again["metadata"]["cache_hit"] is True and again["answer"] == first["answer"]
    assert again["query_id"] == first["query_id"]  # a rating of either is of one answer
    assert answer(client, threshold=0.31)["query_id"] != first["query_id"]
    assert again["metadata"]["retrieval_time_ms"] == again["metadata"]["generation_time_ms"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": " \t"}, "query"),
        ({"query": "x" * 501}, "query"),
        ({"query": ["a"]}, "query"),
        ({"query": "ok", "threshold": 1.2}, "threshold"),
        ({"query": "ok", "limit": 0}, "limit"),
        ({"query": "ok", "limit": 21}, "limit"),
        ({"query": "ok", "sources": ["slack"]}, "sources"),
        ({"query": "ok", "stream": "yes"}, "stream"),
        ({"query": "ok", "top_k": 3}, "top_k"),
    ],
)
def test_bad_input_is_a_400_naming_field_and_rule(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    response = client.post(ANSWER, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["details"]["field"] == field and error["details"]["rule"]


def test_a_500_character_query_is_accepted(client: TestClient) -> None:
    assert answer(client, query="audio " * 83 + "fl")["status"] in (
        "success",
        "insufficient_context",
    )


def test_an_llm_answer_is_grounded_and_attributed(
    llm_client: TestClient, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(
            ["Asset ingestion accepts WAV and FLAC files [1]", ", like the 2019 guide says [4]."],
            tokens=120,
        )
    )
    body = answer(llm_client, threshold=0.2)
    assert body["status"] == "success"
    assert (
        body["answer"]
        == "Asset ingestion accepts WAV and FLAC files [1], like the 2019 guide says."
    )
    assert_grounded(body)
    assert [s["citation_index"] for s in body["sources"]] == [1]
    metadata = body["metadata"]
    assert metadata["model"] == "gemini-2.0-flash" and metadata["temperature"] == 0.3
    assert metadata["tokens_used"] == 120
    assert metadata["synthesizer"]["citations_removed"] == [4]
    assert metadata["synthesizer"]["skipped"] == []
    assert body["confidence"]["lexical_overlap"] < 1.0  # "2019", "guide", "like" are invented


def test_an_llm_answer_citing_nothing_is_not_passed_off_as_grounded(
    llm_client: TestClient, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(["The context does not say which formats are accepted."])
    )
    body = answer(llm_client, threshold=0.2)
    assert body["status"] == "insufficient_context"
    assert body["answer"] is None and body["sources"] == []
    assert "gemini-2.0-flash cited none of them" in body["error_message"]
    assert body["metadata"]["model"] == "gemini-2.0-flash"


def test_query_synthesis_uses_the_same_chain_and_citations(
    llm_client: TestClient, mock: respx.MockRouter
) -> None:
    mock.post(url__regex=GEMINI_GENERATE).mock(
        side_effect=[gemini_answer(["WAV and FLAC [1] [8]."]) for _ in range(2)]
    )
    grounded = answer(llm_client, threshold=0.2)
    query = llm_client.post(
        "/v1/knowledge/query", json={"query": QUESTION, "threshold": 0.2}
    ).json()
    assert query["synthesis"] == grounded["answer"] == "WAV and FLAC [1]."
    assert query["synthesizer"]["citations_removed"] == [8]
    assert query["results"][0]["id"] == grounded["sources"][0]["chunk_id"]


async def store_lost_while_grounding(*args: Any) -> Any:
    raise BackendConnectionError("the store went away")


def stream_events(client: TestClient, path: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = "".join(response.iter_text())
    events = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_a_streamed_answer_ends_with_the_whole_response(client: TestClient) -> None:
    events = stream_events(client, ANSWER, {"query": QUESTION, "threshold": 0.3})
    assert [name for name, _ in events] == ["results", "answer", "done"]
    done = events[-1][1]
    assert done["status"] == "success" and done["answer"] == events[1][1]["delta"]
    assert done["sources"][0]["chunk_id"] == events[0][1]["results"][0]["id"]


def test_a_failure_mid_stream_is_an_answer_of_status_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answers, "ground", store_lost_while_grounding)
    settings = make_settings(tmp_path)
    app = create_app(settings)
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())  # type: ignore[union-attr]
        events = stream_events(client, ANSWER, {"query": QUESTION, "threshold": 0.3})
        response = client.post(ANSWER, json={"query": QUESTION, "threshold": 0.3})
    assert [name for name, _ in events] == ["results", "answer", "done"]
    done = events[-1][1]
    assert done["status"] == "error" and done["answer"] is None
    assert done["error_message"] == "the store went away"
    assert response.status_code == 503  # without a stream: the status and the error shape
    assert response.json()["error"]["type"] == "store_unavailable"


def test_a_citation_beyond_64_bits_is_removed_and_the_answer_still_serves(
    llm_client: TestClient, mock: respx.MockRouter
) -> None:
    """A reply citing [100000000000000000000] once made /query and /answer 500, and the
    broken entry was cached; now the citation is removed and reported bounded."""
    mock.post(url__regex=GEMINI_GENERATE).mock(
        return_value=gemini_answer(["WAV and FLAC are accepted [1][100000000000000000000]."])
    )
    body = answer(llm_client, threshold=0.2)
    assert body["status"] == "success" and "100000" not in body["answer"]
    assert body["metadata"]["synthesizer"]["citations_removed"] == [999_999]
    query = llm_client.post("/v1/knowledge/query", json={"query": QUESTION})
    assert query.status_code == 200
    assert query.json()["synthesizer"]["citations_removed"] == [999_999]


OFF_TOPIC = "When does the zebra migration season start in Kenya?"
"""Passages come back at threshold 0, but no sentence of them answers it."""


def test_passages_that_do_not_answer_are_insufficient_context_not_a_weak_quote(
    client: TestClient,
) -> None:
    body = answer(client, query=OFF_TOPIC, threshold=0.0)
    assert body["status"] == "insufficient_context"
    assert body["answer"] is None and body["sources"] == []
    assert body["confidence"]["overall"] == 0.0 and body["confidence"]["level"] == "low"
    assert body["metadata"]["synthesizer"]["provider"] == "extractive"
    query = client.post("/v1/knowledge/query", json={"query": OFF_TOPIC, "threshold": 0.0})
    assert query.status_code == 200
    reply = query.json()
    assert reply["results"], "passages were found: the bar, not the threshold, refused them"
    assert reply["synthesis"] == NO_RESULTS
    assert reply["synthesizer"]["citations"] == []


def test_an_offline_answer_embeds_its_sentences_as_sentences(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not as documents: the local model runs an answer's few short texts in batches of
    their own size (LocalEmbedder.embed_sentences)."""
    embedder = client.app.state.service.embedder  # type: ignore[attr-defined]
    asked: list[list[str]] = []

    def embed_sentences(texts: Sequence[str]) -> np.ndarray:
        asked.append(list(texts))
        return embedder.embed_documents(texts)  # type: ignore[no-any-return]

    monkeypatch.setattr(embedder, "embed_sentences", embed_sentences)
    body = answer(client, threshold=0.3)
    assert body["sources"] and asked and asked[0][0] == QUESTION


NAMING = [
    hit(f"`source_id` number {n} is at most 500 characters, trimmed.", 0.5, f"c{n}")
    for n in range(5)
]
REPLACES = hit("Posting the same `source_id` again replaces that document.", 0.3, "answers")


class Searched:
    """What `answers.passages` asks of the service, over fixed passages ranked with
    REPLACES third: the search keeps the first `limit` at the threshold, the offline
    link judges what it may quote, and only REPLACES's sentences answer."""

    def __init__(self) -> None:
        self.offline = ExtractiveSynthesizer()

    async def retrieve(
        self, query: str, limit: int, filters: Any, threshold: float, **_: Any
    ) -> Retrieval:
        hits = [h for h in [*NAMING[:2], REPLACES, *NAMING[2:]] if h.similarity >= threshold]
        return Retrieval(hits[:limit], None, 0.0, 0.0, [])

    def quotable(self, query: str, hits: Sequence[SearchHit]) -> bool:
        return self.offline.quotable(query, hits)

    async def sentence_support(
        self, query: str, hits: Sequence[SearchHit], words: float = 0.0
    ) -> list[SentenceSupport]:
        posting = "post" in query
        return [SentenceSupport(0.5, 0.8 if (h is REPLACES) == posting else 0.0) for h in hits]


async def test_passages_with_nothing_to_quote_leave_room_for_the_one_below_that_answers() -> None:
    """Five passages reach the threshold, each naming `source_id`, none saying what
    posting it again does: the answer would be refused with them. They count as none,
    and the passage below the threshold whose sentence answers grounds the answer."""
    params = answers.AnswerParams(
        query="What happens when I post the same source_id again?", threshold=0.4, limit=5
    )
    found = await answers.passages(cast(Any, Searched()), params)
    assert [h.chunk.id for h in found.hits] == ["answers"]
    asked = replace(params, query="How many characters may a source_id hold?")
    assert [h.chunk.id for h in (await answers.passages(cast(Any, Searched()), asked)).hits] == [
        f"c{n}" for n in range(5)
    ]


ROWS = hit("`siam_vectors`: one row per passage.", 0.28, "rows")
TABLES = hit("Indexes: HNSW on the embeddings, GIN on the `fts` columns.", 0.33, "tables")
LISTS = hit("A file is an error when it is empty, binary or not UTF-8.", 0.25, "lists")


class Fixed:
    """What `answers.passages` asks of the service, over fixed passages in the search's
    order: the first `limit` at the threshold asked, any of them quotable, and each
    one's support as `support` gives it (the passages read so kept in `supported`)."""

    def __init__(
        self, ranked: Sequence[SearchHit], support: Callable[[SearchHit], SentenceSupport]
    ) -> None:
        self.ranked, self.support = ranked, support
        self.supported: list[list[str]] = []

    async def retrieve(
        self, query: str, limit: int, filters: Any, threshold: float, **_: Any
    ) -> Retrieval:
        hits = [h for h in self.ranked if h.similarity >= threshold]
        return Retrieval(hits[:limit], None, 0.0, 0.0, [])

    def quotable(self, query: str, hits: Sequence[SearchHit]) -> bool:
        return bool(hits)

    async def sentence_support(
        self, query: str, hits: Sequence[SearchHit], words: float = 0.0
    ) -> list[SentenceSupport]:
        self.supported.append([h.chunk.id for h in hits])
        return [self.support(h) for h in hits]


def ranked() -> Fixed:
    """None reaches 0.4, ranked ROWS, TABLES, LISTS: TABLES is close to the question by
    a sentence's meaning (it grounds at 0.1 below), ROWS and LISTS only by meaning and
    words (at 0.2 below)."""
    return Fixed(
        (ROWS, TABLES, LISTS),
        lambda h: SentenceSupport(0.45 if h is TABLES else 0.3, 0.3 if h is TABLES else 0.6),
    )


async def test_a_far_passage_the_search_ranks_first_joins_the_nearer_ones() -> None:
    """None reaches the threshold and TABLES grounds the answer by its sentence's
    meaning; ROWS, farther below but ranked first by the search, whose sentence holds
    the question's words, grounds it too. LISTS, ranked below TABLES, does not: it is
    not even read."""
    service = ranked()
    params = answers.AnswerParams(
        query="Which table holds one row per passage?", threshold=0.4, limit=5
    )
    found = await answers.passages(cast(Any, service), params)
    assert [h.chunk.id for h in found.hits] == ["rows", "tables"]
    assert service.supported == [["tables"], ["rows"]]


SETTINGS = [
    hit(f"`KNOWLEDGE_ALLOWED_HOSTS` line {n}.", 0.5 - n / 100, f"near{n}") for n in range(6)
]
HOST = hit("`KNOWLEDGE_API_HOST` (default `127.0.0.1`): the interface it binds to.", 0.39, "host")
WEAK = hit("Hosts are names.", 0.38, "weak")
LATE = hit("`KNOWLEDGE_API_HOST` is read at start-up.", 0.37, "late")


def listed() -> Fixed:
    """Ranked near0 ... near4 (at the threshold), WEAK, near5 (at it, past the limit),
    HOST, LATE: HOST's line answers best, near5's better than the first five's, WEAK's
    and LATE's not."""
    best = {"host": 0.84, "late": 0.9, "near5": 0.8, "weak": 0.6}
    return Fixed(
        [*SETTINGS[:5], WEAK, SETTINGS[5], HOST, LATE],
        lambda h: SentenceSupport(0.5, best.get(h.chunk.id, 0.74)),
    )


async def test_a_list_line_found_just_past_the_limit_answers_in_place_of_the_last() -> None:
    """Five passages reach the threshold, their best line 0.74; HOST, found eighth just
    below it (a line of a long list of settings), holds a line scored 0.84: it takes
    the fifth one's place. WEAK, below too, answers worse; near5 reaches the threshold
    and answers better, but the limit, not the threshold, kept it out; LATE, which
    would answer best, is found past the passages read."""
    service = listed()
    params = answers.AnswerParams(query="What is the default API host?", threshold=0.4, limit=5)
    found = await answers.passages(cast(Any, service), params)
    assert [h.chunk.id for h in found.hits] == ["near0", "near1", "near2", "near3", "host"]
    assert service.supported[-1] == ["weak", "host"]


FACETS = [hit(f"`facets` in the API, line {n}.", 0.5 - n / 100, f"api{n}") for n in range(5)]
ASIDE = [hit(f"A count aside {n}.", 0.38, f"aside{n}") for n in range(3)]
TABLE = hit("`siam_vector_facets`: how many passages hold each value.", 0.37, "table")


def best(passage: SearchHit) -> float:
    return 0.84 if passage is TABLE else 0.6 if passage in ASIDE else 0.74


class Fed(Fixed):
    """Five passages at the threshold whose best line scores 0.74, then, below it, three
    whose best scores 0.6 and TABLE, whose line scores 0.84: after the feedback round
    (when `prf` says it runs) TABLE is found past the three, before it between them."""

    def __init__(self, prf: bool) -> None:
        super().__init__([], lambda h: SentenceSupport(0.5, best(h)))
        self.prf = prf
        self.searches = 0
        self.reranked: list[bool] = []

    async def retrieve(
        self, query: str, limit: int, filters: Any, threshold: float, **asked: Any
    ) -> Retrieval:
        self.searches += 1
        fed = self.prf and asked["ranking"].prf is not False
        self.reranked.append(asked.get("rerank", True))
        order = [*FACETS, *ASIDE, TABLE] if fed else [*FACETS, ASIDE[0], TABLE, *ASIDE[1:]]
        hits = [h for h in order if h.similarity >= threshold]
        return Retrieval(hits[:limit], None, 0.0, 0.0, [], ranking={"prf": self.prf})


async def test_a_line_the_feedback_round_pushed_down_is_read_in_the_order_before_it() -> None:
    """The feedback round moves the question toward the five passages that fill the
    limit, and so pushes TABLE, a line that answers better than theirs, past the
    passages read after them; in the search's order before the round it is among them:
    it takes the fifth one's place. That order is not reranked (the reranked one is
    read already). Where no round runs, the search's order is the one before it: the
    window past the limit is searched once."""
    params = answers.AnswerParams(
        query="Which table counts the passages per facet value?", threshold=0.4, limit=5
    )
    service = Fed(prf=True)
    found = await answers.passages(cast(Any, service), params)
    assert [h.chunk.id for h in found.hits] == ["api0", "api1", "api2", "api3", "table"]
    assert service.reranked == [True, True, False]
    without = Fed(prf=False)
    assert (await answers.passages(cast(Any, without), params)).hits == found.hits
    assert without.searches == service.searches - 1
