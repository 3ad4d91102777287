"""What the Chroma store does beyond the conformance suite: a real Chroma server,
the keyword index it rebuilds, collection names Chroma would refuse, the service on it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError
from knowledge_api.models import Document, SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.points.chroma import ChromaStore
from knowledge_api.stores.points.engine import Record
from tests.conftest import corpus, pairs
from tests.test_store_conformance import assert_known_answers, closed_port, index, vector

CHROMA = Path(sys.executable).parent / "chroma"


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = closed_port()
    server = subprocess.Popen(
        [str(CHROMA), "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).raise_for_status()
            return server, port
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(server)
    raise RuntimeError("the Chroma server did not start")


def stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    process, port = start_server(tmp_path / "server")
    yield port
    stop(process)


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[ChromaStore]:
    store = ChromaStore(tmp_path / "chroma")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def replicas(server: int) -> AsyncIterator[tuple[ChromaStore, ChromaStore]]:
    """Two stores on the server, as two processes of the service open theirs: one to
    write, one to read."""
    token = Secret("chroma-token-123")
    writer = ChromaStore(host="127.0.0.1", port=server, token=token, poll_seconds=0)
    reader = ChromaStore(host="127.0.0.1", port=server, token=token, poll_seconds=0)
    await writer.open()
    await reader.open()
    yield writer, reader
    await writer.close()
    await reader.close()


async def test_replicas_on_one_server_see_each_others_writes(
    replicas: tuple[ChromaStore, ChromaStore],
) -> None:
    writer, reader = replicas
    seen = await reader.generation()
    await index(writer, corpus())
    assert await reader.generation() != seen
    await assert_known_answers(reader)  # its keyword index was rebuilt from the server
    hits = await reader.search(SearchRequest("FLAC", None, 5, SearchFilters()))
    assert [h.source_id for h in hits] == ["kb-7"]
    health = await reader.health_check()
    assert health["status"] == "ok" and health["mode"] == "http"
    assert health["documents"] == 6 and health["keyword_index_chunks"] == 7
    assert "chroma-token-123" not in f"{health} {reader!r}"


async def test_a_lost_server_is_a_visible_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowledge_api.stores.points import chroma

    closed: list[object] = []
    close_client = chroma.close_client
    monkeypatch.setattr(chroma, "close_client", lambda c: (closed.append(c), close_client(c)))
    process, port = start_server(tmp_path / "server")
    store = ChromaStore(host="127.0.0.1", port=port)
    await store.open()
    try:
        await index(store, corpus())
        stop(process)
        with pytest.raises(BackendConnectionError, match="Chroma"):
            await store.search(
                SearchRequest("login timeout", vector("login timeout"), 5, SearchFilters())
            )
        # the lost client is closed, not left with its pooled sockets open
        assert len(closed) == 1 and not store.connected()
        health = await store.health_check()
        assert health["status"] == "unavailable"
    finally:
        stop(process)
        await store.close()


async def test_the_keyword_index_is_rebuilt_when_the_store_opens(tmp_path: Path) -> None:
    first = ChromaStore(tmp_path / "chroma")
    await first.open()
    await index(first, corpus())
    await first.close()
    again = ChromaStore(tmp_path / "chroma")
    await again.open()
    try:
        assert len(again.keywords) == 7
        hits = await again.search(SearchRequest("FLAC", None, 5, SearchFilters()))
        assert [h.source_id for h in hits] == ["kb-7"]
        await assert_known_answers(again)
    finally:
        await again.close()


async def test_any_collection_name_gets_a_chroma_collection(local: ChromaStore) -> None:
    names = ["default", "docs.v2", "Ünïcode", "a"]
    for name in names:
        await index(local, [Document("wiki", "p", f"Page of {name}.", "P", collection=name)])
    assert await local.collections() == dict.fromkeys(sorted(names), 1)
    hits = await local.search(
        SearchRequest("page", vector("page"), 5, SearchFilters(collection="docs.v2"))
    )
    assert [h.chunk.content for h in hits] == ["Page of docs.v2."]


async def test_metadata_filters_keep_their_types(local: ChromaStore) -> None:
    docs = [
        Document("wiki", f"p{i}", f"Release note {i}.", f"R{i}", {"n": i, "ok": i % 2 == 0})
        for i in range(4)
    ]
    await index(local, docs)
    for mode in ("vector", "keyword"):
        hits = await local.search(
            SearchRequest(
                "release note",
                vector("release note"),
                10,
                SearchFilters(where=pairs((("n", 2),))),
                mode=mode,
            ),
        )
        assert [h.source_id for h in hits] == ["p2"], mode
        even = SearchFilters(where=pairs((("ok", True),)))
        hits = await local.search(
            SearchRequest("release note", vector("release note"), 10, even, mode=mode)
        )
        assert sorted(h.source_id for h in hits) == ["p0", "p2"], mode


async def test_a_replica_sees_which_collection_another_wrote(
    replicas: tuple[ChromaStore, ChromaStore],
) -> None:
    writer, reader = replicas
    first, second, other = corpus()[:3]
    await index(writer, [replace(first, collection="a"), replace(other, collection="b")])
    a, b = await reader.collection_generation("a"), await reader.collection_generation("b")
    await index(writer, [replace(second, collection="a")])
    assert await reader.collection_generation("a") != a
    assert await reader.collection_generation("b") == b
    assert await reader.collection_generation("a") == await writer.collection_generation("a")


async def test_an_older_record_stored_over_a_write_leaves_no_collection_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ChromaStore(tmp_path / "chroma", poll_seconds=0)
    await store.open()
    try:
        first, second, other = corpus()[:3]
        await index(store, [replace(first, collection="a"), replace(other, collection="b")])
        a = await store.collection_generation("a")
        theirs = await store._read_record()  # another writer read the record, then ...
        write = store._write_record
        overwrites: list[Record] = []

        async def then_theirs(record: Record) -> None:
            await write(record)
            if not overwrites:  # ... stores it (with its own token) just after our write
                overwrites.append({**theirs, "generation": "theirs"})
                await write(overwrites[0])

        monkeypatch.setattr(store, "_write_record", then_theirs)
        await index(store, [replace(second, collection="a")])
        assert overwrites
        assert await store.collection_generation("a") not in {a, "theirs"}
    finally:
        await store.close()
