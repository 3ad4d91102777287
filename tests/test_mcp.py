"""The MCP server, through the SDK's own client: streamable HTTP at /mcp (in process,
behind the API keys) and stdio (`python -m knowledge_api mcp`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.mcp import endpoint as mcp_endpoint
from knowledge_api.mcp.endpoint import McpEndpoint
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.conftest import corpus, make_settings
from tests.test_access import make_key

URL = "http://127.0.0.1/mcp"
READ_TOOLS = {"search", "answer", "get_document", "list_collections"}


async def load(settings: Settings, docs: list[Document] | None = None) -> None:
    service = build_service(settings)
    await service.start()
    try:
        await service.ingest(docs if docs is not None else corpus())
    finally:
        await service.stop()


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Starlette]:
    """The app, its lifespan entered (and left) in the test's own task."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def connected(app: Starlette, token: str = "") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), headers=headers)
    async with http, Client(streamable_http_client(URL, http_client=http)) as client:
        yield client


def text_of(result: Any) -> str:
    assert result.content, result
    return "".join(part.text for part in result.content)


@pytest.fixture
async def open_settings(tmp_path: Path) -> Settings:
    """Keys off, the corpus loaded."""
    settings = make_settings(tmp_path, answer_threshold="0.3")
    await load(settings)
    return settings


async def test_tools_are_listed_with_descriptions(open_settings: Settings) -> None:
    async with serving(open_settings) as app:
        async with connected(app) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS | {"add_document"}
        for tool in tools.values():
            assert tool.description and len(tool.description) > 40
        assert "query" in tools["search"].input_schema["properties"]
        for tool in tools.values():  # the request context is the server's, never an argument
            assert "ctx" not in tool.input_schema["properties"]


async def test_search_answer_document_and_collections(open_settings: Settings) -> None:
    async with serving(open_settings) as app, connected(app) as client:
        found = await client.call_tool("search", {"query": "login timeout", "limit": 2})
        assert not found.is_error, text_of(found)
        body = json.loads(text_of(found))
        assert body["results"][0]["source_id"] == "SIAM-101"

        answered = await client.call_tool(
            "answer", {"query": "Which audio formats does asset ingestion accept?"}
        )
        assert not answered.is_error, text_of(answered)
        grounded = json.loads(text_of(answered))
        assert grounded["status"] == "success" and grounded["answer"]
        assert grounded["sources"][0]["citation_index"] == 1
        assert "overall" in grounded["confidence"]

        doc = await client.call_tool("get_document", {"type": "jira", "id": "SIAM-101"})
        assert json.loads(text_of(doc))["title"] == "Login timeout"

        listed = json.loads(text_of(await client.call_tool("list_collections", {})))
        assert listed["collections"][0]["name"] == "default"
        assert listed["collections"][0]["documents"] >= 5


async def test_long_results_are_truncated_with_the_offset_of_the_rest(
    open_settings: Settings,
) -> None:
    long = "\n\n".join(f"Step {n}: check the release notes of build {n}." for n in range(80))
    args = {"type": "wiki", "id": "release-checklist"}
    settings = open_settings.replace(mcp_max_chars=1000)
    async with serving(settings) as app, connected(app) as client:
        added = await client.call_tool(
            "add_document",
            {"source_type": "wiki", "source_id": "release-checklist", "content": long},
        )
        assert not added.is_error, text_of(added)
        first = text_of(await client.call_tool("get_document", args))
        head, _, note = first.partition("\n[truncated: ")
        assert len(head) == 1000 and note.startswith("characters 0-1000 of ")
        assert "offset=1000" in note
        total = int(note.split(" of ")[1].split(" ")[0])
        parts, offset = [head], 1000
        while offset < total:
            more = text_of(await client.call_tool("get_document", {**args, "offset": offset}))
            part = more.partition("\n[truncated: ")[0]
            parts.append(part)
            offset += len(part)
        assert len(parts) > 2
        assert json.loads("".join(parts))["content"] == long
        beyond = await client.call_tool("get_document", {**args, "offset": total + 5})
        assert beyond.is_error and "offset" in text_of(beyond)


