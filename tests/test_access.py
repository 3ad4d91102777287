"""API keys, scopes, collections, rate limits and CORS over HTTP."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.errors import ConfigurationError, RateLimited
from knowledge_api.models import ApiKey
from knowledge_api.routes import ROUTES, health
from knowledge_api.settings import Settings
from knowledge_api.usecases import keys
from knowledge_api.web import access as access_module
from knowledge_api.web.access import RateLimiter, access_of, accesses
from tests.cli_env import cli_home
from tests.conftest import make_settings

QUERY = "/v1/knowledge/query"
DOCUMENTS = "/v1/knowledge/documents"
ASK = {"query": "login timeout", "synthesize": False}


async def make_key(
    settings: Settings, name: str, scopes: list[str], collections: tuple[str, ...] = ()
) -> str:
    """A key created as `knowledge-api keys create` creates it; its token."""
    service = build_service(settings)
    await service.open_storage()
    try:
        _, token = await keys.create(service, name, scopes, collections)
    finally:
        await service.stop()
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["success"] is False and set(body["error"]) == {"type", "message", "details"}
    return dict(body["error"])


@pytest.mark.parametrize(
    ("auth", "host", "required"),
    [
        ("auto", "127.0.0.1", False),
        ("auto", "::1", False),
        ("auto", "localhost", False),
        ("auto", "0.0.0.0", True),
        ("auto", "10.1.2.3", True),
        ("keys", "127.0.0.1", True),
        ("off", "0.0.0.0", False),
    ],
)
def test_keys_are_required_unless_the_service_binds_loopback(
    tmp_path: Path, auth: str, host: str, required: bool
) -> None:
    assert make_settings(tmp_path, auth=auth, host=host).auth_required is required


def test_without_keys_on_loopback_every_route_is_open(client: TestClient) -> None:
    assert client.post(QUERY, json=ASK).status_code == 200
    assert "store" in client.get("/health").json()


def test_requiring_keys_with_none_created_refuses_to_start(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, host="0.0.0.0"))
    with pytest.raises(ConfigurationError, match="knowledge-api keys create"), TestClient(app):
        pass


@pytest.fixture
async def secured(tmp_path: Path) -> tuple[Settings, dict[str, str]]:
    settings = make_settings(tmp_path, auth="keys")
    tokens = {
        "reader": await make_key(settings, "reader", ["read"]),
        "writer": await make_key(settings, "writer", ["read", "write"]),
        "admin": await make_key(settings, "admin", ["admin"]),
    }
    return settings, tokens


def test_no_key_or_an_unknown_one_is_401_with_www_authenticate(
    secured: tuple[Settings, dict[str, str]],
) -> None:
    settings, _ = secured
    with TestClient(create_app(settings)) as client:
        for headers in ({}, bearer("kapi_unknown"), {"X-API-Key": "kapi_unknown"}):
            response = client.post(QUERY, json=ASK, headers=headers)
            error = error_of(response, 401)
            assert error["type"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_key_without_the_scope_is_403_naming_it(
    secured: tuple[Settings, dict[str, str]],
) -> None:
    settings, tokens = secured
    document = {"source_type": "wiki", "source_id": "a", "content": "Alpha text."}
    with TestClient(create_app(settings)) as client:
        assert client.post(QUERY, json=ASK, headers=bearer(tokens["reader"])).status_code == 200
        error = error_of(
            client.post(DOCUMENTS, json=document, headers=bearer(tokens["reader"])), 403
        )
        assert error["type"] == "forbidden" and "'write'" in error["message"]
        details = error["details"]
        assert details.pop("request_id") and details == {"scope": "write", "key": "reader"}
        as_header = {"X-API-Key": tokens["writer"]}
        assert client.post(DOCUMENTS, json=document, headers=as_header).status_code == 201
        validate = {"collection": "default", "test_queries": ["alpha"]}
        error = error_of(
            client.post("/v1/knowledge/validate", json=validate, headers=as_header), 403
        )
        assert "'admin'" in error["message"]
        admin = bearer(tokens["admin"])  # admin may do everything
        assert (
            client.post("/v1/knowledge/validate", json=validate, headers=admin).status_code == 200
        )
        assert client.post(DOCUMENTS, json=document, headers=admin).status_code == 201


def test_health_stays_open_and_shows_details_only_to_readers(
    secured: tuple[Settings, dict[str, str]],
) -> None:
    settings, tokens = secured
    with TestClient(create_app(settings)) as client:
        anonymous = client.get("/health")
        reader = client.get("/health", headers=bearer(tokens["reader"])).json()
    assert anonymous.status_code == 200
    assert set(anonymous.json()) == {"status", "service", "version", "timestamp"}
    assert {"store", "embedder", "cache"} <= set(reader)


def test_a_keys_access_is_made_once_and_follows_the_key() -> None:
    key = ApiKey("reader", "a" * 64, ("read",), None)
    assert access_of(key) is access_of(ApiKey("reader", "a" * 64, ("read",), None))
    assert access_of(key).scopes == {"read"} and access_of(key).collections is None
    again = ApiKey("reader", "a" * 64, ("read",), None)  # read again from the store
    made = access_of(key)
    assert access_of(again) is made and accesses["a" * 64][0] is again
    changed = ApiKey("reader", "a" * 64, ("read", "write"), ("docs",))  # the same hash
    assert access_of(changed).scopes == {"read", "write"}
    assert access_of(changed).collections == {"docs"}


class KnownGroups:
    """The key store's remembered groups, as `reading` asks them: the same tuple while
    remembered, a new one once read again."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[str, ...]] = {"ann": ("ops",)}

    async def groups(self, user: str) -> tuple[str, ...]:
        return self.known.get(user, ())


