"""The KB host as a connector kind (`sources add NAME --kind kb`), against the real host
API on loopback the KB sync's tests use; `sync --from` reads the host through the same
client. And no secret of a source leaves the process: not to the store, the logs, the
CLI's output, the listing, /health or /metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.usecases import connectors
from tests.cli_env import cli_home, listed_sources, sync_source
from tests.conftest import connectors_reported, make_settings
from tests.kb_host import Host, article, serve

TOKEN = "kb-token-5e1d7c"


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch, KNOWLEDGE_SYNC_RETRIES="0", HELP_CENTER_TOKEN=TOKEN)


def articles() -> list[dict[str, Any]]:
    return [
        article(f"kb-{n}", f"Article {n}", f"How to fix the heron device, step {n}.", ["x"], [])
        for n in range(1, 5)
    ]


@pytest.fixture
def host() -> Iterator[Host]:
    with serve(Host(articles=articles())) as running:
        yield running


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "help", *more)


def listing(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    (found,) = listed_sources(capsys)
    return found


def add(host: Host) -> list[str]:
    return ["sources", "add", "help", "--kind", "kb", "--url", host.url, "--collection", "kb",
            "--secret", "token=HELP_CENTER_TOKEN", "--set", "page_size=3"]  # fmt: skip


def test_a_kb_host_syncs_as_a_connector_source(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(add(host)) == 0
    assert sync(capsys) == (0, "kb/help: 4 added, 0 updated, 0 unchanged, 0 deleted")
    assert [r.get("offset") for r in host.requests] == ["0", "3"]  # paged
    assert set(host.authorization) == {f"Bearer {TOKEN}"}
    first = listing(capsys)
    assert (first["kind"], first["documents"], first["last_error"]) == ("kb", 4, None)
    cursor = datetime.fromisoformat(first["cursor"])
    # an edit, and an article deleted on the host: an incremental run reads the edit only
    host.articles[0]["content"] = "How to fix the heron device: restart it."
    host.articles[0]["metadata"]["last_updated"] = datetime.now(UTC).isoformat()
    del host.articles[3]
    assert sync(capsys) == (0, "kb/help: 0 added, 1 updated, 0 unchanged, 0 deleted")
    since = datetime.fromisoformat(host.requests[-1]["updated_since"])
    assert since == cursor - timedelta(minutes=10)  # the cursor less the overlap
    assert listing(capsys)["documents"] == 4
    status, line = sync(capsys, "--full")
    assert (status, line) == (0, "kb/help: 0 added, 0 updated, 3 unchanged, 1 deleted")
    assert listing(capsys)["documents"] == 3


def test_a_kb_document_is_dated_by_its_article(
    host: Host, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(add(host)) == 0
    sync(capsys)
    with TestClient(create_app(make_settings(tmp_path, db_path=tmp_path / "k.db"))) as client:
        listed = client.get("/v1/knowledge/documents", params={"collection": "kb"}).json()
    dates = {d["source_id"]: d["updated_at"] for d in listed["documents"]}
    assert dates["kb-1"] == "2024-12-15T10:00:00+00:00"


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_a_refusing_host_stops_the_run_and_deletes_nothing(
    host: Host, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    assert main(add(host)) == 0
    sync(capsys)
    host.fail_status = status
    code, line = sync(capsys, "--full", "--allow-mass-delete")
    assert code == 1 and f"kb/help: sync stopped: GET {host.url}/api/kb/articles" in line
    assert f"({status})" in line and "Knowledge base unavailable" in line
    found = listing(capsys)
    assert found["documents"] == 4 and f"({status})" in found["last_error"]


def test_sync_from_reads_the_host_through_the_same_client(
    host: Host, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNOWLEDGE_KB_SYNC_TOKEN", TOKEN)
    assert main(["sync", "--from", host.url, "--full"]) == 0
    assert capsys.readouterr().out.startswith("full sync: 4 articles fetched, 4 indexed")
    host.fail_status = 503
    assert main(["sync", "--from", host.url]) == 1
    out = capsys.readouterr().out
    assert f"GET {host.url}/api/kb/articles: answered 503: Knowledge base unavailable" in out


def test_no_secret_leaves_the_process(
    host: Host, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A sync that sent the token, and a host that echoes it back in its errors: neither
    the token nor the header that carried it is in the store, the log, the CLI's output,
    the listing, /health or /metrics."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(connectors, "TICK", 0.1)
    assert main(add(host)) == 0
    sync(capsys)
    host.fail_status, host.echo_headers = 500, True
    code, line = sync(capsys)
    assert code == 1 and "request headers" in line  # what the host said is shown, masked
    shown = [line, json.dumps(listing(capsys))]
    assert main(["sources"]) == 0
    shown.append(capsys.readouterr().out)
    settings = make_settings(tmp_path, db_path=tmp_path / "k.db", sync_interval=0.2)
    with TestClient(create_app(settings)) as client:
        connectors_reported(client, lambda report: report["runs"])
        shown += [client.get("/health").text, client.get("/metrics").text]
        shown.append(client.get("/v1/knowledge/sources").text)
    assert f"Bearer {TOKEN}" in host.authorization  # it was sent, and echoed back
    store = b"".join(path.read_bytes() for path in tmp_path.glob("k.db*"))
    for text in [*shown, caplog.text, store.decode("utf-8", "replace")]:
        assert TOKEN not in text and f"Bearer {TOKEN}" not in text
    assert "HELP_CENTER_TOKEN" in shown[1]  # the secret's name is listed, not its value