async def test_search_pages_results_by_skip(open_settings: Settings) -> None:
    """`offset` pages a long text by characters; `skip` pages the results."""
    args = {"query": "asset", "limit": 2}
    async with serving(open_settings) as app, connected(app) as client:
        first = json.loads(text_of(await client.call_tool("search", args)))
        assert first["next_skip"] == 2
        second = json.loads(
            text_of(await client.call_tool("search", {**args, "skip": first["next_skip"]}))
        )
        both = json.loads(text_of(await client.call_tool("search", {**args, "limit": 4})))
        ids = [r["id"] for r in first["results"] + second["results"]]
        assert len(ids) == 4 and ids == [r["id"] for r in both["results"]]
        refused = await client.call_tool("search", {**args, "skip": 201})
        assert refused.is_error and "skip" in text_of(refused)
        ranked = await client.call_tool("search", {**args, "ranking": {"fusion": "fast"}})
        assert ranked.is_error and "ranking.fusion" in text_of(ranked)


async def test_bad_arguments_are_tool_errors_naming_the_field(open_settings: Settings) -> None:
    async with serving(open_settings) as app, connected(app) as client:
        result = await client.call_tool("search", {"query": "login", "limit": 500})
        assert result.is_error and "limit" in text_of(result)
        result = await client.call_tool("search", {"query": "login", "sources": ["nope"]})
        assert result.is_error and "sources" in text_of(result)
        result = await client.call_tool("get_document", {"type": "nope", "id": "x"})
        assert result.is_error and "type" in text_of(result)
        result = await client.call_tool("answer", {"query": "   "})
        assert result.is_error and "query" in text_of(result)
        result = await client.call_tool("search", {"query": "login", "collection": "Bad Name!"})
        assert result.is_error and "collection" in text_of(result)


async def test_add_document_indexes_a_document(open_settings: Settings) -> None:
    async with serving(open_settings) as app, connected(app) as client:
        added = await client.call_tool(
            "add_document",
            {
                "source_type": "jira",
                "source_id": "SIAM-999",
                "content": "The export button greys out for archived projects.",
                "title": "Export disabled",
            },
        )
        assert not added.is_error, text_of(added)
        doc = await client.call_tool("get_document", {"type": "jira", "id": "SIAM-999"})
        assert json.loads(text_of(doc))["title"] == "Export disabled"


async def test_get_document_names_the_sources_of_a_shared_source_id(tmp_path: Path) -> None:
    """Two sources' README.md: get_document without a source is an error listing both;
    with one, that source's record."""
    settings = make_settings(tmp_path)
    service = build_service(settings)
    await service.start()
    try:
        for source, text in (("/srv/repoA", "Repo A builds firmware."), ("/srv/repoB", "B.")):
            await service.ingest([Document("wiki", "README.md", text)], source=source)
    finally:
        await service.stop()
    async with serving(settings) as app, connected(app) as client:
        asked = {"type": "wiki", "id": "README.md"}
        result = await client.call_tool("get_document", asked)
        assert result.is_error and "'/srv/repoA'" in text_of(result)
        assert "'/srv/repoB'" in text_of(result) and "source" in text_of(result)
        result = await client.call_tool("get_document", {**asked, "source": "/srv/repoA"})
        assert json.loads(text_of(result))["content"] == "Repo A builds firmware."


Keyed = tuple[Settings, dict[str, str]]
"""The settings of a service with keys required, and its callers' tokens by name."""


@pytest.fixture
async def keyed(tmp_path: Path) -> Keyed:
    settings = make_settings(tmp_path, auth="keys")
    other = Document("jira", "HR-1", "Payroll runs on the last Friday.", "Payroll", {}, "hr")
    await load(settings, [*corpus(), other])
    tokens = {
        "reader": await make_key(settings, "reader", ["read"]),
        "writer": await make_key(settings, "writer", ["read", "write"]),
        "hr": await make_key(settings, "hr-only", ["read"], ("hr",)),
    }
    return settings, tokens


async def with_keys(
    keyed: Keyed,
    check: Callable[[Starlette, dict[str, str]], Awaitable[None]],
) -> None:
    """`check` of the app with keys required and of its callers' tokens, the app's
    lifespan entered in the test's own task."""
    settings, tokens = keyed
    async with serving(settings) as app:
        await check(app, tokens)


async def test_without_a_key_mcp_answers_401(keyed: Keyed) -> None:
    await with_keys(keyed, lambda app, _: refused_without_key(app))