async def test_a_readers_principals_are_made_once_and_follow_its_groups() -> None:
    keys = KnownGroups()
    gate = cast(Any, SimpleNamespace(service=SimpleNamespace(keys=keys)))
    caller = access_of(ApiKey("ann-key", "c" * 64, ("read",), None, user="ann", groups=("dev",)))
    first = await access_module.reading(gate, caller, {})
    assert first.principals == {"public", "user:ann", "group:dev", "group:ops"}
    assert await access_module.reading(gate, caller, {}) is first
    keys.known["ann"] = ("sales",)  # the groups changed, read again from the store
    changed = await access_module.reading(gate, caller, {})
    assert changed.principals == {"public", "user:ann", "group:dev", "group:sales"}
    other = access_of(ApiKey("ann-key", "c" * 64, ("read",), None, user="ann"))  # key changed
    assert (await access_module.reading(gate, other, {})).principals == {
        "public",
        "user:ann",
        "group:sales",
    }


def test_a_revoked_key_stops_working(secured: tuple[Settings, dict[str, str]]) -> None:
    settings, tokens = secured
    app = create_app(settings)
    with TestClient(app) as client:
        assert client.post(QUERY, json=ASK, headers=bearer(tokens["reader"])).status_code == 200
        client.portal.call(keys.revoke, app.state.service, "reader")
        error_of(client.post(QUERY, json=ASK, headers=bearer(tokens["reader"])), 401)


def test_only_the_token_hash_is_stored(secured: tuple[Settings, dict[str, str]]) -> None:
    settings, tokens = secured
    stored = sqlite3.connect(settings.db_path).execute("SELECT * FROM api_keys").fetchall()
    assert len(stored) == 3
    assert all(token not in repr(stored) for token in tokens.values())


def test_the_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, rate_limit=2))) as client:
        statuses = [client.post(QUERY, json=ASK).status_code for _ in range(2)]
        limited = client.post(QUERY, json=ASK)
    assert statuses == [200, 200]
    error = error_of(limited, 429)
    assert error["type"] == "rate_limited" and int(limited.headers["retry-after"]) >= 1


