"""The client pages' examples, run as written against the service on a real port with
keys required: the Python ones (the knowledge_api client, the OpenAI SDK, the MCP SDK)
in one namespace per page, as a reader would paste them, and the curl ones with the
key added. Only the address and the key placeholder are replaced."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import knowledge_api
from knowledge_api.app import create_app
from tests.conftest import make_settings, seeded_at
from tests.loopback import serving_app
from tests.test_access import make_key

DOCS = Path(knowledge_api.__file__).parent / "docs"
README = Path(knowledge_api.__file__).parent.parent / "README.md"
PAGES = ("python-client.md", "chat-openai.md", "mcp.md")
ADDRESSES = re.compile(r"(?:http://)?(?:localhost|127\.0\.0\.1):3006")


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The service seeded with the bundled docs (fake embedder: the examples ask about
    them), keys required, every passage allowed to ground an answer: its URL and an
    admin key."""
    folder = tmp_path_factory.mktemp("client-docs")
    settings = make_settings(folder, seed_on_empty=True, auth="keys", answer_threshold="0.0")
    token = asyncio.run(make_key(settings, "docs", ["admin"]))
    with serving_app(create_app(settings)) as url:
        seeded_at(url, token)
        yield url, token


def pointed(code: str, server: tuple[str, str]) -> str:
    url, token = server
    return ADDRESSES.sub(url, code).replace("kapi_...", token)


@pytest.mark.parametrize("page", PAGES)
def test_the_python_examples_of_each_client_page_run(page: str, server: tuple[str, str]) -> None:
    examples = blocks((DOCS / page).read_text(), "python")
    assert examples, f"{page} has no Python example"
    namespace: dict[str, Any] = {"__name__": "example"}
    for code in examples:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(pointed(code, server), page, "exec"), namespace)
        assert out.getvalue().strip(), f"an example of {page} printed nothing:\n{code}"


def test_the_readme_examples_of_the_python_clients_run(server: tuple[str, str]) -> None:
    section = README.read_text().split("## Chat clients", 1)[1].split("\n## ", 1)[0]
    examples = blocks(section, "python")
    assert len(examples) == 2  # the OpenAI SDK and the knowledge_api client
    for code in examples:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(pointed(code, server), "README.md", "exec"), {"__name__": "example"})
        assert re.search(r"\[\d+\]", out.getvalue()), out.getvalue()


def test_the_curl_examples_of_the_chat_pages_answer(server: tuple[str, str]) -> None:
    """With the key a reader would add: `-H 'Authorization: Bearer kapi_...'`."""
    readme = README.read_text().split("## Chat clients", 1)[1].split("\n## ", 1)[0]
    examples = blocks(readme, "bash") + blocks((DOCS / "chat-ai-sdk.md").read_text(), "bash")
    assert len(examples) == 2
    for code in examples:
        command = pointed(code, server).replace("curl -N", "curl -sSf -N -H @auth", 1)
        auth = f"Authorization: Bearer {server[1]}"
        done = subprocess.run(
            ["bash", "-c", command.replace("@auth", f"'{auth}'")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert re.search(r"\[\d+\]", done.stdout), done.stdout  # a cited answer
        assert done.stdout.rstrip().endswith(("data: [DONE]", "}")), done.stdout[-300:]


def test_the_readme_shows_every_client_and_links_its_page() -> None:
    section = README.read_text().split("## Chat clients", 1)[1].split("\n## ", 1)[0]
    for client in (
        "curl -N",
        '"mcpServers"',
        "useChat(",
        "from openai import OpenAI",
        "from knowledge_api.client import KnowledgeClient",
    ):
        assert client in section, client
    for page in ("playground.md", "mcp.md", "chat-ai-sdk.md", "chat-openai.md", "python-client.md"):
        assert f"(knowledge_api/docs/{page})" in section and (DOCS / page).exists(), page
    [config] = blocks(section, "jsonc")
    server = json.loads(config.split("\n", 1)[1])["mcpServers"]["knowledge"]
    assert server["url"].endswith("/mcp") and server["headers"]["Authorization"].startswith(
        "Bearer "
    )
