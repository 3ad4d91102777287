"""Sources mirrored: `knowledge-api ingest --prune` adds, updates and deletes so the index
matches a folder; `--dry-run` says what it would do; a mass delete needs saying so; a
service reading the same store stops finding and citing a file pruned."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.settings import Settings
from tests.conftest import make_settings
from tests.pg import fresh_database

FILES = {
    "alpha.md": "# Alpha\n\nAlpha rotates the signing keys every month.",
    "beta.md": "# Beta\n\nBeta handles the invoices of the billing team.",
    "gamma.md": "# Gamma\n\nGamma stores the quarterly zeppelin maintenance logbook.",
    "delta.md": "# Delta\n\nDelta answers questions about holidays.",
}


@pytest.fixture(params=["sqlite", "postgres"])
def environment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The CLI's environment and the same settings for an app: one store, shared."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_SEED_ON_EMPTY", "false")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    if request.param == "postgres":
        url = fresh_database(request.getfixturevalue("postgres_server"))
        monkeypatch.setenv("KNOWLEDGE_STORE", "postgres")
        monkeypatch.setenv("KNOWLEDGE_DATABASE_URL", url)
    return Settings.from_env(env_file=None)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_prune_mirrors_the_folder(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    status, out = run(capsys, "sources")
    assert status == 0
    assert out.splitlines() == [
        f"default\t{docs.resolve()}\t4 documents\tlast run " + out.split("last run ")[1].strip()
    ]

    (docs / "gamma.md").unlink()
    (docs / "beta.md").write_text("# Beta\n\nBeta now also handles refunds.")
    (docs / "epsilon.md").write_text("# Epsilon\n\nEpsilon is new.")
    status, out = run(capsys, "ingest", "docs", "--prune", "--dry-run")
    assert status == 0
    assert out.splitlines() == ["add epsilon.md", "update beta.md", "delete gamma.md"]
    assert "4 documents" in run(capsys, "sources")[1]  # the dry run changed nothing

    status, out = run(capsys, "ingest", "docs", "--prune")
    assert status == 0
    assert out.startswith("2 documents indexed (2 chunks, 2 embedded), 2 unchanged skipped")
    assert out.strip().endswith(", 1 deleted")
    assert "4 documents" in run(capsys, "sources")[1]  # alpha, beta, delta, epsilon
    assert run(capsys, "ingest", "docs", "--prune", "--dry-run")[1] == "nothing to change\n"

    # without --prune, a file gone keeps its document
    (docs / "delta.md").unlink()
    assert run(capsys, "ingest", "docs")[0] == 0
    assert "4 documents" in run(capsys, "sources")[1]


def test_a_mass_delete_stops_unless_allowed(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "ingest", "docs", "--name", "handbook")[0] == 0
    for name in ("alpha.md", "beta.md", "gamma.md"):
        (docs / name).unlink()
    status, out = run(capsys, "ingest", "docs", "--name", "handbook", "--prune")
    assert status == 1
    assert "would lose 3 of its 4 documents" in out and "--allow-mass-delete" in out
    assert "handbook\t4 documents" in run(capsys, "sources")[1]
    status, out = run(
        capsys, "ingest", "docs", "--name", "handbook", "--prune", "--allow-mass-delete"
    )
    assert status == 0 and out.strip().endswith(", 3 deleted")
    assert "handbook\t1 documents" in run(capsys, "sources")[1]


def test_a_file_that_cannot_be_read_keeps_its_document(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    (docs / "alpha.md").write_bytes(b"\x00\x01 not text any more")
    status, out = run(capsys, "ingest", "docs", "--prune", "--dry-run")
    assert status == 1 and "delete" not in out


def test_name_goes_with_one_path(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(capsys, "ingest", "docs/alpha.md", "docs/beta.md", "--name", "x")
    assert status == 2 and "--name: names one source" in out


def test_a_pruned_file_is_no_longer_found_or_cited(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A service running beside the command (another connection to the same store, as
    another process has) stops answering from a pruned file's passages."""
    assert run(capsys, "ingest", "docs")[0] == 0
    settings = make_settings(
        tmp_path, **{f: getattr(environment, f) for f in ("store", "db_path", "database_url")}
    )
    ask = {"query": "zeppelin maintenance logbook", "synthesize": False, "threshold": 0.0}
    answer = {"query": "Where is the zeppelin maintenance logbook?", "threshold": 0.0}
    with TestClient(create_app(settings)) as client:

        def found() -> list[str]:
            response = client.post("/v1/knowledge/query", json=ask)
            return [r["source_id"] for r in response.json()["results"]]

        def cited() -> list[str]:
            response = client.post("/v1/knowledge/answer", json=answer)
            return [s["metadata"]["source_id"] for s in response.json()["sources"]]

        assert found()[0] == "gamma.md" and found()[0] == "gamma.md"  # the second from cache
        assert "gamma.md" in cited()
        (docs / "gamma.md").unlink()
        assert run(capsys, "ingest", "docs", "--prune")[0] == 0
        # a store shared with other processes is polled for their writes: within 2 s
        assert within(2.0, lambda: "gamma.md" not in found())
        assert "gamma.md" not in cited()


def within(seconds: float, condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_ids_are_the_uuid5_they_always_were() -> None:
    """Ids are computed without uuid objects now: every stored row keeps its id."""
    import uuid

    from knowledge_api.models import _NAMESPACE, chunk_id, document_id

    for source_id in ("a.md", "dir/é β.md", "", "x" * 600):
        doc_id = document_id("default", "wiki", source_id)
        assert doc_id == str(uuid.uuid5(_NAMESPACE, f"default\x1fwiki\x1f{source_id}"))
        assert chunk_id(doc_id, 7) == str(uuid.uuid5(uuid.UUID(doc_id), "7"))
