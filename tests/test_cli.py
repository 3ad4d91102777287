from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.cli.parser import parser
from knowledge_api.cli.serve import ready_message
from tests.cli_env import SERVE, cli_home, serve_env, serve_process
from tests.conftest import make_settings, make_store
from tests.conftest import seeded as wait_for_seed
from tests.test_faults import free_port


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch)


def test_ingest_then_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha rotates the keys every month.")
    (docs / "b.md").write_text("# Beta\n\nBeta handles invoices.")
    assert main(["ingest", str(docs), "--meta", "team=ops"]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith("2 documents indexed (2 chunks, 2 embedded), 0 unchanged skipped")
    assert main(["ingest", str(docs), "--meta", "team=ops"]) == 0
    unchanged = capsys.readouterr().out  # the same line, with no model loaded
    assert re.fullmatch(
        r"0 documents indexed \(0 chunks, 0 embedded\), 2 unchanged skipped, "
        r"in [\d.]+s \(0 chunks/s\)\n",
        unchanged,
    )
    assert main(["ingest", str(docs)]) == 0  # metadata changed: re-stored, vectors reused
    assert "2 documents indexed (2 chunks, 0 embedded)" in capsys.readouterr().out
    assert main(["ingest", str(docs), "--meta", "team=ops"]) == 0
    capsys.readouterr()
    assert (
        main(["query", "who rotates the keys", "--limit", "1", "--sources", "wiki", "--json"]) == 0
    )
    response = json.loads(capsys.readouterr().out)
    assert response["results"][0]["metadata"]["team"] == "ops"
    assert "[1]" in response["synthesis"]


def test_jsonl_defaults_to_knowledge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "p1", "title": "", "text": "Paris is the capital of France."}\n')
    assert main(["ingest", str(corpus)]) == 0
    capsys.readouterr()
    assert main(["query", "capital of france", "--no-synthesize", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert (result["source_type"], result["source_id"]) == ("knowledge", "p1")


def test_query_prints_the_answer_and_numbered_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys.md").write_text(
        "# Keys\n\n## Rotation\n\nAlpha rotates the keys every month."
    )
    assert main(["ingest", str(tmp_path / "keys.md")]) == 0
    capsys.readouterr()
    assert main(["query", "who rotates the keys", "--threshold", "0"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert "[1]" in shown[0] and shown[2] == "Sources:"
    assert shown[3] == "[1] Keys > Rotation"
    assert shown[4].startswith("    wiki: keys.md  (similarity ")


def test_version_and_exit_statuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["--version"])
    assert shown.value.code == 0 and capsys.readouterr().out.startswith("knowledge-api 1.")
    assert main(["query", "x", "--threshold", "2"]) == 2  # usage: before the model loads
    assert "threshold: must be between 0.0 and 1.0" in capsys.readouterr().err
    (tmp_path / "db-is-a-folder").mkdir()
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "db-is-a-folder"))
    assert main(["keys", "list"]) == 1  # a failure, not a usage error
    assert "cannot open" in capsys.readouterr().err


def test_the_help_line_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    tree = parser()
    [commands] = [a for a in tree._actions if isinstance(a, argparse._SubParsersAction)]
    line = re.search(r"knowledge-api ([a-z-]+(?: \| [a-z-]+)*)", shown)
    assert line is not None and line.group(1).split(" | ") == list(commands.choices)
    assert {"mcp", "export", "import", "sources", "audit"} <= set(commands.choices)


def test_errors_exit_2_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["query", ""]) == 2
    monkeypatch.setenv("KNOWLEDGE_EMBEDER", "fake")
    assert main(["query", "x"]) == 2
    assert "did you mean KNOWLEDGE_EMBEDDER" in capsys.readouterr().err