async def tools_listed(app: Starlette, host: str = "127.0.0.1") -> httpx.Response:
    """A bare tools/list call POSTed to /mcp (no SDK, no key) as sent to `host`."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as http:
        return await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )


async def refused_without_key(app: Starlette) -> None:
    response = await tools_listed(app)
    assert response.status_code == 401
    assert response.json()["success"] is False


async def test_a_refused_caller_builds_no_mcp_server(keyed: Keyed) -> None:
    async def nothing_built(app: Starlette, _: dict[str, str]) -> None:
        await refused_without_key(app)
        assert not mcp_endpoint_of(app).built

    await with_keys(keyed, nothing_built)


async def test_concurrent_first_calls_share_one_server_built_on_demand(
    open_settings: Settings,
) -> None:
    async with serving(open_settings) as app:
        endpoint = mcp_endpoint_of(app)
        assert not endpoint.built

        async def tools() -> set[str]:
            async with connected(app) as client:
                return {tool.name for tool in (await client.list_tools()).tools}

        first, second = await asyncio.gather(tools(), tools())
        assert first == second == READ_TOOLS | {"add_document"}
        assert endpoint.built
        server = await endpoint.server()
        assert await endpoint.server() is server
    assert not endpoint.built  # the lifespan stopped it; a new lifespan builds anew


async def test_a_server_that_fails_to_build_fails_each_call_and_the_app_still_stops(
    open_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def failing_build(*_: Any) -> Any:
        built.append("once")
        raise RuntimeError("the SDK is broken")

    monkeypatch.setattr(mcp_endpoint, "build_server", failing_build)
    async with serving(open_settings) as app:
        for _ in range(2):
            assert (await tools_listed(app)).status_code == 500
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert (await http.get("/readyz")).status_code == 200
    assert built == ["once"]


def mcp_endpoint_of(app: Starlette) -> McpEndpoint:
    (endpoint,) = [r.endpoint for r in app.routes if getattr(r, "path", "") == "/mcp"]
    assert isinstance(endpoint, McpEndpoint)
    return endpoint


def test_serving_http_does_not_import_the_mcp_sdk(tmp_path: Path) -> None:
    """The SDK loads on the first /mcp request, not at start (it would double the
    start-up time of a server no MCP client uses)."""
    script = f"""
import asyncio, sys, httpx
from knowledge_api.app import create_app
from tests.conftest import make_settings
from pathlib import Path

async def main():
    app = create_app(make_settings(Path({str(tmp_path)!r})))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert (await http.get("/readyz")).status_code == 200
            print(sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp.")))
            await http.post("/mcp", json={{}}, headers={{"accept": "application/json"}})
            print("mcp" in sys.modules)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


async def test_a_read_only_key_is_not_offered_add_document(keyed: Keyed) -> None:
    await with_keys(keyed, read_only)


async def read_only(app: Starlette, tokens: dict[str, str]) -> None:
    async with connected(app, tokens["reader"]) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == READ_TOOLS
        refused = await client.call_tool(
            "add_document", {"source_type": "jira", "source_id": "X-1", "content": "x"}
        )
        assert refused.is_error
    async with connected(app, tokens["writer"]) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "add_document" in names


async def test_a_collection_restricted_key_reaches_only_its_collections(keyed: Keyed) -> None:
    await with_keys(keyed, restricted)


async def restricted(app: Starlette, tokens: dict[str, str]) -> None:
    async with connected(app, tokens["hr"]) as client:
        refused = await client.call_tool("search", {"query": "login timeout"})
        assert refused.is_error and "'default'" in text_of(refused)
        refused = await client.call_tool("get_document", {"type": "jira", "id": "SIAM-101"})
        assert refused.is_error
        listed = json.loads(text_of(await client.call_tool("list_collections", {})))
        assert [c["name"] for c in listed["collections"]] == ["hr"]
        found = await client.call_tool("search", {"query": "payroll", "collection": "hr"})
        assert not found.is_error, text_of(found)
        assert json.loads(text_of(found))["results"][0]["source_id"] == "HR-1"


async def test_a_foreign_host_is_refused(open_settings: Settings) -> None:
    async with serving(open_settings) as app:
        """DNS-rebinding protection: a Host the service does not know is refused."""
        response = await tools_listed(app, "evil.example.com")
        assert response.status_code in (403, 421)


async def test_stdio(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    await load(settings)
    env = {
        **os.environ,
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_DB_PATH": str(settings.db_path),
        "KNOWLEDGE_SEED_ON_EMPTY": "false",
    }
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "knowledge_api", "mcp"], env=env
    )
    async with Client(server) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == READ_TOOLS | {"add_document"}
        found = await client.call_tool("search", {"query": "login timeout", "limit": 1})
        assert json.loads(text_of(found))["results"][0]["source_id"] == "SIAM-101"
        bad = await client.call_tool("search", {"query": "login", "limit": 0})
        assert bad.is_error and "limit" in text_of(bad)
