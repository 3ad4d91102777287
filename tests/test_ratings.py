"""Readers' ratings: a query_id on every answer, query and chat response, recorded when
computed (a hit writes nothing), rated by POST /v1/knowledge/feedback within the key's
collections, paged by GET (admin), kept on every backend, and turned into a judged set
by `knowledge-api eval --feedback`."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.errors import BackendConnectionError
from knowledge_api.ledger import Rating, stamp
from knowledge_api.models import SearchHit
from knowledge_api.routes import audit
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores.tables.feedback import SQLiteFeedback
from knowledge_api.usecases import feedback
from knowledge_api.usecases.query import QueryParams
from tests.cli_env import cli_home
from tests.conftest import corpus, make_settings
from tests.test_access import bearer, make_key
from tests.test_audit import BACKENDS
from tests.test_chat import ui_chunks, ui_message
from tests.test_mcp import connected, load, serving, text_of

ASK = {"query": "login timeout", "synthesize": False}
ANSWER = {"query": "Why does the login page time out?", "threshold": 0.3}


def answered_rows(client: TestClient, db: Path) -> int:
    """Answers recorded (the records written beside the answers: waited for first)."""
    client.portal.call(client.app.state.service.recorded)  # type: ignore[attr-defined]
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM answered_queries").fetchone()[0])


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Settings]]:
    settings = make_settings(tmp_path, auth="keys", answer_threshold="0.3")
    tokens = {
        name: asyncio.run(make_key(settings, name, scopes, collections))
        for name, scopes, collections in (
            ("reader", ["read"], ()),
            ("ops-only", ["read"], ("ops",)),
            ("boss", ["admin"], ()),
        )
    }
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        yield client, tokens, settings


def test_a_rated_answer_is_listed_with_its_query_and_a_hit_writes_nothing(
    keyed: tuple[TestClient, dict[str, str], Settings],
) -> None:
    client, tokens, settings = keyed
    reader = bearer(tokens["reader"])
    first = client.post("/v1/knowledge/answer", json=ANSWER, headers=reader).json()
    recorded = answered_rows(client, settings.db_path)
    again = client.post("/v1/knowledge/answer", json=ANSWER, headers=reader).json()
    assert again["metadata"]["cache_hit"] and again["query_id"] == first["query_id"]
    assert answered_rows(client, settings.db_path) == recorded  # the hit wrote nothing
    queried = [client.post("/v1/knowledge/query", json=ASK, headers=reader).json() for _ in "abc"]
    assert queried[2]["metrics"]["cache_hit"]  # the hit path
    assert len({q["query_id"] for q in queried}) == 1
    assert answered_rows(client, settings.db_path) == recorded + 1
    body = {"query_id": first["query_id"], "rating": "up", "comment": "right", "cited": [1]}
    rated = client.post(
        "/v1/knowledge/feedback", json=body, headers={**reader, "X-Request-ID": "r-1"}
    )
    assert rated.status_code == 201, rated.text
    assert rated.json()["query_id"] == first["query_id"]
    down = {"query_id": queried[0]["query_id"], "rating": "down", "expected_source": "kb-7"}
    assert client.post("/v1/knowledge/feedback", json=down, headers=reader).status_code == 201
    page = client.get("/v1/knowledge/feedback", headers=bearer(tokens["boss"])).json()
    newest, oldest = page["ratings"]
    assert (newest["rating"], newest["expected_source"], newest["kind"]) == (
        "down",
        "kb-7",
        "query",
    )
    assert oldest["query"] == ANSWER["query"] and oldest["kind"] == "answer"
    assert (oldest["key"], oldest["request_id"], oldest["cited"]) == ("reader", "r-1", [1])
    assert oldest["comment"] == "right" and oldest["collection"] == "default"
    one = client.get("/v1/knowledge/feedback?limit=1", headers=bearer(tokens["boss"])).json()
    rest = client.get(
        f"/v1/knowledge/feedback?limit=1&cursor={one['next_cursor']}",
        headers=bearer(tokens["boss"]),
    ).json()
    assert [r["id"] for r in one["ratings"] + rest["ratings"]] == [newest["id"], oldest["id"]]
    assert client.get("/v1/knowledge/feedback", headers=reader).status_code == 403


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"query_id": "nope", "rating": "up"}, 400, "query_id"),
        ({"query_id": "00000000-0000-4000-8000-000000000000", "rating": "up"}, 404, None),
        ({"rating": "up"}, 400, "query_id"),
        ({"query_id": "QID", "rating": "meh"}, 400, "rating"),
        ({"query_id": "QID", "rating": "up", "cited": [0]}, 400, "cited"),
        ({"query_id": "QID", "rating": "up", "cited": [99]}, 400, "cited"),
        ({"query_id": "QID", "rating": "up", "stars": 5}, 400, "stars"),
    ],
)
def test_a_bad_rating_is_refused_naming_the_field(
    keyed: tuple[TestClient, dict[str, str], Settings],
    body: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    client, tokens, _ = keyed
    reader = bearer(tokens["reader"])
    query_id = client.post("/v1/knowledge/answer", json=ANSWER, headers=reader).json()["query_id"]
    sent = {k: query_id if v == "QID" else v for k, v in body.items()}
    refused = client.post("/v1/knowledge/feedback", json=sent, headers=reader)
    assert refused.status_code == status, refused.text
    if field:
        assert refused.json()["error"]["details"]["field"] == field


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (f"cursor={audit.cursor_of(2**63)}", "cursor"),  # past a 64-bit id
        ("since=9999-12-31T23:59:59-14:00", "since"),
        ("key=reader", "key"),  # not a parameter of this listing
    ],
)
def test_bad_listing_parameters_are_400_naming_the_field(
    keyed: tuple[TestClient, dict[str, str], Settings], query: str, field: str
) -> None:
    client, tokens, _ = keyed
    refused = client.get(f"/v1/knowledge/feedback?{query}", headers=bearer(tokens["boss"]))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"]["field"] == field


def test_a_key_rates_only_answers_of_its_collections(
    keyed: tuple[TestClient, dict[str, str], Settings],
) -> None:
    client, tokens, _ = keyed
    query_id = client.post(
        "/v1/knowledge/answer", json=ANSWER, headers=bearer(tokens["reader"])
    ).json()["query_id"]
    refused = client.post(
        "/v1/knowledge/feedback",
        json={"query_id": query_id, "rating": "up"},
        headers=bearer(tokens["ops-only"]),
    )
    assert refused.status_code == 403 and "default" in refused.json()["error"]["message"]


def test_chat_responses_carry_the_query_id_a_rating_takes(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, answer_threshold="0.3")
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        question = {"role": "user", "content": ANSWER["query"]}
        completion = client.post(
            "/v1/chat/completions", json={"model": "knowledge", "messages": [question]}
        ).json()
        assert completion["id"].startswith("chatcmpl-")
        by_id = client.post(
            "/v1/knowledge/feedback", json={"query_id": completion["id"], "rating": "up"}
        )
        assert by_id.status_code == 201
        assert completion["id"] == f"chatcmpl-{by_id.json()['query_id']}"
        streamed = client.post(
            "/v1/chat/completions",
            json={"model": "knowledge", "messages": [question], "stream": True},
        )
        chunks = [
            json.loads(line[6:])
            for line in streamed.text.splitlines()
            if line.startswith("data: {")
        ]
        assert chunks[-1]["query_id"] == by_id.json()["query_id"]  # the same answer, cached
        _, ui = ui_chunks(client, {"messages": [ui_message("user", ANSWER["query"])]})
        [metadata] = [c["messageMetadata"] for c in ui if c.get("type") == "message-metadata"]
        assert metadata["query_id"] == by_id.json()["query_id"]


async def test_the_mcp_answer_carries_its_query_id(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, answer_threshold="0.3")
    await load(settings)
    async with serving(settings) as app, connected(app) as client:
        answered = json.loads(text_of(await client.call_tool("answer", {"query": ANSWER["query"]})))
        service = app.state.service
        found = await service.find_answered(answered["query_id"])
    assert found is not None and found.kind == "answer" and found.query == ANSWER["query"]
    assert found.results and found.cited == [n["citation_index"] for n in answered["sources"]]


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_answers_and_ratings_are_kept_on_every_backend(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    settings: Settings = BACKENDS[backend](request, tmp_path)
    service = build_service(settings)
    await service.start()
    try:
        await service.ingest(corpus())
        hits: list[SearchHit] = (
            await service.retrieve("login timeout", 3, QueryParams("x").search_filters())
        ).hits
        query_id = await service.answered("answer", QueryParams("login timeout"), hits, [1])
        await service.recorded()
        first = await service.feedback_log.rate(Rating(query_id, "down", "reader", "no"))
        again = await service.feedback_log.rate(
            Rating(query_id, "up", "reader", "ok", [1], None, "r-1")
        )  # the key's rating of the query again: it replaces the first
        assert again == first
        other = await service.feedback_log.rate(Rating(query_id, "down", "writer"))
        assert other != first
    finally:
        await service.stop()
    service = build_service(settings)  # another process
    await service.open_storage()
    try:
        found = await service.feedback_log.find(query_id)
        theirs, rating = await service.feedback_log.ratings(10)
    finally:
        await service.stop()
    assert found is not None and found.query == "login timeout" and found.cited == [1]
    assert found.results[0]["source_id"] == hits[0].source_id
    assert found.ranking["fusion"] == "convex" and found.ranking["limit"] == 5
    assert (rating.query_id, rating.rating, rating.cited, rating.request_id) == (
        query_id,
        "up",
        [1],
        "r-1",
    )
    assert rating.at.endswith("Z") and rating.comment == "ok" and theirs.key == "writer"


def test_eval_feedback_judges_todays_ranking_by_the_ratings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    settings = Settings.from_env(env_file=None)
    served = settings.replace(seed_on_empty=False, allowed_hosts="testserver")
    with TestClient(create_app(served)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        asked = {}
        for query in (
            "login timeout SSO gateway",
            "asset search pagination duplicates",
            "release date",
        ):
            asked[query] = client.post(
                "/v1/knowledge/query", json={"query": query, "synthesize": False}
            ).json()
        ratings = [
            {
                "query_id": asked["login timeout SSO gateway"]["query_id"],
                "rating": "up",
                "cited": [1],
            },
            {
                "query_id": asked["asset search pagination duplicates"]["query_id"],
                "rating": "down",
                "expected_source": "a1b2c3d",
            },
            {
                "query_id": asked["release date"]["query_id"],
                "rating": "down",
            },  # says nothing usable
        ]
        for rating in ratings:
            assert client.post("/v1/knowledge/feedback", json=rating).status_code == 201
    capsys.readouterr()
    assert main(["eval", "--feedback", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["queries"] == 2
    rows = {row["query"]: row for row in report["per_query"]}
    assert rows["login timeout SSO gateway"]["mrr@10"] == 1.0  # its first result, rated up
    assert rows["asset search pagination duplicates"]["recall@100"] == 1.0
    assert set(report["metrics"]) >= {"ndcg@10", "recall@10", "mrr@10"}
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert main(["eval", "--feedback", "--since", tomorrow]) == 0
    assert "no rated answer to judge" in capsys.readouterr().out
    assert main(["eval"]) == 2
    assert "pass --feedback" in capsys.readouterr().err


def test_a_key_rates_a_query_once_within_its_limit_and_each_rating_is_audited(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, auth="keys", ratings_per_minute=3)
    tokens = {
        name: asyncio.run(make_key(settings, name, scopes))
        for name, scopes in (("reader", ["read"]), ("other", ["read"]), ("boss", ["admin"]))
    }
    reader, other, boss = (bearer(tokens[name]) for name in ("reader", "other", "boss"))
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        query_id = client.post("/v1/knowledge/query", json=ASK, headers=reader).json()["query_id"]
        up = {"query_id": query_id, "rating": "up"}
        down = {"query_id": query_id, "rating": "down", "expected_source": "kb-7"}
        first = client.post("/v1/knowledge/feedback", json=up, headers=reader)
        second = client.post("/v1/knowledge/feedback", json=down, headers=reader)
        theirs = client.post("/v1/knowledge/feedback", json=up, headers=other)
        assert [r.status_code for r in (first, second, theirs)] == [201] * 3
        assert second.json()["id"] == first.json()["id"] != theirs.json()["id"]
        ratings = client.get("/v1/knowledge/feedback", headers=boss).json()["ratings"]
        assert sorted((r["key"], r["rating"]) for r in ratings) == [
            ("other", "up"),
            ("reader", "down"),
        ]
        flooded = [
            client.post("/v1/knowledge/feedback", json=up, headers=reader).status_code
            for _ in range(3)
        ]
        assert flooded == [201, 429, 429]  # 3 a minute: the fourth of this key is refused
        refused = client.post("/v1/knowledge/feedback", json=up, headers=reader)
        assert "KNOWLEDGE_RATINGS_PER_MINUTE" in refused.json()["error"]["message"]
        assert "Retry-After" in refused.headers
        entries = client.get("/v1/knowledge/audit?collection=default", headers=boss).json()[
            "entries"
        ]
    rated = [e for e in entries if e["action"] == "POST /v1/knowledge/feedback"]
    assert [(e["key"], e["changes"]["rating"]) for e in rated] == [
        ("reader", "up"),
        ("other", "up"),
        ("reader", "down"),
        ("reader", "up"),
    ]
    assert rated[-1]["changes"] == {"id": first.json()["id"], "query_id": query_id, "rating": "up"}


async def test_eval_feedback_reads_one_rating_per_key_and_every_keys_sources(
    service: KnowledgeService,
) -> None:
    """The newest rating of a query no longer decides it alone: each key's rating
    counts once, and every source one of them names is relevant."""
    await service.ingest(corpus())
    hits = (await service.retrieve("login timeout", 3, QueryParams("x").search_filters())).hits
    query_id = await service.answered("query", QueryParams("login timeout"), hits)
    await service.recorded()
    await service.feedback_log.rate(Rating(query_id, "down", "ops", expected_source="a1b2c3d"))
    await service.feedback_log.rate(Rating(query_id, "up", "reader", cited=[1]))
    [judgement] = await feedback.judged_set(service)
    assert judgement.relevant == {"a1b2c3d": 1, hits[0].source_id: 1}


async def test_answers_computed_together_are_recorded_together_and_each_resolves(
    service: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    await service.ingest(corpus())
    hits = (await service.retrieve("login timeout", 3, QueryParams("x").search_filters())).hits
    batches: list[int] = []
    write = service.feedback_log.answered_many

    async def counted(batch: Any) -> None:
        batches.append(len(batch))
        await write(batch)

    monkeypatch.setattr(service.feedback_log, "answered_many", counted)
    ids = [
        await service.answered("query", QueryParams(f"login timeout {n}"), hits) for n in range(5)
    ]
    found = await service.find_answered(ids[-1])  # before its batch is written: waits for it
    assert found is not None and found.query == "login timeout 4"
    assert batches == [5]
    for n, query_id in enumerate(ids):
        answered = await service.feedback_log.find(query_id)
        assert answered is not None and answered.query == f"login timeout {n}"


async def test_an_answers_record_carries_the_moment_it_was_answered_not_its_write(
    service: KnowledgeService,
) -> None:
    query_id = await service.answered("query", QueryParams("login timeout"), [])
    answered_by = stamp()  # its batch is written LINGER_S later, after this
    await service.recorded()
    found = await service.feedback_log.find(query_id)
    assert found is not None and found.at <= answered_by


async def test_a_batch_of_answers_that_cannot_be_written_names_each_answer_lost(
    service: KnowledgeService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing(batch: Any) -> None:
        raise BackendConnectionError("ratings unavailable: disk I/O error")

    monkeypatch.setattr(service.feedback_log, "answered_many", failing)
    ids = [await service.answered("query", QueryParams(f"q {n}"), []) for n in range(2)]
    await service.recorded()
    lost = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert lost == [
        f"answer {query_id} not recorded, its ratings will not resolve: "
        "ratings unavailable: disk I/O error"
        for query_id in ids
    ]
    assert await service.find_answered(ids[0]) is None


async def test_a_file_rated_before_keeps_each_keys_newest_rating(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    with sqlite3.connect(db) as conn:
        conn.execute(SQLiteFeedback.SCHEMA[1])  # the table as it was, without the rule
        conn.executemany(
            "INSERT INTO answer_ratings (at, query_id, rating, key) VALUES ('t', 'q', ?, ?)",
            [("up", "reader"), ("down", "reader"), ("up", "other")],
        )
    log = SQLiteFeedback(db)
    await log.open()
    try:
        kept = await log.ratings(10)
    finally:
        await log.close()
    assert sorted((r.key, r.rating, r.id) for r in kept) == [
        ("other", "up", 3),
        ("reader", "down", 2),
    ]