def test_first_start_seeds_the_bundled_docs_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, seed_on_empty=True)
    with TestClient(create_app(settings)) as client:
        wait_for_seed(client)
        seeded = client.get("/health").json()["store"]["documents"]
        assert seeded >= 3
        body = client.post(
            "/v1/knowledge/query", json={"query": "configuration settings", "threshold": 0}
        ).json()
        assert body["results"] and body["results"][0]["source_type"] == "wiki"
    app = create_app(settings)
    with TestClient(app) as client:
        assert client.get("/health").json()["store"]["documents"] == seeded
        assert app.state.service.embedder.texts_embedded == 0


def test_serve_says_where_it_listens_and_its_example_request_answers(tmp_path: Path) -> None:
    """The ready line comes once the server answers, and the curl it shows works."""
    port = free_port()
    server = serve_process(
        tmp_path,
        port,
        subprocess.PIPE,
        KNOWLEDGE_DB_PATH=str(tmp_path / "served.db"),
        KNOWLEDGE_SYNTHESIZER="extractive",
        KNOWLEDGE_LOG_LEVEL="warning",
    )
    url = f"http://127.0.0.1:{port}"
    watchdog = threading.Timer(60, server.kill)  # no ready line must not hang the suite
    watchdog.start()
    try:
        assert server.stdout is not None
        ready = next(line for line in server.stdout if "is ready at" in line)
        curl = re.fullmatch(
            r"try: curl -s (\S+) -H '([^']+)' -d '(.+)'", server.stdout.readline().strip()
        )
        assert ready.strip().endswith(f"is ready at {url}")
        assert curl is not None and curl[1] == f"{url}/v1/knowledge/query"
        header, _, value = curl[2].partition(": ")
        response = httpx.post(curl[1], headers={header: value}, content=curl[3], timeout=10)
    finally:
        watchdog.cancel()
        server.terminate()
        server.wait(timeout=20)
        if server.stdout is not None:
            server.stdout.close()
    assert response.status_code == 200 and "results" in response.json()


async def written_by_another_embedder(db: Path) -> None:
    store = make_store("sqlite", make_settings(db.parent, db_path=db))
    await store.open()
    await store.check_embedder("another:model", 8)
    await store.close()


@pytest.mark.parametrize("refusal", ["keys required, none exists", "another embedder's store"])
def test_a_refused_start_says_why_in_one_line_and_exits_2(tmp_path: Path, refusal: str) -> None:
    """It printed uvicorn's traceback and exited 3; the docs say 2."""
    env = serve_env(tmp_path, free_port(), KNOWLEDGE_SEED_ON_EMPTY="false")
    if refusal == "keys required, none exists":
        env["KNOWLEDGE_API_HOST"] = "0.0.0.0"
        said = "error: API keys are required (KNOWLEDGE_AUTH=auto"
    else:
        asyncio.run(written_by_another_embedder(tmp_path / "k.db"))
        said = f"error: {tmp_path / 'k.db'} holds vectors of embedder 'another:model'"
    done = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.splitlines()[-1].startswith(said), done.stderr


def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    """It printed the traceback of the bind."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = serve_env(tmp_path, port, KNOWLEDGE_SEED_ON_EMPTY="false")
        done = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert said.startswith(f"error: cannot listen on 127.0.0.1:{port} (Address already in use)")
    assert "KNOWLEDGE_API_PORT" in said


def test_the_ready_line_names_the_key_header_when_keys_are_required() -> None:
    settings = make_settings(Path("unused")).replace(host="0.0.0.0", port=3006, auth="auto")
    message = ready_message(settings)
    assert "is ready at http://127.0.0.1:3006" in message
    assert "-H 'Authorization: Bearer <API key>'" in message


def test_the_scripts_module_imports_none_of_the_commands() -> None:
    """A child the service spawns to build the model imports the `knowledge-api`
    script's module: the server, the stores and the connectors stay out of it."""
    code = "import sys, knowledge_api.cli; print(sorted(m for m in sys.modules if m in WATCHED))"
    watched = ("uvicorn", "knowledge_api.stores", "knowledge_api.connectors", "knowledge_api.app")
    done = subprocess.run(
        [sys.executable, "-c", f"WATCHED = {watched!r}; {code}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(knowledge_api.__file__).parents[1])},
    )
    assert done.stdout.strip() == "[]"
