"""Sources mirrored: `knowledge-api ingest --prune` adds, updates and deletes so the index
matches a folder; `--dry-run` says what it would do; a mass delete needs saying so; a
service reading the same store stops finding and citing a file pruned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.settings import Settings
from knowledge_api.stores.postgres.siam import SiamStore
from tests.cli_env import cli_environment, cli_settings
from tests.conftest import make_settings
from tests.conftest import seeded as wait_for_seed
from tests.pg import SERVICE_ROLE_KEY, SUPABASE_URL

FILES = {
    "alpha.md": "# Alpha\n\nAlpha rotates the signing keys every month.",
    "beta.md": "# Beta\n\nBeta handles the invoices of the billing team.",
    "gamma.md": "# Gamma\n\nGamma stores the quarterly zeppelin maintenance logbook.",
    "delta.md": "# Delta\n\nDelta answers questions about holidays.",
}


environment = cli_environment("sqlite", "postgres")


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


def most_gone(capsys: pytest.CaptureFixture[str], docs: Path, *more: str) -> tuple[int, str]:
    """The folder ingested as source handbook, then three of its four files deleted and
    the folder ingested again with `more` options: that run's status and output."""
    assert run(capsys, "ingest", "docs", "--name", "handbook")[0] == 0
    for name in ("alpha.md", "beta.md", "gamma.md"):
        (docs / name).unlink()
    return run(capsys, "ingest", "docs", "--name", "handbook", *more)


