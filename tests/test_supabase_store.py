"""The supabase store through supabase-py, its PostgREST answered by the embedded Postgres."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError, IndexingError
from knowledge_api.models import Document, SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.postgres.supabase import SupabaseStore
from tests.conftest import corpus, make_store
from tests.pg import (
    SERVICE_ROLE_KEY,
    SUPABASE_URL,
    fresh_database,
    project_settings,
    supabase_settings,
)
from tests.pg_store import store_fixtures
from tests.postgrest import PostgREST
from tests.test_store_conformance import EMBEDDER, index, vector

settings, store, _ = store_fixtures("supabase")


def calls(postgrest: PostgREST) -> list[str]:
    return [f"{r.method} {r.url.path.removeprefix('/rest/v1/')}" for r in postgrest.requests]


async def test_search_is_two_rpcs_and_matches_the_postgres_store(
    store: SupabaseStore, postgrest: PostgREST, tmp_path: Path
) -> None:
    await index(store, corpus())
    postgrest.requests.clear()
    query = "login page timeout with SSO"
    hits = await store.search(
        SearchRequest(query, vector(query), 5, SearchFilters(), threshold=0.0)
    )
    assert sorted(calls(postgrest)[:2]) == [  # sent at once
        "POST rpc/match_siam_vectors_gemini",
        "POST rpc/search_siam_vectors_text",
    ]
    direct = make_store("postgres", settings_for(postgrest, tmp_path))
    await direct.open()
    try:
        same = await direct.search(
            SearchRequest(query, vector(query), 5, SearchFilters(), threshold=0.0)
        )
    finally:
        await direct.close()
    assert [(h.chunk.id, round(h.score, 9), round(h.similarity, 5)) for h in hits] == [
        (h.chunk.id, round(h.score, 9), round(h.similarity, 5)) for h in same
    ]
    assert hits[0].source_id == "SIAM-101" and hits[0].metadata["priority"] == "high"


def settings_for(postgrest: PostgREST, tmp_path: Path) -> Settings:
    from tests.conftest import make_settings

    return make_settings(tmp_path, store="postgres", database_url=Secret(postgrest.dsn))


async def test_the_spec_functions_answer_plain_json_rpcs(store: SupabaseStore) -> None:
    """As any PostgREST client calls them: JSON numbers for the vector, defaults omitted."""
    await index(store, corpus())
    client = await store._rest()
    query = vector("release date of 4.2").tolist()
    matches = await client.rpc(
        "match_siam_vectors_gemini",
        {"query_embedding": query, "match_threshold": 0.2, "match_count": 2},
    ).execute()
    assert [m["source_id"] for m in matches.data][:1] == ["msg-42"]
    assert len(matches.data) <= 2 and all(m["similarity"] > 0.2 for m in matches.data)
    pages = await client.rpc("search_wiki_documents", {"query_text": "Jira links"}).execute()
    assert [p["url"] for p in pages.data] == ["https://wiki.example.com/aoma/test-cases"]


async def test_the_service_role_key_is_sent_and_never_shown(
    store: SupabaseStore, postgrest: PostgREST, settings: Settings
) -> None:
    await index(store, corpus()[:1])
    request = postgrest.requests[-1]
    assert request.headers["apikey"] == SERVICE_ROLE_KEY
    assert request.headers["Authorization"] == f"Bearer {SERVICE_ROLE_KEY}"
    shown = repr(store) + repr(settings) + json.dumps(await store.health_check())
    assert SUPABASE_URL in shown and SERVICE_ROLE_KEY not in shown


async def embedder_check_refused(settings: Settings) -> BackendConnectionError:
    """The error the store on `settings` raises where it checks its embedder at open."""
    store = make_store("supabase", settings)
    await store.open()
    try:
        with pytest.raises(BackendConnectionError) as refused:
            await store.check_embedder(EMBEDDER.name, EMBEDDER.dimension)
    finally:
        await store.close()
    return refused.value


async def test_a_refused_key_is_a_clear_error_without_the_key(
    request: pytest.FixtureRequest, tmp_path: Path, postgrest: PostgREST
) -> None:
    wrong = supabase_settings(
        request, tmp_path, supabase_service_role_key=Secret("wrong-key-abcdef")
    )
    refused = await embedder_check_refused(wrong)
    assert "refused the service role key (HTTP 401" in refused.message
    assert "SUPABASE_SERVICE_ROLE_KEY" in refused.message
    assert "wrong-key-abcdef" not in refused.message
    assert len(postgrest.requests) == 1  # a refused key is not retried


async def test_a_missing_function_asks_for_the_migration(
    postgres_server: Any, tmp_path: Path
) -> None:
    bare = PostgREST(fresh_database(postgres_server, "knowledge_bare"), SERVICE_ROLE_KEY)
    with respx.mock(base_url=f"{SUPABASE_URL}/rest/v1") as router:
        router.route().mock(side_effect=bare)
        missing = await embedder_check_refused(project_settings(tmp_path))
    assert "HTTP 404: Could not find the function public.knowledge_check_embedder" in (
        missing.message
    )
    assert "knowledge-api migrate" in missing.message


async def test_transient_failures_are_retried_with_backoff(
    store: SupabaseStore, postgrest: PostgREST, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("knowledge_api.stores.postgres.supabase.asyncio.sleep", sleep)
    store.backoff = 0.25
    await index(store, corpus())
    request = httpx.Request("POST", SUPABASE_URL)
    postgrest.faults.extend(
        [
            httpx.Response(503, json={"message": "Service Unavailable"}),
            httpx.ReadTimeout("read timed out", request=request),
            httpx.ConnectError("connection reset", request=request),
        ]
    )
    postgrest.requests.clear()
    hits = await store.search(SearchRequest("FLAC", vector("FLAC"), 3, SearchFilters()))
    assert hits[0].source_id == "kb-7"
    retried = calls(postgrest)[0]  # the first of the two RPCs sent, three times again
    assert retried in ("POST rpc/match_siam_vectors_gemini", "POST rpc/search_siam_vectors_text")
    assert calls(postgrest)[:4] == [retried] * 4
    assert waits == [0.25, 0.5, 1.0]


async def test_lasting_5xx_and_timeouts_end_in_a_503_error(
    store: SupabaseStore, postgrest: PostgREST
) -> None:
    postgrest.faults.extend([httpx.Response(502, text="Bad Gateway")] * 4)
    with pytest.raises(BackendConnectionError, match=r"after 4 attempts: HTTP 502: Bad Gateway"):
        await store.count()
    request = httpx.Request("POST", SUPABASE_URL)
    postgrest.faults.extend([httpx.ReadTimeout("timed out", request=request)] * 4)
    with pytest.raises(BackendConnectionError, match=r"after 4 attempts: no answer within 10s"):
        await store.count()
    assert await store.count() == 0  # and it recovers once the project answers


async def test_a_failing_statement_is_a_store_error_naming_the_cause(
    store: SupabaseStore, postgrest: PostgREST
) -> None:
    await index(store, corpus()[:1])
    payload = {"documents": [{"id": "not-a-uuid", "chunks": []}]}
    with pytest.raises(IndexingError, match=r"invalid input syntax for type uuid.*\(code 22P02\)"):
        await store.call("knowledge_index_documents", payload, IndexingError)
    assert await store.count() == 1


def test_an_unreachable_project_answers_503_and_health_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = project_settings(
        tmp_path, supabase_url="https://unreachable.supabase.co", supabase_retries=1
    )
    with respx.mock(base_url="https://unreachable.supabase.co") as router:
        router.route().mock(side_effect=httpx.ConnectError("connection refused"))
        with TestClient(create_app(settings)) as client:
            health = client.get("/health").json()
            response = client.post("/v1/knowledge/query", json={"query": "login timeout"})
    assert health["status"] == "unhealthy" and health["store"]["status"] == "unavailable"
    assert "after 2 attempts: ConnectError: connection refused" in health["store"]["error"]
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "store_unavailable"
    assert "https://unreachable.supabase.co" in error["message"]
    seen = json.dumps(health) + response.text + caplog.text
    assert SERVICE_ROLE_KEY not in seen


def test_missing_project_settings_are_reported_by_health(tmp_path: Path) -> None:
    from tests.conftest import make_settings

    with TestClient(create_app(make_settings(tmp_path, store="supabase"))) as client:
        health = client.get("/health").json()
    assert health["store"]["status"] == "unavailable"
    assert "needs SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY" in health["store"]["error"]


async def test_large_collections_page_through_the_table_api(
    store: SupabaseStore, postgrest: PostgREST
) -> None:
    docs = [
        Document(
            "git", f"c{i:03}", f"Commit {i} changes module {i % 9}.", f"C{i}", collection="bulk"
        )
        for i in range(250)
    ]
    await index(store, docs)
    again = await index(
        store,
        [Document(d.source_type, d.source_id, d.content, d.title, collection="bulk") for d in docs],
    )
    assert (again.documents, again.skipped) == (0, 250)  # hashes looked up 100 ids at a time
    exported = [doc async for doc in store.iter_documents("bulk")]
    assert sorted(d.source_id for d in exported) == [d.source_id for d in docs]
    assert all(len(d.chunks) == 1 and d.chunks[0].embedding is not None for d in exported)
    reads = [
        r for r in postgrest.requests if r.method == "GET" and "knowledge_documents" in str(r.url)
    ]
    assert max(len(str(r.url)) for r in reads) < 8000


async def test_the_hnsw_candidates_setting_reaches_the_search_function(
    request: pytest.FixtureRequest, postgrest: PostgREST, tmp_path: Path
) -> None:
    store = make_store("supabase", supabase_settings(request, tmp_path, postgres_ef_search=321))
    await store.open()
    try:
        await index(store, corpus())
        query = "login page timeout with SSO"
        hits = await store.search(SearchRequest(query, vector(query), 3, SearchFilters()))
    finally:
        await store.close()
    searches = [r for r in postgrest.requests if r.url.path.endswith("match_siam_vectors_gemini")]
    assert [json.loads(r.content)["ef_search"] for r in searches] == [321] * len(searches) != []
    assert hits[0].source_id == "SIAM-101"
