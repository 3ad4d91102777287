"""`knowledge-api migrate-store`: collections move between backends with their vectors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest

from knowledge_api.cli import main
from knowledge_api.models import Chunk, Document, chunk_id
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from tests.conftest import corpus, make_store
from tests.test_store_conformance import EMBEDDER, assert_known_answers, index

PAIRS = [("sqlite", "chroma"), ("sqlite", "qdrant"), ("chroma", "qdrant"), ("qdrant", "sqlite")]


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.chdir(tmp_path)
    env = {
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_DB_PATH": str(tmp_path / "k.db"),
        "KNOWLEDGE_CHROMA_PATH": str(tmp_path / "chroma"),
        "KNOWLEDGE_QDRANT_PATH": str(tmp_path / "qdrant"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env(environ=env, env_file=None)


@asynccontextmanager
async def opened(name: str, settings: Settings) -> AsyncIterator[KnowledgeStore]:
    store = make_store(name, settings)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def random_documents() -> list[Document]:
    """Vectors no embedder would produce: the same vectors after the copy prove it copied.
    (Unit length, as every embedder's: cosine engines store vectors normalised.)"""
    rng = np.random.default_rng(3)
    docs = []
    for i in range(5):
        doc = Document("wiki", f"page-{i}", f"Page {i} body.", f"Page {i}", {"n": i}, "random")
        vector = rng.standard_normal(EMBEDDER.dimension).astype(np.float32)
        vector /= np.linalg.norm(vector)
        doc.chunks = [
            Chunk(chunk_id(doc.id, 0), doc.id, 0, doc.content, doc.title, embedding=vector)
        ]
        docs.append(doc)
    return docs


async def fill(name: str, settings: Settings) -> dict[str, list[Document]]:
    async with opened(name, settings) as store:
        await index(store, corpus())
        await store.index_documents(random_documents())
        return {c: [d async for d in store.iter_documents(c)] for c in await store.collections()}


def assert_same_documents(copied: list[Document], original: list[Document]) -> None:
    assert [d.id for d in copied] == [d.id for d in original]
    for got, want in zip(copied, original, strict=True):
        assert (got.content, got.title, got.metadata) == (want.content, want.title, want.metadata)
        assert got.content_hash == want.content_hash
        assert [c.id for c in got.chunks] == [c.id for c in want.chunks]
        for a, b in zip(got.chunks, want.chunks, strict=True):
            assert np.allclose(np.asarray(a.embedding), np.asarray(b.embedding), rtol=0, atol=1e-6)


async def assert_copied(name: str, settings: Settings, original: dict[str, list[Document]]) -> None:
    async with opened(name, settings) as store:
        assert await store.collections() == {"default": 6, "random": 5}
        for collection, documents in original.items():
            assert_same_documents([d async for d in store.iter_documents(collection)], documents)
        await assert_known_answers(store)


async def stored_collections(name: str, settings: Settings) -> dict[str, int]:
    async with opened(name, settings) as store:
        return await store.collections()


# main() runs its own event loop, so these tests are synchronous and run ours in turns
@pytest.mark.parametrize("source, target", PAIRS)
def test_migration_copies_every_collection_with_its_vectors(
    source: str, target: str, environment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    original = asyncio.run(fill(source, environment))
    assert main(["migrate-store", "--from", source, "--to", target]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "default: 6 documents copied (7 chunks), 0 unchanged skipped",
        "random: 5 documents copied (5 chunks), 0 unchanged skipped",
    ]
    asyncio.run(assert_copied(target, environment, original))
    assert main(["migrate-store", "--from", source, "--to", target]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "default: 0 documents copied (0 chunks), 6 unchanged skipped",
        "random: 0 documents copied (0 chunks), 5 unchanged skipped",
    ]


def test_only_the_named_collections_move(
    environment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(fill("sqlite", environment))
    args = ["migrate-store", "--from", "sqlite", "--to", "qdrant", "--collection", "random"]
    assert main(args) == 0
    assert capsys.readouterr().out == "random: 5 documents copied (5 chunks), 0 unchanged skipped\n"
    assert asyncio.run(stored_collections("qdrant", environment)) == {"random": 5}


def test_vectors_of_another_embedder_are_refused(
    environment: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(fill("sqlite", environment))
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "local")
    assert main(["migrate-store", "--from", "sqlite", "--to", "chroma"]) == 2
    assert "Mixing vector spaces" in capsys.readouterr().err
    assert asyncio.run(stored_collections("chroma", environment)) == {}


def test_source_and_target_must_differ(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate-store", "--from", "chroma", "--to", "chroma"]) == 2
    assert "--to: must name another store than --from" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["migrate-store", "--from", "sqlite", "--to", "elastic"])
    assert "invalid choice: 'elastic'" in capsys.readouterr().err
