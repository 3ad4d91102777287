"""Access lists on an adopted database: `migrate --adopt` adds `knowledge_acl` to both
tables (public for every row), each search leg, read and listing keeps to a reader's
principals, and changing a document's list writes that column only. On embedded
Postgres seeded as tests/test_adopt.py seeds it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.models import SearchFilters
from knowledge_api.principals import held, scoped
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.existing import adopt
from tests.pg import run_sync
from tests.test_access import bearer, error_of, make_key
from tests.test_adopt import (
    adopted,
    adopted_settings,
    embed,
    gemini_answering,
    original,
    query,
    seeded_database,
    snapshot,
)

ACL_STEPS = {step.name for step in adopt.acl_steps()} | {adopt.WIKI_ACL_VECTORS}
ASSET = "asset upload timeout"


@pytest.fixture
def database(postgres_server: Any) -> str:
    return seeded_database(postgres_server, "knowledge_adopt_acl")


@pytest.fixture
def gemini() -> Iterator[respx.MockRouter]:
    yield from gemini_answering()


class Keys:
    def __init__(self, settings: Settings) -> None:
        self.admin = asyncio.run(make_key(settings, "operator", ["admin"]))
        self.plain = asyncio.run(make_key(settings, "plain", ["read"]))
        self.chat = asyncio.run(make_key(settings, "chat-ui", ["read", "delegate"]))

    def as_user(self, user: str) -> dict[str, str]:
        return {**bearer(self.chat), "X-Knowledge-User": user}


@pytest.fixture
def served(
    database: str, tmp_path: Path, gemini: respx.MockRouter
) -> Iterator[tuple[TestClient, Keys]]:
    run_sync(adopted(database, wiki_vectors=True))
    settings = adopted_settings(tmp_path, database).replace(auth="keys")
    keys = Keys(settings)
    with TestClient(create_app(settings)) as client:
        put = client.put(
            "/v1/knowledge/principals/ann", json={"groups": ["hr"]}, headers=bearer(keys.admin)
        )
        assert put.status_code == 200, put.text
        yield client, keys


def ask(client: TestClient, headers: dict[str, str], text: str, **extra: Any) -> set[str]:
    body = {"query": text, "synthesize": False, "threshold": 0.0, "limit": 20, **extra}
    response = client.post("/v1/knowledge/query", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return {r["source_id"] for r in response.json()["results"]}


def set_acl(client: TestClient, admin: str, detail: str, acl: list[str]) -> dict[str, Any]:
    doc = client.get(f"/v1/knowledge/detail/{detail}", headers=bearer(admin))
    assert doc.status_code == 200, doc.text
    changed = client.patch(
        f"/v1/knowledge/documents/{doc.json()['id']}", json={"acl": acl}, headers=bearer(admin)
    )
    assert changed.status_code == 200, changed.text
    body: dict[str, Any] = changed.json()
    return body


async def stored_acls(url: str, by: str = "id") -> dict[str, list[str]]:
    """Each row's knowledge_acl, by row id; by="source": the lists of each source's
    passages (or page's url), one after the other."""
    keys = {"id": ("id::text", "id::text"), "source": ("coalesce(source_id, id::text)", "url")}
    siam, wiki = keys[by]
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            f"SELECT {siam} AS k, knowledge_acl FROM siam_vectors "
            f"UNION ALL SELECT {wiki}, knowledge_acl FROM wiki_documents"
        )
    finally:
        await conn.close()
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["k"], []).extend(row["knowledge_acl"])
    return found


ROLLBACK = "https://wiki.example.com/aoma/rollback"


def test_every_reading_route_keeps_to_the_access_lists(
    served: tuple[TestClient, Keys], database: str
) -> None:
    client, keys = served
    before = run_sync(snapshot(database))
    said = set_acl(client, keys.admin, "jira/AOMA-101", ["group:hr"])
    assert said == {"success": True, "acl": ["group:hr"], "documents": 1, "embedded": 0}
    set_acl(client, keys.admin, f"wiki/{ROLLBACK}", [])  # closed: admin keys only
    stored = run_sync(stored_acls(database, by="source"))
    assert stored["AOMA-101"] == ["group:hr", "group:hr"]  # each of its passages
    assert stored[ROLLBACK] == [] and stored["KB-7"] == ["public"]
    assert original(run_sync(snapshot(database))) == original(before)  # nothing else written

    hr = keys.as_user("ann")
    for text in (ASSET, "rollback deployment previous release"):
        everything = ask(client, bearer(keys.admin), text)
        assert ask(client, bearer(keys.plain), text) == everything - {"AOMA-101", ROLLBACK}
        assert ask(client, keys.as_user("bob"), text) == everything - {"AOMA-101", ROLLBACK}
        assert ask(client, hr, text) == everything - {ROLLBACK}
    assert "AOMA-101" in ask(client, hr, ASSET)
    assert ask(client, hr, ASSET, filters={"acl": "group:hr"}) == {"AOMA-101"}
    assert ask(client, bearer(keys.plain), ASSET, filters={"acl": "group:hr"}) == set()

    # detail and documents/{id}: a hidden document is the 404 of a missing one
    detail = "/v1/knowledge/detail/jira/AOMA-101"
    assert client.get(detail, headers=bearer(keys.plain)).status_code == 404
    shown = client.get(detail, headers=hr)
    assert shown.status_code == 200 and shown.json()["acl"] == ["group:hr"]
    by_id = f"/v1/knowledge/documents/{shown.json()['id']}"
    assert client.get(by_id, headers=hr).status_code == 200
    assert error_of(client.get(by_id, headers=bearer(keys.plain)), 404)
    assert client.get(f"/v1/knowledge/detail/wiki/{ROLLBACK}", headers=hr).status_code == 404
    deleted = client.delete(by_id, headers=bearer(keys.admin))  # found, and not deleted
    assert error_of(deleted, 409)["type"] == "store_read_only"

    # the listing and the counts leave the hidden rows out
    def listed(headers: dict[str, str]) -> list[str]:
        page = client.get("/v1/knowledge/documents?limit=100", headers=headers)
        assert page.status_code == 200, page.text
        return [doc["source_id"] for doc in page.json()["documents"]]

    assert len(listed(bearer(keys.admin))) == 10
    assert sorted(listed(hr)) == sorted(s for s in listed(bearer(keys.admin)) if s != ROLLBACK)
    assert "AOMA-101" not in listed(bearer(keys.plain)) and len(listed(bearer(keys.plain))) == 7

    def counted(headers: dict[str, str]) -> int:
        found = client.get("/v1/knowledge/collections", headers=headers).json()["collections"]
        return int(found[0]["documents"])

    assert (counted(bearer(keys.plain)), counted(hr)) == (7, 9)

    # opened again: in force at once, nothing embedded
    set_acl(client, keys.admin, "jira/AOMA-101", ["public"])
    assert "AOMA-101" in ask(client, bearer(keys.plain), ASSET)