def test_a_mass_delete_stops_unless_allowed(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = most_gone(capsys, docs, "--prune")
    assert status == 1
    assert "would lose 3 of its 4 documents" in out and "--allow-mass-delete" in out
    assert "handbook\t4 documents" in run(capsys, "sources")[1]
    status, out = run(
        capsys, "ingest", "docs", "--name", "handbook", "--prune", "--allow-mass-delete"
    )
    assert status == 0 and out.strip().endswith(", 3 deleted")
    assert "handbook\t1 documents" in run(capsys, "sources")[1]


def test_a_dry_run_of_a_prune_the_guard_refuses_says_so_and_exits_1(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = most_gone(capsys, docs, "--prune", "--dry-run")
    assert status == 1
    assert "delete alpha.md" in out and "the real run would be refused" in out
    assert "would lose 3 of its 4 documents" in out and "--allow-mass-delete" in out
    allowed = ("--prune", "--dry-run", "--allow-mass-delete")
    status, out = run(capsys, "ingest", "docs", "--name", "handbook", *allowed)
    assert status == 0 and "refused" not in out
    assert "handbook\t4 documents" in run(capsys, "sources")[1]


def test_files_truncated_to_0_bytes_are_unread_and_keep_their_documents(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0-byte file is unread, as an upload of 0 bytes is: a prune keeps its document."""
    assert run(capsys, "ingest", "docs")[0] == 0
    for name in FILES:
        (docs / name).write_bytes(b"")
    status, out = run(capsys, "ingest", "docs", "--prune")
    assert status == 1
    assert "4 files skipped: docs/alpha.md (empty file)" in out and ", 0 deleted" in out
    assert "4 documents" in run(capsys, "sources")[1]
    status, out = run(capsys, "query", "zeppelin maintenance logbook")
    assert status == 0 and "zeppelin" in out


def test_files_emptied_of_text_are_unread_and_keep_their_documents(
    environment: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files left with no text (a copy cut short, a template wiped) would keep their
    documents with no passage: they are unread, as a document of no text is refused at
    every door, so a prune keeps what they held."""
    assert run(capsys, "ingest", "docs", "--name", "handbook")[0] == 0
    for name in ("alpha.md", "beta.md", "gamma.md"):
        (docs / name).write_text("\n\n   \n")
    status, out = run(capsys, "ingest", "docs", "--name", "handbook", "--prune", "--dry-run")
    assert status == 1 and "nothing to change" in out and "delete" not in out
    assert "docs/alpha.md (bad document)" in out
    status, out = run(capsys, "ingest", "docs", "--name", "handbook", "--prune")
    assert status == 1
    status, out = run(capsys, "query", "zeppelin maintenance logbook")
    assert status == 0 and "zeppelin" in out


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
        # another process's write is read at once on SQLite, and on Postgres by the first
        # request once the generation the service read is older than its poll (a fixed
        # bound in seconds would be a race with a loaded machine's slow requests)
        if environment.store != "sqlite":
            time.sleep(SiamStore.generation_poll_seconds)
        assert "gamma.md" not in found()
        assert "gamma.md" not in cited()


def test_ids_are_the_uuid5_they_always_were() -> None:
    """Ids are computed without uuid objects now: every stored row keeps its id."""
    import uuid

    from knowledge_api.models import _NAMESPACE, chunk_id, document_id

    for source_id in ("a.md", "dir/é β.md", "", "x" * 600):
        doc_id = document_id("default", "wiki", source_id)
        assert doc_id == str(uuid.uuid5(_NAMESPACE, f"default\x1fwiki\x1f{source_id}"))
        assert chunk_id(doc_id, 7) == str(uuid.uuid5(uuid.UUID(doc_id), "7"))


@pytest.fixture(params=["sqlite", "postgres", "supabase", "chroma", "qdrant"])
def every_backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The CLI's environment on each of the five backends, and the same settings for an app."""
    store = {
        "KNOWLEDGE_STORE": request.param,
        "KNOWLEDGE_CHROMA_PATH": str(tmp_path / "chroma"),
        "KNOWLEDGE_QDRANT_PATH": str(tmp_path / "qdrant"),
    }
    if request.param == "supabase":
        request.getfixturevalue("postgrest")
        store["SUPABASE_URL"] = SUPABASE_URL
        store["SUPABASE_SERVICE_ROLE_KEY"] = SERVICE_ROLE_KEY
        store["KNOWLEDGE_SUPABASE_BACKOFF"] = "0"
    return cli_settings(request, tmp_path, monkeypatch, **store)


STORE_FIELDS = [
    "store",
    "db_path",
    "database_url",
    "supabase_url",
    "supabase_service_role_key",
    "supabase_backoff",
    "chroma_path",
    "qdrant_path",
]


def app_of(settings: Settings, tmp_path: Path) -> Starlette:
    """The app of tests (loopback, no keys) on the store the CLI used."""
    return create_app(make_settings(tmp_path, **{f: getattr(settings, f) for f in STORE_FIELDS}))


def folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_two_repositories_keep_their_readme_each(
    every_backend: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each repository's README.md is a document of its own; asked for by source id, the
    detail route names both sources (409) until one is chosen."""
    repo_a = folder(tmp_path / "repoA", {"README.md": "# A\n\nRepo A builds the kestrel firmware."})
    repo_b = folder(tmp_path / "repoB", {"README.md": "# B\n\nRepo B holds the osprey manuals."})
    assert run(capsys, "ingest", "repoA", "--collection", "clash")[0] == 0
    assert run(capsys, "ingest", "repoB", "--collection", "clash")[0] == 0
    listed = run(capsys, "sources")[1]
    assert f"clash\t{repo_a.resolve()}\t1 documents" in listed
    assert f"clash\t{repo_b.resolve()}\t1 documents" in listed
    with TestClient(app_of(every_backend, tmp_path)) as client:
        detail = "/v1/knowledge/detail/wiki/README.md"
        response = client.get(detail, params={"collection": "clash"})
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["type"] == "ambiguous_document"
        assert error["details"]["sources"] == sorted([str(repo_a.resolve()), str(repo_b.resolve())])
        chosen = {"collection": "clash", "source": str(repo_a.resolve())}
        response = client.get(detail, params=chosen)
        assert response.status_code == 200
        assert "kestrel firmware" in response.json()["content"]
        ask = {"query": "kestrel firmware osprey manuals", "collection": "clash", "threshold": 0}
        found = client.post("/v1/knowledge/query", json=ask).json()["results"]
        texts = " ".join(r["content"] for r in found if r["source_id"] == "README.md")
        assert "kestrel firmware" in texts and "osprey manuals" in texts


def test_one_file_through_a_second_source_is_refused(
    every_backend: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same resolved file reached through two sources, either way round: the second
    run changes nothing, exits 1 and names both sources."""
    live = folder(tmp_path / "live", {"kestrel.md": "# Kestrel\n\nThe kestrel manual, live."})
    assert run(capsys, "ingest", "live")[0] == 0
    status, out = run(capsys, "ingest", "live/kestrel.md", "--name", "kestrel-manual")
    assert status == 1
    assert "'kestrel-manual'" in out and repr(str(live.resolve())) in out and "kestrel.md" in out
    assert "kestrel-manual" not in run(capsys, "sources")[1]
    status, out = run(capsys, "ingest", "live/kestrel.md", "--name", "kestrel-manual", "--dry-run")
    assert status == 1 and "kestrel-manual" in out

    # the other way round: the named source first, then the folder holding its file
    other = folder(tmp_path / "other", {"osprey.md": "# Osprey\n\nThe osprey manual."})
    assert run(capsys, "ingest", "other/osprey.md", "--name", "osprey-manual")[0] == 0
    status, out = run(capsys, "ingest", "other")
    assert status == 1 and "'osprey-manual'" in out and repr(str(other.resolve())) in out


def test_deleting_a_named_source_leaves_the_same_name_of_another(
    every_backend: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ingest manuals/kestrel.md --name kestrel-manual` beside `live/kestrel.md`: two files,
    two documents; deleting kestrel-manual leaves the live one."""
    folder(tmp_path / "live", {"kestrel.md": "# Kestrel\n\nThe live kestrel runbook."})
    folder(tmp_path / "manuals", {"kestrel.md": "# Kestrel\n\nThe printed kestrel manual."})
    assert run(capsys, "ingest", "live")[0] == 0
    assert run(capsys, "ingest", "manuals/kestrel.md", "--name", "kestrel-manual")[0] == 0
    with TestClient(app_of(every_backend, tmp_path)) as client:
        response = client.delete("/v1/knowledge/sources/kestrel-manual")
        assert response.status_code == 200, response.text
        response = client.get("/v1/knowledge/detail/wiki/kestrel.md")
        assert response.status_code == 200
        assert "live kestrel runbook" in response.json()["content"]


def test_the_seeded_docs_are_one_source_deleted_as_one(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, seed_on_empty=True)
    with TestClient(create_app(settings)) as client:
        wait_for_seed(client)
        seeded = client.get("/health").json()["store"]["documents"]
        listed = client.get("/v1/knowledge/sources").json()["sources"]
        assert [(s["name"], s["documents"]) for s in listed] == [("bundled-docs", seeded)]
        response = client.delete("/v1/knowledge/sources/bundled-docs")
        assert response.status_code == 200 and response.json()["deleted"] == seeded
        assert client.get("/health").json()["store"]["documents"] == 0


def test_a_mirror_chunks_checks_and_notes_each_changed_document_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mirroring N changed documents plans and writes in one pass: each is chunked
    once, the store is asked for their hashes once and the source's run noted once."""
    from collections import Counter

    from knowledge_api.compose import build_service
    from knowledge_api.ingest import pipeline
    from knowledge_api.models import Document
    from knowledge_api.usecases import sources

    def notes(texts: dict[str, str]) -> list[Document]:
        return [Document("wiki", name, text, title=name) for name, text in texts.items()]

    async def mirrored() -> tuple[Counter[str], int]:
        service = build_service(make_settings(tmp_path))
        await service.start()
        try:
            first = notes({"a": "Alpha text.", "b": "Beta text.", "c": "Gamma text."})
            await sources.mirror(
                service, await sources.plan_mirror(service, first, "w", "default", True)
            )
            calls: Counter[str] = Counter()
            store = service.store
            for name in ("document_hashes", "record_source"):
                method = getattr(store, name)

                async def counted(
                    *args: object, _name: str = name, _method: object = method
                ) -> object:
                    calls[_name] += 1
                    return await _method(*args)  # type: ignore[operator]

                monkeypatch.setattr(store, name, counted)
            chunk = pipeline.chunk_document

            def chunked_once(doc: Document, **options: bool) -> object:
                calls[f"chunk {doc.source_id}"] += 1
                return chunk(doc, **options)

            monkeypatch.setattr(pipeline, "chunk_document", chunked_once)
            changed = notes(
                {"a": "Alpha changed.", "b": "Beta changed.", "c": "Gamma text.", "d": "New."}
            )
            plan = await sources.plan_mirror(service, changed, "w", "default", True)
            report = await sources.mirror(service, plan)
            return calls, report.indexed.documents
        finally:
            await service.stop()

    import asyncio

    calls, written = asyncio.run(mirrored())
    assert written == 3
    assert calls == {
        "document_hashes": 1,
        "record_source": 1,
        "chunk a": 1,
        "chunk b": 1,
        "chunk c": 1,
        "chunk d": 1,
    }
