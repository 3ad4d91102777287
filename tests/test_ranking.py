"""Ranking per request (`ranking` on query, answer, retrieve and the chat routes): each
choice reaches the real SQLite store's shared hybrid search, the response says what
ranked it, tier 1 keeps rankings apart, and bad choices are 400s naming their path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.errors import InvalidRequest
from knowledge_api.models import (
    Chunk,
    Document,
    Ranking,
    Recency,
    SearchFilters,
    SearchHit,
    chunk_id,
)
from knowledge_api.ranking import by_recency
from knowledge_api.ranking import parse as parse_ranking
from knowledge_api.service import KnowledgeService
from knowledge_api.stores.fusion import reciprocal_rank_fusion
from tests.conftest import ask, corpus, fake_embedder, query_params

QUESTION = "asset search pagination timeout"


async def ranked(service: KnowledgeService, ranking: dict[str, Any], **more: Any) -> dict[str, Any]:
    body = {"query": QUESTION, "threshold": 0, "synthesize": False, "limit": 6, **more}
    return await ask(service, query_params({**body, "ranking": ranking}))


def ids(body: dict[str, Any]) -> list[str]:
    return [result["id"] for result in body["results"]]


async def by_mode(service: KnowledgeService, mode: Any, limit: int = 6) -> list[str]:
    found = await service.retrieve(QUESTION, limit, SearchFilters(), 0.0, mode)
    return [hit.chunk.id for hit in found.hits]


async def test_vector_weight_moves_the_order_between_the_two_retrievers(
    loaded: KnowledgeService,
) -> None:
    keyword, vector = await by_mode(loaded, "keyword"), await by_mode(loaded, "vector")
    assert keyword[:3] != vector[:3]  # the two retrievers disagree on this question
    by_words = await ranked(loaded, {"vector_weight": 0, "prf": False})
    by_meaning = await ranked(loaded, {"vector_weight": 1, "prf": False})
    # a passage the keyword list holds scores above every other with the weight on words
    assert ids(by_words)[: len(keyword)] == keyword
    assert ids(by_meaning)[:3] == vector[:3]
    assert by_words["metrics"]["ranking"] == {
        "fusion": "convex",
        "vector_weight": 0,
        "prf": False,
        "recency": None,
        "reranker": "none",
    }


async def test_fusion_and_feedback_are_the_requests_choice(loaded: KnowledgeService) -> None:
    rrf = await ranked(loaded, {"fusion": "rrf", "prf": False})
    assert rrf["metrics"]["ranking"]["fusion"] == "rrf"
    assert rrf["metrics"]["ranking"]["prf"] is False
    settings = await ranked(loaded, {})
    assert settings["metrics"]["ranking"]["fusion"] == "convex"
    assert settings["metrics"]["ranking"]["prf"] is True  # KNOWLEDGE_FEEDBACK_DOCS=3
    # reciprocal ranks of the two retrievers' own lists
    vector, keyword = await by_mode(loaded, "vector", 50), await by_mode(loaded, "keyword", 50)
    expected = [key for key, _ in reciprocal_rank_fusion([vector, keyword])]
    assert ids(rrf) == expected[:6]
    assert ids(settings) != ids(rrf)


async def test_each_ranking_is_cached_apart(loaded: KnowledgeService) -> None:
    first = await ranked(loaded, {"vector_weight": 0.1})
    other = await ranked(loaded, {"vector_weight": 0.9})
    again = await ranked(loaded, {"vector_weight": 0.1})
    assert first["metrics"]["cache_hit"] is False
    assert other["metrics"]["cache_hit"] is False
    assert again["metrics"]["cache_hit"] is True
    keys = {query_params({"query": "q", "ranking": r}).cache_key() for r in ({}, {"prf": True})}
    assert len(keys) == 2


def dated(published: dict[str, str]) -> list[Document]:
    docs = corpus()
    for doc in docs:
        if doc.source_id in published:
            doc.metadata["published"] = published[doc.source_id]
    return docs


async def test_recency_puts_newer_passages_first(service: KnowledgeService) -> None:
    """A passage of a fifth of the best similarity, four weeks newer, comes first with
    a week's half-life; one of no similarity at all (kb-7, cosine 0) stays where it is,
    however new."""
    await service.ingest(
        dated(
            {
                "SIAM-101": "2020-01-01",
                "a1b2c3d": "2026-11-01",
                "latency-weekly": "2026-11-25",
                "kb-7": "2026-11-27",
            }
        )
    )
    plain = await ranked(service, {})
    recent = await ranked(service, {"recency": {"field": "published", "half_life_days": 7}})
    sources = [r["source_id"] for r in recent["results"]]
    assert sources[:2] == ["latency-weekly", "a1b2c3d"]  # newest first among the relevant
    assert [r["source_id"] for r in plain["results"]][:2] != sources[:2]
    assert "kb-7" not in sources
    ran = recent["metrics"]["ranking"]["recency"]
    # seven passages (the wiki page has two), four of them dated
    assert ran == {"field": "published", "half_life_days": 7.0, "undated": 3}
    # SQLite reads the documents' own dates with each hit
    stored = await ranked(service, {"recency": {"half_life_days": 30}})
    assert stored["metrics"]["ranking"]["recency"]["undated"] == 0


def hit(name: str, score: float, published: str = "") -> SearchHit:
    chunk = Chunk(name, "doc", 0, name)
    metadata = {"published": published} if published else {}
    return SearchHit(chunk, "doc", "wiki", name, metadata, score, score)


def test_recency_halves_relevance_every_half_life() -> None:
    now = 1_800_000_000_000
    iso = "2027-01-15T08:00:00+00:00"  # `now` in ISO 8601
    week_ago = "2027-01-08T08:00:00+00:00"
    hits = [hit("old", 1.0, week_ago), hit("new", 0.6, iso), hit("undated", 0.9)]
    order, undated = by_recency(hits, Recency("published", 7), now)
    assert [h.chunk.id for h in order] == ["new", "old", "undated"]
    assert undated == 1
    assert [round(h.score, 3) for h in order] == [0.9, 0.5, 0.3]


def test_recency_weighs_similarities_not_rank_fusion_scores() -> None:
    """Rank fusion's scores lie a few percent apart: multiplied by recency, 49 days
    outweighed a similarity of 0.65 against 0.38 with a 365-day half-life."""
    now = 1_800_000_000_000
    fifty_days_ago = "2026-11-26T08:00:00+00:00"
    a_day_ago = "2027-01-14T08:00:00+00:00"
    hits = [
        SearchHit(
            Chunk("match", "doc", 0, "x"),
            "doc",
            "wiki",
            "match",
            {"opened": fifty_days_ago},
            1 / 61,
            0.65,
        ),
        SearchHit(
            Chunk("newer", "doc", 0, "x"),
            "doc",
            "wiki",
            "newer",
            {"opened": a_day_ago},
            1 / 62,
            0.38,
        ),
    ]
    order, _ = by_recency(hits, Recency("opened", 365), now)
    assert [h.chunk.id for h in order] == ["match", "newer"]
    assert order[0].score == pytest.approx(0.65 * 0.5 ** (50 / 365))  # 50 days old
    order, _ = by_recency(hits, Recency("opened", 7), now)
    assert [h.chunk.id for h in order] == ["newer", "match"]


async def index_at(
    service: KnowledgeService, query: str, passages: dict[str, tuple[float, int]]
) -> None:
    """One passage per name, at the given cosine from `query`'s vector, opened the given
    number of days ago; no word of the query in any of them."""
    embedder = fake_embedder(service)
    toward = embedder.embed_query(query).astype(np.float64)
    rng = np.random.default_rng(7)
    today = datetime.now(UTC)
    docs = []
    for name, (cosine, age) in passages.items():
        away = rng.standard_normal(toward.size)
        away -= (away @ toward) * toward
        away /= np.linalg.norm(away)
        opened = (today - timedelta(days=age)).isoformat(timespec="seconds")
        doc = Document("wiki", name, f"Passage {name}.", metadata={"opened": opened})
        vector = (cosine * toward + (1 - cosine**2) ** 0.5 * away).astype(np.float32)
        doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, doc.content, embedding=vector)]
        docs.append(doc)
    await service.store.index_documents(docs)


@pytest.mark.parametrize("prf", [True, False])
async def test_a_half_life_weighs_the_same_with_and_without_the_feedback_round(
    service: KnowledgeService, prf: bool
) -> None:
    query = "quarterly outage report"
    await index_at(
        service,
        query,
        {
            "match": (0.65, 60),
            "newer": (0.38, 11),
            "c": (0.55, 60),
            "d": (0.45, 60),
            "e": (0.3, 60),
        },
    )

    async def order(half_life: float) -> list[str]:
        ranking = Ranking(prf=prf, recency=Recency("opened", half_life))
        found = await service.retrieve(query, 5, SearchFilters(), 0.0, "hybrid", ranking=ranking)
        assert found.ranking["prf"] is prf
        return [hit.source_id for hit in found.hits]

    slow, fast = await order(365), await order(7)
    assert slow.index("match") < slow.index("newer")  # 0.65 x 2^(-49/365) = 0.59 > 0.38
    assert fast.index("newer") < fast.index("match")


@pytest.mark.parametrize(
    ("ranking", "field"),
    [
        (None, "ranking"),
        ("convex", "ranking"),
        ({"fusion": "best"}, "ranking.fusion"),
        ({"vector_weight": 1.5}, "ranking.vector_weight"),
        ({"vector_weight": True}, "ranking.vector_weight"),
        ({"prf": "yes"}, "ranking.prf"),
        ({"rerank": None}, "ranking.rerank"),
        ({"recency": {"half_life_days": 0}}, "ranking.recency.half_life_days"),
        ({"recency": {}}, "ranking.recency.half_life_days"),
        ({"recency": {"field": "", "half_life_days": 1}}, "ranking.recency.field"),
        ({"recency": {"half_life_days": 1, "scale": 2}}, "ranking.recency.scale"),
        ({"boost": 2}, "ranking.boost"),
    ],
)
def test_bad_choices_name_their_path(ranking: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_ranking(ranking)
    assert refused.value.details["field"] == field


def test_a_full_choice_parses() -> None:
    chosen = {
        "fusion": "rrf",
        "vector_weight": 0.25,
        "prf": False,
        "recency": {"field": "updated_at", "half_life_days": 30},
        "rerank": False,
    }
    assert parse_ranking(chosen) == Ranking("rrf", 0.25, False, Recency("updated_at", 30.0), False)


CHAT = {"messages": [{"role": "user", "content": "Which audio formats are accepted?"}]}
ROUTES = [
    ("/v1/knowledge/query", {"query": QUESTION}),
    ("/v1/knowledge/answer", {"query": QUESTION}),
    ("/v1/knowledge/retrieve", {"query": QUESTION, "collection": "default"}),
    ("/v1/chat/completions", CHAT),
    ("/v1/chat", {"messages": [{"role": "user", "parts": [{"type": "text", "text": "FLAC?"}]}]}),
]


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_every_searching_route_takes_a_ranking(
    client: TestClient, route: str, body: dict[str, Any]
) -> None:
    bad = client.post(route, json={**body, "ranking": {"vector_weight": -1}})
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["details"]["field"] == "ranking.vector_weight"
    good = client.post(route, json={**body, "ranking": {"fusion": "rrf", "prf": False}})
    assert good.status_code == 200, good.text


@pytest.mark.parametrize(("route", "body"), ROUTES)
def test_rerank_without_a_reranker_is_a_400_naming_the_setting(
    client: TestClient, route: str, body: dict[str, Any]
) -> None:
    response = client.post(route, json={**body, "ranking": {"rerank": True}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["details"]["field"] == "ranking.rerank"
    assert "KNOWLEDGE_RERANKER" in error["message"]
    plain = client.post(route, json={**body, "ranking": {"rerank": False}})
    assert plain.status_code == 200, plain.text


def test_retrieve_and_answer_say_what_ranked(client: TestClient) -> None:
    retrieved = client.post(
        "/v1/knowledge/retrieve",
        json={"query": QUESTION, "collection": "default", "ranking": {"vector_weight": 0.5}},
    ).json()
    assert retrieved["metrics"]["ranking"]["vector_weight"] == 0.5
    answered = client.post(
        "/v1/knowledge/answer", json={"query": QUESTION, "ranking": {"fusion": "rrf"}}
    ).json()
    assert answered["metadata"]["ranking"]["fusion"] == "rrf"


def test_a_query_naming_a_code_shaped_word_reports_the_even_shares_it_ran(
    client: TestClient,
) -> None:
    """The vector weight reported is the one its fusion used: 0.5 for a query holding
    `source_type`, the setting's for prose."""

    def weight(query: str) -> float:
        body = {"query": query, "collection": "default"}
        found = client.post("/v1/knowledge/retrieve", json=body).json()
        return float(found["metrics"]["ranking"]["vector_weight"])

    assert weight("What does source_type hold?") == 0.5
    assert weight("What does the source type hold?") == 0.8