def test_each_search_leg_returns_every_allowed_row_and_no_other(
    served: tuple[TestClient, Keys], database: str
) -> None:
    """Random access lists on every row, random principal sets: each leg (by meaning,
    by keyword, fused) returns exactly what the unrestricted search returns among the
    rows those principals may read, never fewer and never another."""
    client, _ = served
    service = client.app.state.service  # type: ignore[attr-defined]
    store = service.store
    chance = random.Random(40)
    names = ["public", "group:hr", "group:eng", "user:ann", "user:bob"]
    queries = [(ASSET, embed([ASSET])[0]), ("deploy release", embed(["deploy release"])[0])]
    cases = 0
    for _ in range(3):
        run_sync(random_acls(database, chance, names))
        store.acl_changed()
        acls = run_sync(stored_acls(database))
        for _ in range(8):
            user = chance.choice(["ann", "bob", "carol"])
            groups = chance.sample(["hr", "eng"], chance.randint(0, 2))
            principals = held(user, groups)
            for text, vector in queries:
                for mode in ("vector", "keyword", "hybrid"):
                    asked = SearchRequest(text, vector, 50, SearchFilters(), 0.0, mode)
                    everything = client.portal.call(store.search, asked)
                    allowed = [h.chunk.id for h in everything if principals & set(acls[h.chunk.id])]
                    filters = scoped(SearchFilters(), principals)
                    hits = client.portal.call(store.search, asked._replace(filters=filters))
                    assert sorted(h.chunk.id for h in hits) == sorted(allowed), (mode, principals)
                    cases += 1
    assert cases == 144


async def random_acls(url: str, chance: random.Random, names: list[str]) -> None:
    conn = await asyncpg.connect(url)
    try:
        for table in ("siam_vectors", "wiki_documents"):
            ids = [r["id"] for r in await conn.fetch(f"SELECT id FROM {table}")]
            for row_id in ids:
                acl = chance.sample(names, chance.randint(0, 2))
                await conn.execute(
                    f"UPDATE {table} SET knowledge_acl = $2 WHERE id = $1", row_id, acl
                )
    finally:
        await conn.close()


async def adopted_before_access_lists(url: str) -> None:
    """An adoption of before access lists were kept: its steps without theirs."""
    conn = await asyncpg.connect(url)
    try:
        plan = await adopt.adoption_plan(conn)
        await adopt.apply(conn, [s for s in plan if s.name not in ACL_STEPS], lambda s: None)
    finally:
        await conn.close()


def test_an_earlier_adoption_reads_every_row_as_public_until_adopted_again(
    database: str, tmp_path: Path, gemini: respx.MockRouter
) -> None:
    run_sync(adopted_before_access_lists(database))
    settings = adopted_settings(tmp_path, database)
    with TestClient(create_app(settings)) as client:
        store = client.get("/health").json()["store"]
        assert store["capabilities"]["permissions"] == "none: every row is public"
        assert any("run `knowledge-api migrate --adopt`" in item for item in store["left_out"])
        assert query(client, ASSET, filters={"acl": "group:hr"})["results"] == []
        doc = client.get("/v1/knowledge/detail/jira/AOMA-101").json()
        refused = client.patch(f"/v1/knowledge/documents/{doc['id']}", json={"acl": []})
        error = error_of(refused, 400)
        assert error["details"]["field"] == "acl" and "migrate --adopt" in error["message"]
    run_sync(adopted(database))  # the rest of the plan: the access lists
    with TestClient(create_app(settings)) as client:
        store = client.get("/health").json()["store"]
        assert store["capabilities"]["permissions"].startswith("access lists")
        assert not any(item.startswith("document permissions") for item in store["left_out"])
        doc = client.get("/v1/knowledge/detail/jira/AOMA-101").json()
        changed = client.patch(f"/v1/knowledge/documents/{doc['id']}", json={"acl": ["group:hr"]})
        assert changed.status_code == 200, changed.text
        assert {
            r["source_id"] for r in query(client, ASSET, filters={"acl": "group:hr"})["results"]
        } == {"AOMA-101"}
