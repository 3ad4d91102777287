"""The environment the CLI's source tests run in, and what they read back: settings
from the environment (the fake embedder, no seed, a SQLite file in the test's folder, or
a fresh Postgres database when the fixture's param says "postgres"), the documents a
source owns, the last line a sync prints, the sources as listed (by the CLI, or over
HTTP after a sync asked there)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.cli import main
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.conftest import make_store
from tests.pg import fresh_database
from tests.test_uploads import wait_for

SOURCES = "/v1/knowledge/sources"
SERVE = [sys.executable, "-m", "knowledge_api", "serve"]
PACKAGE_ROOT = Path(knowledge_api.__file__).parent.parent
Item = TypeVar("Item")


def use_postgres(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store is a fresh database of the session's Postgres."""
    url = fresh_database(request.getfixturevalue("postgres_server"))
    monkeypatch.setenv("KNOWLEDGE_STORE", "postgres")
    monkeypatch.setenv("KNOWLEDGE_DATABASE_URL", url)


def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **variables: str) -> Path:
    """Commands run from `tmp_path` on the fake embedder and a SQLite file there, with
    `variables` set (a source's secrets): `tmp_path`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def serve_env(folder: Path, port: int, **variables: str) -> dict[str, str]:
    """The environment of `knowledge-api serve` run as a process of its own in `folder`:
    the fake embedder, a SQLite file there, `port`, this checkout's package whatever the
    working directory, and `variables` over these."""
    return {
        **os.environ,
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_DB_PATH": str(folder / "k.db"),
        "KNOWLEDGE_API_PORT": str(port),
        "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]),
        **variables,
    }


def serve_process(
    folder: Path, port: int, stdout: int = subprocess.DEVNULL, **variables: str
) -> subprocess.Popen[str]:
    """`knowledge-api serve` started in `folder` with `serve_env`, its output to `stdout`
    as text and its errors dropped."""
    env = serve_env(folder, port, **variables)
    return subprocess.Popen(
        SERVE, env=env, cwd=folder, stdout=stdout, stderr=subprocess.DEVNULL, text=True
    )


def cli_settings(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    **variables: str,
) -> Settings:
    """The CLI's environment, run from `tmp_path` with `variables` set (a source's
    secrets), and the same settings for an app: one store, shared. Postgres when the
    requesting fixture's param is "postgres", SQLite otherwise."""
    cli_home(tmp_path, monkeypatch, KNOWLEDGE_SEED_ON_EMPTY="false", **variables)
    if getattr(request, "param", "sqlite") == "postgres":
        use_postgres(request, monkeypatch)
    return Settings.from_env(env_file=None)


def cli_environment(*backends: str, **variables: str) -> Any:
    """A fixture of `cli_settings` with `variables` set, run over each of `backends`
    ("sqlite", "postgres"; SQLite alone when none): assigned in a test module, the
    name it is assigned to is the fixture's."""

    @pytest.fixture(params=list(backends) or None)
    def environment(
        request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> Settings:
        return cli_settings(request, tmp_path, monkeypatch, **variables)

    return environment


def source_documents(settings: Settings, collection: str, source: str) -> dict[str, Document]:
    """The documents the source owns in the store of `settings`, by source id."""

    async def read() -> dict[str, Document]:
        store = make_store(settings.store, settings)
        await store.open()
        try:
            owned = await store.source_documents(collection, source)
            found = [await store.get_by_id(doc_id) for doc_id in owned]
            return {doc.source_id: doc for doc in found if doc is not None}
        finally:
            await store.close()

    return asyncio.run(read())


def mirrored(
    docs: dict[str, Document], items: Mapping[str, Item], source_type: str
) -> list[tuple[str, Item, Document]]:
    """Each of a vendor's `items` by its id, beside the stored document that stands for it:
    `docs` holds those ids and no other, each a document of `source_type`."""
    assert sorted(docs) == sorted(items)
    for key in items:
        assert docs[key].source_type == source_type
    return [(key, item, docs[key]) for key, item in items.items()]


def sync_source(capsys: pytest.CaptureFixture[str], name: str, *more: str) -> tuple[int, str]:
    """`sources sync NAME` with `more` options: its status and the last line it printed
    (what was printed before is dropped, so the line is never an earlier command's)."""
    capsys.readouterr()
    status = main(["sources", "sync", name, *more])
    return status, capsys.readouterr().out.strip().splitlines()[-1]


def refused_usage(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The CLI run with `argv` and refused as misused (status 2): what it printed to stderr."""
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def listed_sources(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The sources as `sources --json` lists them (what was printed before is dropped)."""
    capsys.readouterr()
    assert main(["sources", "--json"]) == 0
    listed: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["sources"]
    return listed


def refused_secret(
    capsys: pytest.CaptureFixture[str], name: str, variable: str, wrong: str
) -> tuple[str, dict[str, Any]]:
    """A sync of source `name`, then a full one with its secret `variable` set to `wrong`,
    which stops with status 1: the line it printed, and the source as listed then."""
    assert sync_source(capsys, name)[0] == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(variable, wrong)
        status, line = sync_source(capsys, name, "--full")
    assert status == 1, line
    (listed,) = listed_sources(capsys)
    return line, listed


def synced_over_http(
    client: TestClient, name: str, collection: str, headers: dict[str, str]
) -> dict[str, Any]:
    """A sync of source `name` asked over HTTP with `headers`, waited for until it is done:
    the source as the listing of `collection` shows it then."""
    accepted = client.post(f"{SOURCES}/{name}/sync", headers=headers)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(client, accepted.json()["job_id"], headers=headers)
    assert done["status"] == "done", done
    found = client.get(SOURCES, params={"collection": collection}, headers=headers)
    (listed,) = found.json()["sources"]
    return dict(listed)
