"""`knowledge-api export` and `import`: a collection to a file (plain, gzip or zstd) and
back, without embedding when the embedder is the store's, embedding again (and saying
so) when not; and `migrate-store` into another file of the same backend, a backup."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from knowledge_api.cli import main
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.ingest.pipeline import Ingestor
from knowledge_api.stores import transfer
from tests.conftest import corpus, make_settings, make_store


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_SEED_ON_EMPTY", "false")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    (tmp_path / "docs").mkdir()
    for doc in corpus():
        name = doc.source_id.replace("/", "_").replace(":", "_") + ".md"
        (tmp_path / "docs" / name).write_text(f"# {doc.title}\n\n{doc.content}")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def answers(capsys: pytest.CaptureFixture[str], collection: str = "default") -> list[str]:
    status, out, _ = run(
        capsys,
        "query",
        "audio formats WAV FLAC",
        "--no-synthesize",
        "--json",
        "--collection",
        collection,
    )
    assert status == 0
    return [r["source_id"] for r in json.loads(out)["results"]]


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz", "c.jsonl.zst"])
def test_export_and_import_round_trip(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    found = answers(capsys)
    status, out, _ = run(capsys, "export", "--collection", "default", "--output", name)
    assert status == 0 and out.startswith(f"{len(corpus())} documents (")
    if name.endswith(".gz"):
        with gzip.open(tmp_path / name) as compressed:
            assert compressed.readline().startswith(b'{"format":"knowledge-api-export"')
    with transfer.opened(tmp_path / name, "rb") as file:
        lines = file.read().splitlines()
    header = json.loads(lines[0])
    assert header["embedder"] == {"name": "fake:hash-64", "dimension": 64}
    assert len(lines) == 1 + len(corpus())

    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    status, out, _ = run(capsys, "import", name)
    assert status == 0
    assert out.startswith(f"{len(corpus())} documents imported (") and "nothing embedded" in out
    assert answers(capsys) == found
    status, out, _ = run(capsys, "sources")
    assert out.startswith(f"default\t{(tmp_path / 'docs').resolve()}\t{len(corpus())} documents")
    status, out, _ = run(capsys, "import", name, "--collection", "copy")
    assert status == 0 and answers(capsys, "copy") == found


def test_vectors_of_another_embedder_are_embedded_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = FakeEmbedder(dimension=32)

    async def write_file() -> None:
        store = make_store("sqlite", make_settings(tmp_path, db_path=tmp_path / "other.db"))
        await store.open()

        async def embed(texts: list[str]) -> np.ndarray:
            return other.embed_documents(texts)

        await Ingestor(store, other, embed).ingest(corpus())  # type: ignore[arg-type]
        await transfer.export_collection(store, other, "default", tmp_path / "other.jsonl")
        await store.close()

    asyncio.run(write_file())
    status, out, err = run(capsys, "import", "other.jsonl")
    assert status == 0, err
    assert "the file's vectors are of fake:hash-32 (32-d)" in err
    assert "embedding the documents again" in err
    assert "passages embedded again" in out and "nothing embedded" not in out
    assert answers(capsys)[0] == "kb-7"


def test_bad_files_and_names_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    status, _, err = run(capsys, "export", "--collection", "nothing", "--output", "x.jsonl")
    assert status == 2 and "no collection 'nothing'" in err
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    status, _, err = run(capsys, "import", "notes.jsonl")
    assert status == 2 and "is not a file `knowledge-api export` wrote" in err
    status, _, err = run(capsys, "import", "missing.jsonl")
    assert status == 2 and "no such file" in err
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if not installed
    status, _, err = run(capsys, "export", "--output", "x.jsonl.zst")
    assert status == 2 and "pip install 'knowledge-api[zstd]'" in err
    assert not (tmp_path / "x.jsonl.zst").exists()


def test_migrate_store_backs_up_into_another_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    found = answers(capsys)
    status, _, err = run(capsys, "migrate-store", "--from", "sqlite", "--to", "sqlite")
    assert status == 2 and "--to-path" in err
    status, _, err = run(
        capsys, "migrate-store", "--from", "sqlite", "--to", "sqlite", "--to-path", "k.db"
    )
    assert status == 2 and "another place" in err
    args = ["migrate-store", "--from", "sqlite", "--to", "sqlite", "--to-path", "backup.db"]
    status, out, _ = run(capsys, *args)
    assert status == 0 and out.startswith(f"default: {len(corpus())} documents copied")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "backup.db"))
    assert answers(capsys) == found
