"""The Filters section of docs/api.md, run as written: every example body against the
service on every store (its results compared with the reference evaluation), the
translations it shows against what the stores build, and each refusal it lists sent to
its stores (and to the others, which must apply it)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.errors import InvalidRequest
from knowledge_api.filters import matches, parse
from knowledge_api.stores.points.chroma_filter import chroma_where
from knowledge_api.stores.points.qdrant_filter import payload_filter
from knowledge_api.stores.postgres.filter_json import filter_tree
from tests.test_adopt import adopted_client, database, gemini, reader_client  # noqa: F401
from tests.test_store_conformance import BACKENDS

SECTION = (
    (Path(knowledge_api.__file__).parent / "docs" / "api.md")
    .read_text()
    .split("\n## Filters\n", 1)[1]
    .split("\n## ", 1)[0]
)
INCIDENTS = [
    # (source_type, source_id, content, metadata): the fields the examples filter on
    ("jira", "AOMA-1", "Asset upload times out for files over two gigabytes.", {
        "app_under_test": "aoma", "priority": "high", "severity": 4, "status": "open",
        "opened": "2026-10-03", "assignee": "kim", "tags": "upload timeout",
    }),
    ("jira", "AOMA-2", "The upload progress bar freezes at ninety percent.", {
        "app_under_test": "aoma", "priority": "low", "severity": 2, "status": "closed",
        "opened": "2026-09-12", "assignee": "kim", "tags": "upload ui",
    }),
    ("jira", "AOMA-3", "Search returns duplicate assets when paging.", {
        "app_under_test": "aoma", "priority": "critical", "severity": 5, "status": "open",
        "opened": "2026-10-21T14:30:00Z", "assignee": "lee", "tags": "search paging",
    }),
    ("git", "9f3c2ab", "Raise the nginx proxy timeout for the asset upload endpoint.", {
        "app_under_test": "aoma", "status": "merged", "opened": "2026-10-04",
        "tags": "upload nginx",
    }),
    ("jira", "ROY-7", "Royalty statements arrive late on the first business day.", {
        "app_under_test": "royalties", "priority": "high", "severity": 3, "status": "open",
        "opened": "2026-08-30", "assignee": "ana",
    }),
    ("knowledge", "KB-7", "Supported audio formats for upload: WAV, FLAC and MP3.", {
        "app_under_test": "aoma", "tags": "audio upload",
    }),
    ("email", "msg-42", "The 4.2 release ships on the first of December.", {
        "priority": "medium", "severity": "3", "opened": "2026-11-01T00:30:00+01:00",
    }),
    ("wiki", "aoma/upload", "Uploading assets: split files over two gigabytes.", {
        "app_under_test": "aoma", "status": "closed", "opened": "2026-11-01",
        "assignee": "lee", "tags": "upload",
    }),
]  # fmt: skip
EVERY_STORE = sorted(BACKENDS)
STORES = {"Chroma": "chroma", "Qdrant": "qdrant"}
MODES = ("adopted", "read_only")


def json_blocks(text: str) -> list[Any]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]


def subsection(title: str) -> str:
    return SECTION.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


def bullet(text: str, name: str) -> str:
    """The bullet of `text` whose bold name starts with `name`."""
    return text.split(f"\n- **{name}", 1)[1].split("\n- **", 1)[0]


def examples() -> list[dict[str, Any]]:
    found = json_blocks(subsection("Examples"))
    assert len(found) >= 5 and all({"query", "filters"} <= set(body) for body in found)
    return found


def refusals() -> list[tuple[list[str], dict[str, Any], str]]:
    """The table of what a store cannot apply: (its stores, the filter, the message)."""
    rows = []
    for line in subsection("What a store cannot apply").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 4 or not cells[2].startswith("`{"):
            continue
        named = cells[0]
        stores = (
            list(MODES) if "existing database" in named else [STORES[n] for n in named.split(", ")]
        )
        rows.append((stores, json.loads(cells[2].strip("`")), cells[3].strip("`")))
    assert len(rows) >= 3
    return rows


def expected(where: dict[str, Any]) -> set[str]:
    """The incidents the reference evaluation lets through (each is one passage)."""
    tree = parse(where)
    now = datetime.now(UTC).isoformat()
    return {
        key
        for kind, key, _, meta in INCIDENTS
        if matches(
            tree,
            {**meta, "source_type": kind, "source_id": key, "created_at": now, "updated_at": now},
        )
    }


def ask(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/v1/knowledge/query", json={"synthesize": False, **body})


def refusal_for(message: str, store: str) -> str:
    """The table's message as `store` words it (the table quotes one store's)."""
    backend = f"existing database ({store})" if store in MODES else store
    return re.sub(
        r"the (chroma|existing database \(read_only\)) store", f"the {backend} store", message
    )


def assert_refused(response: Any, message: str, store: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"] == refusal_for(message, store)
    backend = f"existing database ({store})" if store in MODES else store
    assert error["details"]["backend"] == backend and error["details"]["operator"]


def assert_applied(client: TestClient, body: dict[str, Any]) -> None:
    """The body as written answers 200 with matching passages only; with room for every
    passage, it finds every one the reference lets through."""
    written = ask(client, body)
    assert written.status_code == 200, (body, written.text)
    wanted = expected(body["filters"])
    assert {r["source_id"] for r in written.json()["results"]} <= wanted, body
    everything = ask(client, {**body, "limit": 20, "threshold": 0.0}).json()["results"]
    assert {r["source_id"] for r in everything} == wanted, body


@pytest.mark.parametrize("store", EVERY_STORE)
def test_the_examples_and_refusals_run_as_written_on_every_store(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with TestClient(create_app(BACKENDS[store](request, tmp_path))) as client:
        documents = [
            {"source_type": k, "source_id": i, "content": c, "title": i, "metadata": m}
            for k, i, c, m in INCIDENTS
        ]
        created = client.post("/v1/knowledge/documents", json={"documents": documents})
        assert created.status_code == 201, created.text
        for body in examples():
            try:
                parse(body["filters"])
            except InvalidRequest as bad:
                assert f"`400 {bad.args[0]}`" in SECTION, bad.args[0]
                refused = ask(client, body)
                assert (
                    refused.status_code == 400
                    and refused.json()["error"]["message"] == (bad.args[0])
                )
                continue
            assert expected(body["filters"]), f"an example that matches nothing: {body}"
            assert_applied(client, body)
        for stores, where, message in refusals():
            body = {"query": "upload", "filters": where}
            if store in stores:
                assert_refused(ask(client, body), message, store)
            else:
                assert_applied(client, body)


def test_the_translations_shown_are_what_the_stores_build() -> None:
    from qdrant_client import models

    text = subsection("In each store")
    where, *_ = json_blocks(text)
    tree = parse(where)
    [postgres] = json_blocks(bullet(text, "Postgres"))
    assert filter_tree(tree) == postgres
    [chroma] = json_blocks(bullet(text, "Chroma"))
    assert chroma_where(None, tree) == chroma
    [qdrant] = json_blocks(bullet(text, "Qdrant"))
    assert payload_filter(models, tree).model_dump(exclude_none=True) == qdrant


@pytest.mark.parametrize("mode", MODES)
def test_the_existing_database_example_and_refusals_run_in_both_modes(
    mode: str, request: pytest.FixtureRequest
) -> None:
    client = request.getfixturevalue("adopted_client" if mode == "adopted" else "reader_client")
    [body] = json_blocks(bullet(subsection("In each store"), "The existing database"))
    response = ask(client, {**body, "threshold": 0.0})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    tree = parse(body["filters"])
    assert results and all(matches(tree, r["metadata"]) for r in results)
    for stores, where, message in refusals():
        if mode in stores:
            assert_refused(ask(client, {"query": "asset upload", "filters": where}), message, mode)
