"""`knowledge-api export` and `import`: a collection to a file (plain, gzip or zstd) and
back, without embedding when the embedder is the store's, embedding again (and saying
so) when not; and `migrate-store` into another file of the same backend, a backup."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.cli import main
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.ingest import transfer
from knowledge_api.ingest.pipeline import Ingestor
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


def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    """The lines of an export of the corpus (header first), as JSON."""
    assert run(capsys, "ingest", "docs")[0] == 0
    assert run(capsys, "export", "--collection", "default", "--output", "c.jsonl")[0] == 0
    lines = (tmp_path / "c.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines]


def written(tmp_path: Path, lines: list[dict[str, object]], name: str = "bad.jsonl") -> str:
    (tmp_path / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return name


def vector(values: np.ndarray) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def stored_documents(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])


def set_chunk(doc: dict[str, Any], **values: object) -> None:
    doc["chunks"][0].update(values)


BAD_LINES: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "nan": ("chunks[0].vector", lambda d: set_chunk(d, vector=vector(np.full(64, np.nan)))),
    "inf": ("chunks[0].vector", lambda d: set_chunk(d, vector=vector(np.full(64, np.inf)))),
    "zero": ("chunks[0].vector", lambda d: set_chunk(d, vector=vector(np.zeros(64)))),
    "dimension": ("chunks[0].vector", lambda d: set_chunk(d, vector=vector(np.ones(32)))),
    "dots": ("collection", lambda d: d.update(collection="../x")),
    "empty collection": ("collection", lambda d: d.update(collection="")),
    "source type": ("source_type", lambda d: d.update(source_type="tweets")),
    "negative index": ("chunks[0].chunk_index", lambda d: set_chunk(d, chunk_index=-1)),
    "nul content": ("content", lambda d: d.update(content="a\x00b")),
    "nul title": ("chunks[0].title", lambda d: set_chunk(d, title="a\x00b")),
    "nul metadata": ("metadata.team", lambda d: d.update(metadata={"team": "a\x00b"})),
    "nested metadata": ("metadata.team", lambda d: d.update(metadata={"team": {"a": 1}})),
    "date": ("created_at", lambda d: d.update(created_at="yesterday")),
    "duplicate index": (
        "chunks",
        lambda d: d["chunks"].extend([dict(d["chunks"][0]), dict(d["chunks"][0])]),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_writes_nothing_and_is_named(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = exported(tmp_path, capsys)
    field, spoil = BAD_LINES[case]
    spoil(lines[-1])  # the last document: the ones before it come first
    name = written(tmp_path, lines)
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    status, _, err = run(capsys, "import", name)
    assert status == 2, err
    assert err.startswith(f"error: {name}:{len(lines)} {field}: ") and err.count("\n") == 1
    assert stored_documents(tmp_path / "restored.db") == 0


def test_a_document_named_twice_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = exported(tmp_path, capsys)
    name = written(tmp_path, [*lines, lines[1]])
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    status, _, err = run(capsys, "import", name)
    assert status == 2 and f"{name}:{len(lines) + 1}: repeats the document of line 2" in err
    assert stored_documents(tmp_path / "restored.db") == 0


def test_vectors_are_kept_at_unit_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores score by dot product: a vector of 1e38s would match every query at 1.0."""
    lines = exported(tmp_path, capsys)
    loud = lines[1]
    for chunk in loud["chunks"]:  # type: ignore[attr-defined]
        chunk["vector"] = vector(np.full(64, 1e38))
    name = written(tmp_path, lines)
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    assert run(capsys, "import", name)[0] == 0
    assert run(capsys, "export", "--collection", "default", "--output", "again.jsonl")[0] == 0
    again = [json.loads(line) for line in (tmp_path / "again.jsonl").read_bytes().splitlines()]
    (kept,) = [line for line in again[1:] if line["source_id"] == loud["source_id"]]
    for chunk in kept["chunks"]:
        stored = np.frombuffer(base64.b64decode(chunk["vector"]), dtype="<f4")
        assert np.allclose(stored, np.full(64, 1 / 8), atol=1e-6)  # 1/sqrt(64)


@pytest.mark.parametrize(
    ("name", "spoil", "says"),
    [
        ("c.jsonl.gz", lambda data: data[: len(data) // 2], "is truncated"),
        ("c.jsonl.gz", lambda data: b"not gzip at all" + data, "is not a readable .gz file"),
        ("c.jsonl.zst", lambda data: data[: len(data) // 2], "is truncated"),
        ("c.jsonl.zst", lambda data: data[:-3], "is truncated"),
        ("c.jsonl.zst", lambda data: b"not zstd at all" + data, "is not a readable .zst file"),
    ],
)
def test_a_damaged_compressed_file_is_one_error_line(
    name: str,
    spoil: Callable[[bytes], bytes],
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(capsys, "ingest", "docs")[0] == 0
    assert run(capsys, "export", "--collection", "default", "--output", name)[0] == 0
    (tmp_path / name).write_bytes(spoil((tmp_path / name).read_bytes()))
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    status, _, err = run(capsys, "import", name)
    assert status == 2
    assert err.startswith(f"error: {name}: {says}") and err.count("\n") == 1, err
    assert stored_documents(tmp_path / "restored.db") == 0


def test_a_bad_file_of_another_embedder_is_refused_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = exported(tmp_path, capsys)
    lines[0]["embedder"] = {"name": "fake:hash-32", "dimension": 32}  # type: ignore[index]
    for line in lines[1:]:
        for chunk in line["chunks"]:  # type: ignore[attr-defined]
            chunk["vector"] = vector(np.ones(32))
    lines[-1]["source_type"] = "tweets"
    name = written(tmp_path, lines)
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    status, _, err = run(capsys, "import", name)
    assert status == 2 and err.startswith(f"error: {name}:{len(lines)} source_type: ")
    assert "embedding the documents again" not in err
    assert stored_documents(tmp_path / "restored.db") == 0


def test_an_export_keeps_each_documents_access_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore opens nothing: a closed document and a group's stay so, and a line of a
    file written before access lists were kept (none on it) is public."""
    assert run(capsys, "ingest", "docs", "--name", "docs", "--acl", "group:hr")[0] == 0
    assert run(capsys, "export", "--collection", "default", "--output", "c.jsonl")[0] == 0
    lines = (tmp_path / "c.jsonl").read_text().splitlines()
    assert {tuple(json.loads(line)["acl"]) for line in lines[1:]} == {("group:hr",)}
    first = json.loads(lines[1])
    del first["acl"]
    (tmp_path / "old.jsonl").write_text("\n".join([lines[0], json.dumps(first)]) + "\n")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "restored.db"))
    assert run(capsys, "import", "c.jsonl")[0] == 0
    assert run(capsys, "import", "old.jsonl", "--collection", "old")[0] == 0
    with sqlite3.connect(tmp_path / "restored.db") as db:
        rows = db.execute("SELECT collection, acl FROM documents").fetchall()
    assert {acl for collection, acl in rows if collection == "default"} == {'["group:hr"]'}
    assert {acl for collection, acl in rows if collection == "old"} == {'["public"]'}
