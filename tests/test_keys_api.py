"""API keys over HTTP: created (the token shown once), listed and read (never a token),
revoked; the same rules as `knowledge-api keys create`, admin scope only, and a key
made here with a user and groups reading only what its principals allow."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from tests.cli_env import cli_settings
from tests.conftest import make_settings
from tests.test_access import bearer, error_of, make_key
from tests.test_permissions import HR_PAGES, PUBLIC_PAGES, Keys, found, served

KEYS = "/v1/knowledge/keys"


@pytest.fixture
def company(tmp_path: Path) -> Iterator[tuple[TestClient, Keys]]:
    with served(make_settings(tmp_path).replace(auth="keys")) as serving:
        yield serving


def create(client: TestClient, admin: str, **body: Any) -> dict[str, Any]:
    response = client.post(KEYS, json=body, headers=bearer(admin))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_a_key_created_over_http_reads_as_its_user_and_groups(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    made = create(client, keys.admin, name="hr-bot", scopes=["read"], user="dave", groups=["hr"])
    assert made["token"].startswith("kapi_")
    assert {k: made[k] for k in ("name", "scopes", "collections", "user", "groups")} == {
        "name": "hr-bot",
        "scopes": ["read"],
        "collections": None,
        "user": "dave",
        "groups": ["hr"],
    }
    assert found(client, bearer(made["token"])) == PUBLIC_PAGES | HR_PAGES
    # the user alone, and groups alone, may be given
    ann = create(client, keys.admin, name="as-ann", scopes=["read"], user="ann")
    assert found(client, bearer(ann["token"])) == PUBLIC_PAGES | HR_PAGES | {"ann-1"}
    group = create(client, keys.admin, name="hr-group", scopes=["read"], groups=["hr"])
    assert group["user"] is None
    assert found(client, bearer(group["token"])) == PUBLIC_PAGES | HR_PAGES
    hidden = client.get("/v1/knowledge/documents/" + "x", headers=bearer(made["token"]))
    assert hidden.status_code == 404


def test_a_delegating_key_made_over_http_asks_for_its_users(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    ui = create(client, keys.admin, name="ui", scopes=["read", "delegate"])["token"]
    asking = {**bearer(ui), "X-Knowledge-User": "ann"}
    assert found(client, asking) == PUBLIC_PAGES | HR_PAGES | {"ann-1"}
    plain = create(client, keys.admin, name="no-delegate", scopes=["read"])["token"]
    refused = client.post(
        "/v1/knowledge/query",
        json={"query": "release"},
        headers={**bearer(plain), "X-Knowledge-User": "ann"},
    )
    assert error_of(refused, 403)["details"]["scope"] == "delegate"


def test_listing_and_reading_never_show_a_token(company: tuple[TestClient, Keys]) -> None:
    client, keys = company
    made = create(client, keys.admin, name="scripts", scopes=["read", "write"], collections=["a"])
    listed = client.get(KEYS, headers=bearer(keys.admin))
    assert listed.status_code == 200, listed.text
    names = [key["name"] for key in listed.json()["keys"]]
    assert names == sorted(names) and {"operator", "chat-ui", "scripts"} <= set(names)
    assert made["token"] not in listed.text and "key_hash" not in listed.text
    one = client.get(f"{KEYS}/scripts", headers=bearer(keys.admin)).json()
    assert one == {k: v for k, v in made.items() if k != "token"}
    assert one["collections"] == ["a"] and one["created_at"]
    missing = client.get(f"{KEYS}/nobody", headers=bearer(keys.admin))
    assert error_of(missing, 404)["details"]["name"] == "nobody"


def test_a_revoked_key_is_refused_at_once(company: tuple[TestClient, Keys]) -> None:
    client, keys = company
    token = create(client, keys.admin, name="short-lived", scopes=["read"])["token"]
    assert client.post("/v1/knowledge/query", json={"query": "x"}, headers=bearer(token)).is_success
    gone = client.delete(f"{KEYS}/short-lived", headers=bearer(keys.admin))
    assert gone.json() == {"success": True, "revoked": "short-lived"}
    again = client.post("/v1/knowledge/query", json={"query": "x"}, headers=bearer(token))
    assert error_of(again, 401)["message"] == "unknown or revoked API key"
    assert error_of(client.delete(f"{KEYS}/short-lived", headers=bearer(keys.admin)), 404)
    assert error_of(client.get(f"{KEYS}/short-lived", headers=bearer(keys.admin)), 404)


def test_only_admin_keys_manage_keys(company: tuple[TestClient, Keys]) -> None:
    client, keys = company
    for token in (keys.plain, keys.chat, keys.hr):
        for method, path in (("POST", KEYS), ("GET", KEYS), ("GET", f"{KEYS}/operator")):
            body = {"name": "x", "scopes": ["admin"]} if method == "POST" else None
            refused = client.request(method, path, json=body, headers=bearer(token))
            assert error_of(refused, 403)["details"]["scope"] == "admin"
        refused = client.delete(f"{KEYS}/operator", headers=bearer(token))
        assert error_of(refused, 403)["details"]["scope"] == "admin"
    assert client.get(KEYS).status_code == 401
    assert client.get(f"{KEYS}/operator", headers=bearer(keys.admin)).status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"scopes": ["read"]}, "name", "is required"),
        ({"name": "has space", "scopes": ["read"]}, "name", "must be 1-64 letters"),
        ({"name": "k"}, "scopes", "is required"),
        ({"name": "k", "scopes": []}, "scopes", "must be a list of: read, write, admin"),
        ({"name": "k", "scopes": ["read", "root"]}, "scopes", "must be a list of"),
        ({"name": "k", "scopes": "read"}, "scopes", "must be a list of"),
        ({"name": "k", "scopes": ["read"], "collections": ["no/slash"]}, "collections[0]", ""),
        ({"name": "k", "scopes": ["read"], "collections": "a"}, "collections", "must be a list"),
        ({"name": "k", "scopes": ["read"], "user": "a b"}, "user", "must be a user id"),
        ({"name": "k", "scopes": ["read"], "groups": ["h r"]}, "groups[0]", "must be a group"),
        ({"name": "k", "scopes": ["read"], "groups": "hr"}, "groups", "must be a list"),
        ({"name": "k", "scopes": ["read"], "expires": "never"}, "expires", ""),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_the_rule(
    company: tuple[TestClient, Keys], body: dict[str, Any], field: str, rule: str
) -> None:
    client, keys = company
    error = error_of(client.post(KEYS, json=body, headers=bearer(keys.admin)), 400)
    assert error["details"]["field"] == field
    assert error["details"]["rule"].startswith(rule)
    assert client.get(f"{KEYS}/k", headers=bearer(keys.admin)).status_code == 404


def test_a_name_in_use_is_a_409_and_the_first_key_keeps_working(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    first = create(client, keys.admin, name="twice", scopes=["read"])["token"]
    again = client.post(
        KEYS, json={"name": "twice", "scopes": ["admin"]}, headers=bearer(keys.admin)
    )
    error = error_of(again, 409)
    assert (error["type"], error["details"]["field"]) == ("name_taken", "name")
    assert client.get(f"{KEYS}/twice", headers=bearer(keys.admin)).json()["scopes"] == ["read"]
    assert client.post("/v1/knowledge/query", json={"query": "x"}, headers=bearer(first)).is_success


def test_a_key_limited_to_collections_creates_no_key_that_reaches_further(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path).replace(auth="keys")
    boss = asyncio.run(make_key(settings, "boss", ["admin"]))
    local = asyncio.run(make_key(settings, "team-admin", ["admin"], ("team",)))
    with TestClient(create_app(settings)) as client:
        unlimited = client.post(KEYS, json={"name": "k", "scopes": ["read"]}, headers=bearer(local))
        assert error_of(unlimited, 403)["details"]["field"] == "collections"
        other = {"name": "k", "scopes": ["read"], "collections": ["team", "finance"]}
        refused = client.post(KEYS, json=other, headers=bearer(local))
        assert error_of(refused, 403)["details"]["collection"] == "finance"
        own = {"name": "k", "scopes": ["read"], "collections": ["team"]}
        assert client.post(KEYS, json=own, headers=bearer(local)).status_code == 201
        seen = [k["name"] for k in client.get(KEYS, headers=bearer(local)).json()["keys"]]
        assert seen == ["k", "team-admin"]
        assert error_of(client.get(f"{KEYS}/boss", headers=bearer(local)), 404)
        assert error_of(client.delete(f"{KEYS}/boss", headers=bearer(local)), 404)
        assert client.get(f"{KEYS}/boss", headers=bearer(boss)).status_code == 200


def test_creating_and_revoking_are_audited_as_the_command_line_does(
    company: tuple[TestClient, Keys],
) -> None:
    client, keys = company
    create(client, keys.admin, name="audited", scopes=["read"], user="eve", groups=["ops"])
    client.delete(f"{KEYS}/audited", headers=bearer(keys.admin))
    entries = client.get("/v1/knowledge/audit", headers=bearer(keys.admin)).json()["entries"]
    made, gone = (
        next(e for e in entries if e["action"] == action)
        for action in ("POST /v1/knowledge/keys", "DELETE /v1/knowledge/keys/{name}")
    )
    assert made["key"] == "operator" and gone["key"] == "operator"
    assert made["changes"] == {
        "key": "audited",
        "scopes": ["read"],
        "collections": [],
        "user": "eve",
        "groups": ["ops"],
    }
    assert gone["changes"] == {"key": "audited"}


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The settings of a service and of the command line beside it: one store."""
    found = cli_settings(request, tmp_path, monkeypatch)
    return found.replace(auth="keys", allowed_hosts="testserver")


def test_the_command_line_and_http_manage_the_same_keys(
    shared: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = asyncio.run(make_key(shared, "boss", ["admin"]))
    with TestClient(create_app(shared)) as client:
        create(client, admin, name="from-http", scopes=["read", "delegate"], groups=["ops"])
        assert main(["keys", "list"]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("from-http"))
        assert "scopes=read,delegate" in line and "groups=ops" in line
        assert main(["keys", "create", "--name", "from-http", "--scopes", "read"]) == 2
        assert "--name: is already the name of a key" in capsys.readouterr().err
        assert (
            main(["keys", "create", "--name", "from-cli", "--scopes", "read", "--user", "u"]) == 0
        )
        one = client.get(f"{KEYS}/from-cli", headers=bearer(admin)).json()
        assert (one["scopes"], one["user"], one["collections"]) == (["read"], "u", None)
        taken = client.post(
            KEYS, json={"name": "from-cli", "scopes": ["read"]}, headers=bearer(admin)
        )
        assert error_of(taken, 409)["details"]["field"] == "name"
        assert client.delete(f"{KEYS}/from-cli", headers=bearer(admin)).status_code == 200
        assert main(["keys", "revoke", "from-cli"]) == 1
