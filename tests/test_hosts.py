"""DNS-rebinding protection: every route, the hit path and /mcp answer only the hosts
the service is known by (web/access.py, TrustedHosts)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.settings import Settings
from knowledge_api.web.access import TrustedHosts, host_name
from tests.conftest import corpus, make_settings
from tests.test_access import error_of
from tests.test_hits import RAW, hits_of, post

QUERY = "/v1/knowledge/query"
DOCUMENTS = "/v1/knowledge/documents"
REBOUND = {"Host": "attacker.example.com", "Origin": "http://attacker.example.com"}
DOCUMENT = {"source_type": "wiki", "source_id": "rebound", "content": "Written by a page."}


def loopback(tmp_path: Path, **changes: object) -> Settings:
    """The default: bound to loopback, no keys, no extra hosts (not even TestClient's)."""
    return make_settings(tmp_path, **{"allowed_hosts": "", **changes})


def test_a_rebound_page_can_neither_write_read_nor_delete(tmp_path: Path) -> None:
    app = create_app(loopback(tmp_path))
    with TestClient(app, base_url="http://127.0.0.1:3006") as client:
        client.portal.call(app.state.service.ingest, corpus())
        created = client.post(DOCUMENTS, json=DOCUMENT)
        assert created.status_code == 201, created.text
        doc_id = created.json()["ids"][0]
        refused = [
            client.post(DOCUMENTS, json={**DOCUMENT, "source_id": "other"}, headers=REBOUND),
            client.get(f"{DOCUMENTS}/{doc_id}", headers=REBOUND),
            client.delete(f"{DOCUMENTS}/{doc_id}", headers=REBOUND),
            client.post(QUERY, json={"query": "login"}, headers=REBOUND),
            client.get("/health", headers=REBOUND),
            client.get("/livez", headers=REBOUND),
        ]
        for response in refused:
            error = error_of(response, 421)
            assert error["type"] == "misdirected_request"
            assert "KNOWLEDGE_ALLOWED_HOSTS" in error["message"]
            assert error["details"]["host"] == "attacker.example.com"
        assert client.get(f"{DOCUMENTS}/{doc_id}").status_code == 200  # not deleted
        listed = client.get(DOCUMENTS, params={"limit": 100}).json()
        assert "other" not in str(listed)


def test_a_cached_answer_is_no_answer_for_a_foreign_host(tmp_path: Path) -> None:
    app = create_app(loopback(tmp_path))
    with TestClient(app, base_url="http://localhost:3006") as client:
        client.portal.call(app.state.service.ingest, corpus())
        assert post(client).status_code == 200
        assert RAW in hits_of(client).rendered  # the next one is the hit path's
        hit = post(client)
        assert hit.status_code == 200 and hit.json()["metrics"]["cache_hit"] is True
        error_of(post(client, host="attacker.example.com"), 421)
        error_of(post(client, host="attacker.example.com:3006"), 421)
        assert post(client, host="127.0.0.1:3006").status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:3006",
        "localhost:3006",
        "LOCALHOST.",
        "[::1]:3006",
        "10.1.2.3:3006",  # any address: a probe or a proxy addressing the service by IP
        "[fe80::1]",
        "kb.example.com:443",  # listed
        "Docs.Example.Org",  # listed with any port
    ],
)
def test_hosts_answered(tmp_path: Path, host: str) -> None:
    settings = loopback(tmp_path, allowed_hosts="kb.example.com, docs.example.org:*")
    TrustedHosts.of(settings).check(host)


@pytest.mark.parametrize(
    "host", ["attacker.example.com", "localhost.attacker.example.com", "127.0.0.1.nip.io:80"]
)
def test_hosts_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(Exception, match="does not answer to the host") as raised:
        TrustedHosts.of(loopback(tmp_path, allowed_hosts="kb.example.com")).check(host)
    assert getattr(raised.value, "status", None) == 421


def test_the_bound_name_is_answered_and_star_answers_any(tmp_path: Path) -> None:
    TrustedHosts.of(loopback(tmp_path, host="kb.internal")).check("kb.internal:3006")
    TrustedHosts.of(loopback(tmp_path, allowed_hosts="*")).check("anything.example.com")
    assert host_name("[::1]:80") == "::1" and host_name("::1") == "::1"


def test_one_setting_and_its_former_name() -> None:
    old = Settings.from_env(environ={"KNOWLEDGE_MCP_ALLOWED_HOSTS": "a.example"}, env_file=None)
    assert old.allowed_hosts == "a.example"
    both = {"KNOWLEDGE_MCP_ALLOWED_HOSTS": "a.example", "KNOWLEDGE_ALLOWED_HOSTS": "b.example"}
    assert Settings.from_env(environ=both, env_file=None).allowed_hosts == "b.example"


async def test_mcp_answers_a_foreign_host_and_origin_in_the_error_shape(tmp_path: Path) -> None:
    app = create_app(loopback(tmp_path))
    ask = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"accept": "application/json, text/event-stream"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://evil.example") as c:
            foreign = await c.post("/mcp", json=ask, headers=accept)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            page = await c.post(
                "/mcp", json=ask, headers={**accept, "origin": "http://evil.example"}
            )
            own = await c.post(
                "/mcp", json=ask, headers={**accept, "origin": "http://localhost:5173"}
            )
    assert error_of(foreign, 421)["type"] == "misdirected_request"
    assert error_of(page, 403)["details"]["origin"] == "http://evil.example"
    assert own.status_code == 200, own.text
