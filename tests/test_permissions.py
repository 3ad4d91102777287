"""Document permissions over HTTP: a key's own principals, a key delegating for its
users with X-Knowledge-User, groups kept by the service, access lists written and
changed, and every reading route answering as if hidden documents did not exist."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.settings import Settings
from knowledge_api.stores.tables.keys import KEY_CACHE_SECONDS
from tests.conftest import make_settings
from tests.test_access import bearer, make_key
from tests.test_uploads import parts, submit, wait_for

PAGES = [
    ("eng-1", "Deploying the search service: run the release pipeline.", ["public"]),
    ("eng-2", "Search service release notes: the pipeline got faster.", ["public"]),
    ("hr-1", "Salary bands for the search service team, confidential.", ["group:hr"]),
    ("hr-2", "Release of the bonus pipeline for the search team.", ["group:hr"]),
    ("ann-1", "Ann's performance review of the search service release.", ["user:ann"]),
    ("closed-1", "A search service release draft nobody may read yet.", []),
]
ASK = {"query": "search service release pipeline", "synthesize": False, "threshold": 0.0}


def page(source_id: str, content: str, acl: list[str], collection: str = "company") -> Any:
    return {
        "source_type": "wiki",
        "source_id": source_id,
        "content": content,
        "title": source_id,
        "metadata": {"team": source_id.split("-")[0]},
        "collection": collection,
        "acl": acl,
    }


class Keys:
    """The tokens of a deployment: an operator (admin), a chat UI that delegates, a
    reader that reads as bob, and a reader with group hr of its own."""

    def __init__(self, settings: Settings) -> None:
        self.admin = asyncio.run(make_key(settings, "operator", ["admin"]))
        self.chat = asyncio.run(make_key(settings, "chat-ui", ["read", "delegate"]))
        self.plain = asyncio.run(make_key(settings, "plain", ["read", "write"]))
        self.hr = asyncio.run(_key_with(settings, "hr-reader", user="carol", groups=["hr"]))

    def as_user(self, user: str) -> dict[str, str]:
        return {**bearer(self.chat), "X-Knowledge-User": user}


async def _key_with(settings: Settings, name: str, user: str, groups: list[str]) -> str:
    from knowledge_api.compose import build_service
    from knowledge_api.usecases import keys

    service = build_service(settings)
    await service.open_storage()
    try:
        _, token = await keys.create(service, name, ["read"], (), user=user, groups=groups)
    finally:
        await service.stop()
    return token


@contextmanager
def served(settings: Settings) -> Iterator[tuple[TestClient, Keys]]:
    keys = Keys(settings)
    with TestClient(create_app(settings)) as client:
        documents = [page(*each) for each in PAGES]
        documents.append(page("vault-1", "The vault's only search release page.", [], "vault"))
        created = client.post(
            "/v1/knowledge/documents", json={"documents": documents}, headers=bearer(keys.admin)
        )
        assert created.status_code == 201, created.text
        groups = client.put(
            "/v1/knowledge/principals/ann", json={"groups": ["hr"]}, headers=bearer(keys.admin)
        )
        assert groups.json() == {"id": "ann", "groups": ["hr"]}
        yield client, keys


@pytest.fixture
def company(tmp_path: Path) -> Iterator[tuple[TestClient, Keys]]:
    with served(make_settings(tmp_path).replace(auth="keys")) as serving:
        yield serving


def found(client: TestClient, headers: dict[str, str], **asked: Any) -> set[str]:
    body = {**ASK, "collection": "company", "limit": 20, **asked}
    response = client.post("/v1/knowledge/query", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return {r["source_id"] for r in response.json()["results"]}


PUBLIC_PAGES = {"eng-1", "eng-2"}
HR_PAGES = {"hr-1", "hr-2"}


def test_each_reader_finds_only_what_its_principals_allow(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    assert found(client, bearer(keys.admin)) == {p[0] for p in PAGES}
    assert found(client, bearer(keys.plain)) == PUBLIC_PAGES
    assert found(client, bearer(keys.hr)) == PUBLIC_PAGES | HR_PAGES
    assert found(client, keys.as_user("bob")) == PUBLIC_PAGES
    assert found(client, keys.as_user("ann")) == PUBLIC_PAGES | HR_PAGES | {"ann-1"}
    # a filter on acl only narrows
    assert found(client, keys.as_user("ann"), filters={"acl": "group:hr"}) == HR_PAGES
    assert found(client, keys.as_user("bob"), filters={"acl": "group:hr"}) == set()
    both = {"acl": {"$in": ["user:ann", "group:hr"]}}
    assert found(client, keys.as_user("ann"), filters=both) == HR_PAGES | {"ann-1"}
    contains = {"acl": {"$contains": "user:ann"}}
    assert found(client, keys.as_user("ann"), filters=contains) == {"ann-1"}


def test_the_same_question_is_cached_per_principal_set(company: tuple[TestClient, Keys]) -> None:
    client, keys = company
    for _ in range(2):  # the second time from tier 1 (and by the hit path)
        assert found(client, keys.as_user("ann")) == PUBLIC_PAGES | HR_PAGES | {"ann-1"}
        assert found(client, keys.as_user("bob")) == PUBLIC_PAGES
        assert found(client, bearer(keys.plain)) == PUBLIC_PAGES


def test_a_key_without_delegate_sending_the_header_is_refused_everywhere(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    header = {**bearer(keys.plain), "X-Knowledge-User": "ann"}
    for method, path, body in [
        ("POST", "/v1/knowledge/query", {**ASK, "collection": "company"}),
        ("POST", "/v1/knowledge/retrieve", {"query": "release", "collection": "company"}),
        ("GET", "/v1/knowledge/documents?collection=company", None),
        ("GET", "/v1/knowledge/collections", None),
        ("POST", "/v1/knowledge/documents", page("x-1", "text", ["public"])),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ]:
        extra = {"accept": "application/json, text/event-stream"} if path == "/mcp" else {}
        response = client.request(method, path, json=body, headers={**header, **extra})
        assert response.status_code == 403, (path, response.text)
        assert response.json()["error"]["details"]["scope"] == "delegate"
    assert found(client, bearer(keys.plain), query="x-1 text") == PUBLIC_PAGES  # nothing written
    bad = client.post(
        "/v1/knowledge/query", json=ASK, headers={**bearer(keys.chat), "X-Knowledge-User": "a b"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "X-Knowledge-User"


def test_hidden_documents_do_not_exist_on_any_reading_route(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    bob, ann = keys.as_user("bob"), keys.as_user("ann")
    docs = client.get(
        "/v1/knowledge/documents?collection=company&limit=100", headers=bearer(keys.admin)
    ).json()["documents"]
    ids = {d["source_id"]: d["id"] for d in docs}
    assert {d["source_id"]: d["acl"] for d in docs}["hr-1"] == ["group:hr"]
    hidden = ids["hr-1"]
    # a hidden document is the 404 of a missing one, by id and by source id
    missing = client.get(
        "/v1/knowledge/documents/00000000-0000-0000-0000-000000000000", headers=bob
    )
    shown = client.get(f"/v1/knowledge/documents/{hidden}", headers=bob)
    assert shown.status_code == missing.status_code == 404
    assert client.get(f"/v1/knowledge/documents/{hidden}", headers=ann).json()["acl"] == [
        "group:hr"
    ]
    detail = "/v1/knowledge/detail/wiki/hr-1?collection=company"
    assert client.get(detail, headers=bob).status_code == 404
    assert client.get(detail, headers=ann).json()["source_id"] == "hr-1"
    # listing, paging and counts over what bob may read
    first = client.get("/v1/knowledge/documents?collection=company&limit=1", headers=bob).json()
    cursor = first["next_cursor"]
    second = client.get(
        f"/v1/knowledge/documents?collection=company&limit=1&cursor={cursor}", headers=bob
    ).json()
    listed = {d["source_id"] for d in first["documents"] + second["documents"]}
    assert listed == PUBLIC_PAGES and second["next_cursor"] is None
    sources = client.get("/v1/knowledge/sources", headers=bob).json()["sources"]
    assert sources == []  # the documents were written by no source
    counted = client.get("/v1/knowledge/collections", headers=bob).json()["collections"]
    assert [(c["name"], c["documents"]) for c in counted] == [("company", 2)]
    everything = client.get("/v1/knowledge/collections", headers=bearer(keys.admin)).json()
    assert {c["name"]: c["documents"] for c in everything["collections"]} == {
        "company": 6,
        "vault": 1,
    }
    # a collection all hidden is a missing one
    vault = client.post("/v1/knowledge/query", json={**ASK, "collection": "vault"}, headers=bob)
    assert vault.status_code == 404
    error = vault.json()["error"]
    assert error["type"] == "collection_not_found" and error["details"]["available"] == ["company"]
    for reader in (bob, bearer(keys.plain)):  # delegating, or reading as its own user
        health = client.get("/health", headers=reader).json()
        assert set(health["store"]) == {"backend", "status", "counts"}  # no store-wide one
    assert client.get("/health", headers=bearer(keys.admin)).json()["store"]["documents"] == 7
    models = client.get("/v1/models", headers=bob).json()["data"]
    assert "vault" not in {m["id"] for m in models}
    # facets and next_offset count only what is readable
    body = {**ASK, "collection": "company", "limit": 1, "facets": ["team"]}
    faceted = client.post("/v1/knowledge/query", json=body, headers=bob).json()
    assert faceted["facets"]["team"] == {"eng": 2} and faceted["next_offset"] == 1
    last = client.post("/v1/knowledge/query", json={**body, "offset": 1}, headers=bob).json()
    assert last["next_offset"] is None


def test_answers_chats_retrieval_and_ratings_keep_to_the_readers_documents(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    bob, ann = keys.as_user("bob"), keys.as_user("ann")
    question = {"query": "salary bands confidential", "collection": "company", "threshold": 0.0}
    for user, allowed in ((bob, PUBLIC_PAGES), (ann, PUBLIC_PAGES | HR_PAGES | {"ann-1"})):
        answer = client.post("/v1/knowledge/answer", json=question, headers=user).json()
        assert {s["metadata"]["source_id"] for s in answer["sources"]} <= allowed
        retrieved = client.post(
            "/v1/knowledge/retrieve",
            json={"query": "salary bands", "collection": "company", "top_k": 10},
            headers=user,
        ).json()
        assert {c["source_url"] for c in retrieved["retrieved_chunks"]} <= allowed
        completion = client.post(
            "/v1/chat/completions",
            json={"model": "company", "messages": [{"role": "user", "content": "salary bands"}]},
            headers=user,
        ).json()
        cited = {
            a["url_citation"]["url"]
            for a in completion["choices"][0]["message"].get("annotations", [])
        }
        assert cited <= allowed
    hr_answer = client.post("/v1/knowledge/answer", json=question, headers=ann).json()
    assert "hr-1" in {s["metadata"]["source_id"] for s in hr_answer["sources"]}
    rating = {"query_id": hr_answer["query_id"], "rating": "up"}
    assert client.post("/v1/knowledge/feedback", json=rating, headers=bob).status_code == 404
    assert client.post("/v1/knowledge/feedback", json=rating, headers=ann).status_code == 201


def test_access_lists_change_without_embedding_and_take_effect_at_once(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    admin, bob = bearer(keys.admin), keys.as_user("bob")
    docs = client.get("/v1/knowledge/documents?collection=company", headers=admin).json()
    hr_1 = next(d["id"] for d in docs["documents"] if d["source_id"] == "hr-1")
    assert found(client, bob) == PUBLIC_PAGES
    changed = client.patch(
        f"/v1/knowledge/documents/{hr_1}", json={"acl": ["public"]}, headers=admin
    )
    assert changed.json() == {"success": True, "acl": ["public"], "documents": 1, "embedded": 0}
    assert found(client, bob) == PUBLIC_PAGES | {"hr-1"}  # the cached answer went too
    refused = client.patch(f"/v1/knowledge/documents/{hr_1}", json={"acl": "public"}, headers=admin)
    assert refused.status_code == 400 and refused.json()["error"]["details"]["field"] == "acl"
    bad = client.patch(f"/v1/knowledge/documents/{hr_1}", json={"acl": ["everyone"]}, headers=admin)
    assert bad.json()["error"]["details"]["field"] == "acl[0]"
    trail = client.get("/v1/knowledge/audit", headers=admin).json()["entries"]
    assert trail[0]["changes"]["embedded"] == 0 and trail[0]["changes"]["acl"] == ["public"]


def test_a_group_change_is_in_force_on_another_process_within_seconds(tmp_path: Path) -> None:
    settings = make_settings(tmp_path).replace(auth="keys")
    """Another app on the same file is another process's service: it remembers groups
    for at most KEY_CACHE_SECONDS, as it remembers keys."""
    with served(settings) as (client, keys), TestClient(create_app(settings)) as other:
        ann = keys.as_user("ann")
        assert found(other, ann) == PUBLIC_PAGES | HR_PAGES | {"ann-1"}
        remembered = time.monotonic()  # other read ann's key and groups before this
        cleared = client.put(
            "/v1/knowledge/principals/ann", json={"groups": []}, headers=bearer(keys.admin)
        )
        assert cleared.json() == {"id": "ann", "groups": []}
        assert found(client, ann) == PUBLIC_PAGES | {"ann-1"}  # at once here
        in_force_from(
            lambda: found(other, ann) == PUBLIC_PAGES | {"ann-1"}, remembered + KEY_CACHE_SECONDS
        )


def in_force_from(condition: Callable[[], bool], due: float) -> None:
    """Wait for `condition`, which every check begun at monotonic time `due` or later
    must find (one begun before may not): bounded by the checks, however slow each is
    on a loaded machine, not by a time allowed for them."""
    while True:
        began = time.monotonic()
        if condition():
            return
        assert began < due, "not in force in time"
        time.sleep(0.2)


def wait_until(condition: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "not in force in time"
        time.sleep(0.2)


def test_the_command_line_sets_groups_keys_and_access_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    db_path = tmp_path / "k.db"
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(db_path))
    docs = tmp_path / "handbook"
    docs.mkdir()
    (docs / "pay.md").write_text("# Pay\n\nSalary bands are reviewed every spring.\n")
    assert main(["ingest", str(docs), "--name", "handbook", "--acl", "group:hr"]) == 0
    assert main(["groups", "set", "dave@example.com", "hr,finance"]) == 0
    assert main(["groups", "get", "dave@example.com"]) == 0
    assert capsys.readouterr().out.strip().endswith("hr,finance")
    created = main(["keys", "create", "--name", "ui", "--scopes", "read,delegate", "--user", "svc"])
    assert created == 0 and "reads as user 'svc'" in capsys.readouterr().out
    with sqlite3.connect(db_path) as db:
        (acl,) = db.execute("SELECT acl FROM documents").fetchone()
        assert acl == '["group:hr"]'
    assert main(["acl", "set", "--source", "handbook", "public,group:hr"]) == 0
    assert "embedded 0" in capsys.readouterr().out
    with sqlite3.connect(db_path) as db:
        (acl,) = db.execute("SELECT acl FROM documents").fetchone()
        assert acl == '["public", "group:hr"]'
    # the source remembers its list: a later run without --acl keeps it
    (docs / "pay.md").write_text("# Pay\n\nSalary bands are reviewed every autumn.\n")
    assert main(["ingest", str(docs), "--name", "handbook"]) == 0
    with sqlite3.connect(db_path) as db:
        (acl,) = db.execute("SELECT acl FROM documents").fetchone()
        assert acl == '["public", "group:hr"]'


def test_an_upload_takes_its_access_list_and_its_source_remembers_it(tmp_path: Path) -> None:
    """Auth off: the caller reads everything, so the stored list is read back by id."""
    with TestClient(create_app(make_settings(tmp_path))) as client:
        first = submit(client, [("pay.md", b"# Pay\n\nSalary bands.")], source="hr", acl="group:hr")
        assert wait_for(client, first)["status"] == "done"
        second = submit(client, [("bonus.md", b"# Bonus\n\nBonus rules.")], source="hr")
        assert wait_for(client, second)["status"] == "done"
        listed = client.get("/v1/knowledge/documents").json()["documents"]
        assert {d["source_id"]: d["acl"] for d in listed} == {
            "pay.md": ["group:hr"],
            "bonus.md": ["group:hr"],  # the source's own list
        }
        bad = client.post(
            "/v1/knowledge/files",
            files=parts([("x.md", b"x")]),
            data={"acl": "everyone"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "acl[0]"


def test_sources_count_only_the_readers_documents(company: tuple[TestClient, Keys]) -> None:
    client, keys = company
    admin = bearer(keys.admin)
    for name, acl in (("pay.md", "group:hr"), ("holidays.md", "public")):
        response = client.post(
            "/v1/knowledge/files",
            files=parts([(name, f"# {name}\n\nRules of {name}.".encode())]),
            data={"collection": "company", "source": f"handbook-{acl}", "acl": acl},
            headers=admin,
        )
        assert response.status_code == 202, response.text
        job = response.json()["job_id"]
        wait_until(
            lambda job=job: (
                client.get(f"/v1/knowledge/jobs/{job}", headers=admin).json()["status"] == "done"
            ),
            30,
        )

    def listed(headers: dict[str, str]) -> dict[str, int]:
        found = client.get("/v1/knowledge/sources?collection=company", headers=headers).json()
        return {s["name"]: s["documents"] for s in found["sources"]}

    assert listed(keys.as_user("bob")) == {"handbook-public": 1}
    assert listed(keys.as_user("ann")) == {"handbook-public": 1, "handbook-group:hr": 1}


USERS = ("ann", "bob", "carl")
GROUPS = ("hr", "eng", "ops")
PRINCIPAL = st.sampled_from(
    ("public", *(f"user:{u}" for u in USERS), *(f"group:{g}" for g in GROUPS))
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    acls=st.lists(st.lists(PRINCIPAL, max_size=3, unique=True), min_size=1, max_size=8),
    groups=st.dictionaries(st.sampled_from(USERS), st.lists(st.sampled_from(GROUPS), unique=True)),
    user=st.sampled_from(USERS),
)
def test_random_access_lists_on_every_reading_route(
    tmp_path_factory: pytest.TempPathFactory,
    acls: list[list[str]],
    groups: dict[str, list[str]],
    user: str,
) -> None:
    """Random documents with random access lists, random groups for the users: a user
    delegated for finds, lists, counts, fetches and rates exactly what its principals
    allow on every reading route, and a hidden document is a missing one."""
    settings_ = make_settings(tmp_path_factory.mktemp("acl")).replace(auth="keys")
    admin = asyncio.run(make_key(settings_, "operator", ["admin"]))
    chat = asyncio.run(make_key(settings_, "chat-ui", ["read", "delegate"]))
    with TestClient(create_app(settings_)) as client:
        for name, held in groups.items():
            put = client.put(
                f"/v1/knowledge/principals/{name}", json={"groups": held}, headers=bearer(admin)
            )
            assert put.status_code == 200
        documents = [
            page(f"doc-{i}", f"Release pipeline note {i} for the search service.", acl)
            for i, acl in enumerate(acls)
        ]
        created = client.post(
            "/v1/knowledge/documents", json={"documents": documents}, headers=bearer(admin)
        )
        assert created.status_code == 201, created.text
        mine = {"public", f"user:{user}", *(f"group:{g}" for g in groups.get(user, []))}
        allowed = {f"doc-{i}" for i, acl in enumerate(acls) if mine & set(acl)}
        asking = {**bearer(chat), "X-Knowledge-User": user}
        if allowed:
            assert found(client, asking) == allowed
            retrieved = client.post(
                "/v1/knowledge/retrieve",
                json={"query": "release pipeline", "collection": "company", "top_k": 20},
                headers=asking,
            ).json()
            assert {c["source_url"] for c in retrieved["retrieved_chunks"]} == allowed
        else:
            missing = client.post(
                "/v1/knowledge/query", json={**ASK, "collection": "company"}, headers=asking
            )
            assert missing.status_code == 404
        listing = client.get("/v1/knowledge/documents?collection=company", headers=asking)
        listed = {d["source_id"] for d in listing.json().get("documents", [])}
        assert listed == allowed
        counts = client.get("/v1/knowledge/collections", headers=asking).json()["collections"]
        assert {c["name"]: c["documents"] for c in counts} == (
            {"company": len(allowed)} if allowed else {}
        )
        for i, doc_id in enumerate(created.json()["ids"]):
            fetched = client.get(f"/v1/knowledge/documents/{doc_id}", headers=asking)
            detail = client.get(
                f"/v1/knowledge/detail/wiki/doc-{i}?collection=company", headers=asking
            )
            expected = 200 if f"doc-{i}" in allowed else 404
            assert fetched.status_code == detail.status_code == expected
