"""GET /: the playground page and its files, as a browser would fetch them (the page
itself runs in a real browser in test_playground_browser.py)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.models import SOURCE_TYPES
from knowledge_api.routes import playground
from tests.conftest import make_settings
from tests.test_access import bearer, make_key


def test_the_page_and_its_files_come_from_the_service_under_a_strict_policy(
    client: TestClient,
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "http" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-request-id"]
    linked = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {"/playground/playground.js", "/playground/playground.css"} <= set(linked)
    for path in (p for p in linked if p.startswith("/playground/")):
        served = client.get(path)
        assert served.status_code == 200, path
        assert served.headers["content-security-policy"] == policy


def test_nothing_is_loaded_from_elsewhere_nor_inline() -> None:
    """What the policy would block anyway: no other origin, no inline script or style."""
    html = (playground.STATIC / playground.PAGE).read_text()
    assert "<style" not in html and not re.search(r"\s(?:style|on[a-z]+)=", html)
    assert re.findall(r"<script[^>]*>", html) == [
        '<script type="module" src="/playground/playground.js">'
    ]
    for name in (playground.PAGE, *playground.ASSETS):
        text = re.sub(r'xmlns="[^"]+"', "", (playground.STATIC / name).read_text())
        assert not re.search(r"https?://|//fonts|@import", text), name


def test_the_page_offers_every_source_type_and_labels_every_field() -> None:
    html = (playground.STATIC / playground.PAGE).read_text()
    offered = re.findall(r'name="sources" value="([a-z]+)"', html)
    assert tuple(offered) == SOURCE_TYPES
    labelled = set(re.findall(r'<label for="([^"]+)"', html))
    fields = set(re.findall(r'<(?:input|textarea)[^>]* id="([^"]+)"', html))
    assert fields and fields <= labelled


def test_an_unknown_file_is_a_404_naming_the_files(client: TestClient) -> None:
    missing = client.get("/playground/secrets.txt")
    assert missing.status_code == 404
    assert missing.json()["error"]["details"]["allowed"] == list(playground.ASSETS)
    assert client.get("/playground/..%2Fsettings.py").status_code == 404


async def test_the_page_stays_open_when_keys_are_required_but_the_api_does_not(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, auth="keys")
    token = await make_key(settings, "reader", ["read"])
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as browser:
            assert (await browser.get("/")).status_code == 200
            assert (await browser.get("/playground/playground.js")).status_code == 200
            body = {"query": "login", "synthesize": False}
            refused = await browser.post("/v1/knowledge/query", json=body)
            assert refused.status_code == 401
            allowed = await browser.post("/v1/knowledge/query", json=body, headers=bearer(token))
            assert allowed.status_code == 200


def test_the_page_passes_through_cors_for_another_origin(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, cors_origins="https://app.example.com"))
    with TestClient(app) as browser:
        page = browser.get("/", headers={"Origin": "https://app.example.com"})
        assert page.status_code == 200
        assert page.headers["access-control-allow-origin"] == "https://app.example.com"
        assert page.headers["content-security-policy"] == playground.CONTENT_SECURITY_POLICY