def test_the_bucket_refills_with_time() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])
    for _ in range(60):
        limiter.take("k")
    with pytest.raises(RateLimited) as raised:
        limiter.take("k")
    assert raised.value.headers["Retry-After"] == "1"
    limiter.take("other")  # each caller has its own bucket
    now[0] = 1.0
    limiter.take("k")


def test_idle_buckets_are_forgotten_and_busy_ones_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access_module, "MAX_BUCKETS", 3)
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    limiter.take("busy")
    limiter.take("busy")
    for caller in ("a", "b"):
        limiter.take(caller)
    now[0] = 61.0
    limiter.take("c")
    limiter.take("d")  # a fourth bucket: the idle ones go
    assert set(limiter._buckets) == {"c", "d"}
    now[0] = 62.0
    limiter.take("e")
    limiter.take("f")  # c and d are a second old: they stay, and so does their count
    limiter.take("c")
    with pytest.raises(RateLimited):
        limiter.take("c")


def test_cors_preflight_for_an_allowed_origin(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, cors_origins="https://chat.example.com")
    preflight = {
        "Origin": "https://chat.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    with TestClient(create_app(settings)) as client:
        allowed = client.options(QUERY, headers=preflight)
        other = client.options(QUERY, headers={**preflight, "Origin": "https://evil.example"})
        simple = client.post(QUERY, json=ASK, headers={"Origin": "https://chat.example.com"})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://chat.example.com"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    assert simple.headers["access-control-allow-origin"] == "https://chat.example.com"


def test_cors_for_any_origin_allows_no_credentials(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, cors_origins="*"))) as client:
        response = client.post(QUERY, json=ASK, headers={"Origin": "https://any.example"})
    assert response.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in response.headers


FILES = "/v1/knowledge/files"
EVIL = "http://evil.example"
UPLOAD = [("file", ("kestrel.md", b"# Kestrel\n\nKestrel rotates the keys."))]
DOCUMENT = {"source_type": "wiki", "source_id": "kestrel", "content": "Kestrel rotates."}


@pytest.mark.parametrize(
    "headers",
    [{"Origin": EVIL}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}],
    ids=["another-origin", "opaque-origin", "cross-site-without-origin"],
)
def test_a_page_of_another_site_cannot_write(tmp_path: Path, headers: dict[str, str]) -> None:
    """On the default loopback service without keys, a page of any site could post a
    form (no CORS preflight) and have its text indexed: every write from a browser
    page must come from the service's own pages or KNOWLEDGE_CORS_ORIGINS, as /mcp's
    requests must; reads are answered as before (the browser keeps them from the page)."""
    settings = make_settings(
        tmp_path, cors_origins="https://chat.example.com", upload_dir=str(tmp_path / "up")
    )
    with TestClient(create_app(settings)) as client:
        upload = client.post(FILES, headers=headers, files=UPLOAD)
        created = client.post(DOCUMENTS, json=DOCUMENT, headers=headers)
        stored = client.post(DOCUMENTS, json=DOCUMENT)
        doc_id = stored.json()["ids"][0]
        deleted = client.delete(f"{DOCUMENTS}/{doc_id}", headers=headers)
        read = client.get(f"{DOCUMENTS}/{doc_id}", headers=headers)
        listed = client.get("/v1/knowledge/jobs/x", headers=headers)
    for response in (upload, created, deleted):
        error = error_of(response, 403)
        assert error["message"].startswith(
            f"{response.request.method} {response.request.url.path} "
        )
        if "Origin" in headers:
            assert "KNOWLEDGE_CORS_ORIGINS" in error["message"]
            assert error["details"]["origin"] == headers["Origin"]
        else:
            assert "Sec-Fetch-Site: cross-site" in error["message"]
    assert stored.status_code == 201 and read.status_code == 200
    assert listed.status_code == 404
    assert not any((tmp_path / "up").glob("*/*"))  # the refused upload kept nothing


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
        {"Origin": "http://localhost:3006"},
        {"Origin": "http://127.0.0.1:8080"},
        {"Origin": "https://chat.example.com", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
    ids=["no-browser", "own-page", "localhost", "loopback-port", "listed", "same-site"],
)
def test_writes_from_the_services_own_pages_listed_origins_and_programs_are_taken(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    settings = make_settings(
        tmp_path, cors_origins="https://chat.example.com", upload_dir=str(tmp_path / "up")
    )
    with TestClient(create_app(settings)) as client:
        upload = client.post(FILES, headers=headers, files=UPLOAD)
        created = client.post(DOCUMENTS, json=DOCUMENT, headers=headers)
        deleted = client.delete(f"{DOCUMENTS}/{created.json()['ids'][0]}", headers=headers)
    assert (upload.status_code, created.status_code, deleted.status_code) == (202, 201, 200)


def test_any_origin_listed_takes_writes_from_any_page(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, cors_origins="*"))) as client:
        created = client.post(DOCUMENTS, json=DOCUMENT, headers={"Origin": EVIL})
    assert created.status_code == 201


def test_keys_cli_prints_the_token_once_and_never_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    assert main(["keys", "create", "--name", "ui", "--scopes", "read", "--collections", "a"]) == 0
    token = capsys.readouterr().out.splitlines()[-1]
    assert token.startswith("kapi_") and len(token) >= 5 + 43
    assert main(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert "ui\tscopes=read\tcollections=a" in listed and token not in listed
    assert main(["keys", "create", "--name", "ui", "--scopes", "read"]) == 2
    assert main(["keys", "create", "--name", "x", "--scopes", "root"]) == 2
    assert main(["keys", "revoke", "ui"]) == 0
    assert main(["keys", "revoke", "ui"]) == 1
    assert "no key named 'ui'" in capsys.readouterr().err


async def test_metrics_take_an_admin_key_or_the_metrics_token(
    secured: tuple[Settings, dict[str, str]],
) -> None:
    settings, tokens = secured
    settings = settings.replace(metrics_token=Secret("scrape-me"))
    with TestClient(create_app(settings)) as client:
        assert client.get("/metrics", headers=bearer("scrape-me")).status_code == 200
        assert client.get("/metrics", headers=bearer(tokens["admin"])).status_code == 200
        error_of(client.get("/metrics", headers=bearer(tokens["reader"])), 403)
        error_of(client.get("/metrics", headers=bearer("scrape-you")), 401)
        error_of(client.get("/metrics"), 401)
        # the metrics token opens /metrics only
        error_of(client.post(QUERY, json=ASK, headers=bearer("scrape-me")), 401)


def test_the_probes_need_no_key(secured: tuple[Settings, dict[str, str]]) -> None:
    settings, _ = secured
    with TestClient(create_app(settings)) as client:
        assert client.get("/livez").status_code == 200
        assert client.get("/readyz").status_code == 200


def test_missing_and_unknown_keys_spend_the_client_addresss_budget(
    secured: tuple[Settings, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys cannot be guessed faster than the rate limit: refusals count, per address.
    The limiter's clock stands still: 20 a minute refill one every 3 s, which a loaded
    machine's 42 requests may take."""
    settings, tokens = secured
    monkeypatch.setattr(
        access_module, "rate_limiter", lambda s: RateLimiter(s.rate_limit, clock=lambda: 0.0)
    )
    with TestClient(create_app(settings.replace(rate_limit=20))) as client:
        statuses = []
        for i in range(40):
            guess = bearer(f"kapi_guess{i}") if i % 2 else {"X-API-Key": f"kapi_guess{i}"}
            response = client.post(QUERY, json=ASK, headers=guess if i % 3 else {})
            statuses.append(response.status_code)
        limited = client.post(QUERY, json=ASK, headers=bearer("kapi_another"))
        # a valid key has a budget of its own
        allowed = client.post(QUERY, json=ASK, headers=bearer(tokens["reader"]))
    assert statuses == [401] * 20 + [429] * 20
    error = error_of(limited, 429)
    assert error["type"] == "rate_limited" and int(limited.headers["retry-after"]) >= 1
    assert allowed.status_code == 200


def test_a_refusal_on_the_hit_path_is_counted_once(
    secured: tuple[Settings, dict[str, str]],
) -> None:
    settings, tokens = secured
    with TestClient(create_app(settings.replace(rate_limit=4))) as client:
        reader = bearer(tokens["reader"])
        assert [client.post(QUERY, json=ASK, headers=reader).status_code for _ in range(2)] == [
            200,
            200,
        ]  # the second one a hit
        guesses = [
            client.post(QUERY, json=ASK, headers=bearer("kapi_x")).status_code for _ in range(5)
        ]
    assert guesses == [401] * 4 + [429]


async def test_health_shows_the_whole_store_only_to_an_admin_key(tmp_path: Path) -> None:
    """A key limited to some collections, and a read key whose principals may see only
    part of the store, see no store-wide count (and why), path or error."""
    settings = make_settings(tmp_path, auth="keys")
    admin = await make_key(settings, "root", ["admin"])
    reader = await make_key(settings, "reader", ["read"])
    ops_only = await make_key(settings, "ops-reader", ["read"], ("ops",))
    with TestClient(create_app(settings)) as client:
        full = client.get("/health", headers=bearer(admin)).json()
        seen = [client.get("/health", headers=bearer(key)).json() for key in (reader, ops_only)]
    assert {"path", "documents", "chunks"} <= set(full["store"])
    for limited in seen:
        assert limited["store"] == {
            "backend": "sqlite",
            "status": full["store"]["status"],
            "counts": health.COUNTS_LEFT_OUT,
        }
        assert str(settings.db_path) not in json.dumps(limited)
        assert {"embedder", "synthesizer", "cache"} <= set(limited)


def test_a_limited_caller_sees_how_far_seeding_is_but_not_its_error() -> None:
    """The seed's progress says nothing of the store's documents; its error, an
    exception's text, may name a path."""
    body = {
        "status": "healthy",
        "service": "knowledge-api",
        "version": "1",
        "timestamp": "now",
        "store": {"backend": "sqlite", "status": "healthy", "path": "/srv/kb.db"},
        "seeding": {"done": 2, "total": 3, "error": "OSError: /srv/seed/a.md"},
        "sync": {"status": "ok", "source": "/srv/repo"},
    }
    seen = health.limited(body)
    assert seen["seeding"] == {"done": 2, "total": 3}
    assert seen["sync"] == {"status": "ok"}
    assert "/srv" not in json.dumps(seen)


def scope_table() -> dict[str, set[str]]:
    """api.md's table of scopes: each scope's row, and the routes it lists."""
    text = (Path(knowledge_api.__file__).parent / "docs" / "api.md").read_text()
    table = text[text.index("| scope | routes |") :].split("\n\n")[0]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines()[2:]:
        scope, routes = (cell.strip() for cell in line.strip("|").split("|"))
        assert scope not in rows, f"two rows of {scope}"
        rows[scope.strip("`")] = set(re.findall(r"`([A-Z]+ /[^`]*)`", routes))
    return rows


def test_the_scope_table_has_one_row_per_scope_listing_every_route() -> None:
    rows = scope_table()
    assert set(rows) == {"none", "read", "write", "admin"}
    expected: dict[str, set[str]] = {scope: set() for scope in rows}
    for route in ROUTES:
        scope = "none" if route.contract.scope == "public" else route.contract.scope
        expected[scope].add(f"{route.contract.method} {route.path.replace(':path', '')}")
    assert rows == expected
