"""The contract every KnowledgeStore backend must keep; parametrised over backends."""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from knowledge_api import facets, spans
from knowledge_api.app import create_app
from knowledge_api.config.fields import Secret
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import (
    BackendConnectionError,
    ConfigurationError,
    EmbedderMismatchError,
    IndexingError,
    InvalidRequest,
)
from knowledge_api.filters import RANGES, matches, millis_of
from knowledge_api.filters import parse as parse_filter
from knowledge_api.ingest import transfer
from knowledge_api.ingest.backfill import backfill
from knowledge_api.ingest.pipeline import Ingestor
from knowledge_api.ledger import Job, JobFile
from knowledge_api.models import (
    SEARCH_MODES,
    SETTINGS_RANKING,
    Chunk,
    Document,
    DocumentPage,
    IndexSummary,
    Ranking,
    Recency,
    SearchFilters,
    SearchHit,
    SearchMode,
    chunk_id,
    document_id,
)
from knowledge_api.ranking import by_recency
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore, SearchRequest
from knowledge_api.stores.fusion import reciprocal_rank_fusion
from tests import pg
from tests.conftest import corpus, make_settings, make_store, pairs
from tests.documents import pdf_bytes
from tests.pg import postgres_settings, supabase_settings
from tests.test_access import bearer, make_key
from tests.test_uploads import wait_for

EMBEDDER = FakeEmbedder()
# query -> source id of the best hit, over the corpus of tests.conftest
KNOWN_ANSWERS = {
    "login page timeout with SSO": "SIAM-101",
    "duplicate assets when paging search results": "a1b2c3d",
    "which audio formats are accepted, WAV FLAC MP3": "kb-7",
    "when is the 4.2 release": "msg-42",
    "median search latency": "latency-weekly",
}


def sqlite_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return make_settings(tmp_path, store="sqlite")


def chroma_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return make_settings(tmp_path, store="chroma", chroma_path=tmp_path / "chroma")


def qdrant_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return make_settings(tmp_path, store="qdrant", qdrant_path=str(tmp_path / "qdrant"))


def replicated_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """The postgres store reading from a streaming standby of its primary: every read
    made right after a write must see it (tests/pg_replication.py)."""
    cluster = request.getfixturevalue("replicated")
    return make_settings(
        tmp_path,
        store="postgres",
        database_url=Secret(cluster.fresh_database()),
        database_read_urls=Secret(cluster.standby_url),
    )


# backend name -> settings for a fresh, empty store of that backend (one per test)
BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Settings]] = {
    "sqlite": sqlite_settings,
    "postgres": postgres_settings,
    "postgres-replica": replicated_settings,
    "supabase": supabase_settings,
    "chroma": chroma_settings,
    "qdrant": qdrant_settings,
}


async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KnowledgeStore]:
    """The open store of the backend the fixture's param names; closed after."""
    settings = BACKENDS[request.param](request, tmp_path)
    backend = make_store(settings.store, settings)
    await backend.open()
    yield backend
    await backend.close()


store = pytest.fixture(params=list(BACKENDS), name="store")(opened)


async def index(store: KnowledgeStore, docs: Sequence[Document]) -> IndexSummary:
    async def embed(texts: Sequence[str]) -> np.ndarray:
        return EMBEDDER.embed_documents(texts)

    return await Ingestor(store, EMBEDDER, embed).ingest(docs)


def vector(text: str) -> np.ndarray:
    return EMBEDDER.embed_query(text)


async def search(
    store: KnowledgeStore, query: str, k: int = 5, threshold: float = 0.0, **filters: object
):  # type: ignore[no-untyped-def]
    if "metadata" in filters:
        filters["where"] = pairs(filters.pop("metadata"))
    where = SearchFilters(**filters)  # type: ignore[arg-type]
    return await store.search(SearchRequest(query, vector(query), k, where, threshold))


async def test_known_answers_rank_first(store: KnowledgeStore) -> None:
    await index(store, corpus())
    await assert_known_answers(store)


async def assert_known_answers(store: KnowledgeStore) -> None:
    for query, source_id in KNOWN_ANSWERS.items():
        hits = await search(store, query)
        assert hits and hits[0].source_id == source_id, query
        assert all(0.0 <= h.similarity <= 1.0 for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_keyword_only_search_when_there_is_no_vector(store: KnowledgeStore) -> None:
    await index(store, corpus())
    hits = await store.search(SearchRequest("FLAC", None, 5, SearchFilters()))
    assert [h.source_id for h in hits] == ["kb-7"] and hits[0].similarity == 1.0


async def test_filters_by_source_type_metadata_and_collection(store: KnowledgeStore) -> None:
    await index(store, corpus())
    other = Document(
        "jira", "SIAM-101", "Login timeout, but elsewhere.", "Other", {}, collection="other"
    )
    await index(store, [other])
    jira = await search(store, "login timeout", source_types=("jira",))
    assert [h.source_id for h in jira] == ["SIAM-101"] and jira[0].metadata["priority"] == "high"
    aoma = await search(store, "assets test case login", 10, metadata=(("app_under_test", "aoma"),))
    assert {h.source_id for h in aoma} == {
        "SIAM-101",
        "a1b2c3d",
        "https://wiki.example.com/aoma/test-cases",
    }
    both = await search(store, "login", metadata=(("app_under_test", "aoma"), ("priority", "high")))
    assert [h.source_id for h in both] == ["SIAM-101"]
    elsewhere = await search(store, "login timeout", collection="other")
    assert [h.chunk.content for h in elsewhere] == ["Login timeout, but elsewhere."]
    assert await search(store, "login", source_types=("email",), metadata=(("x", 1),)) == []


async def test_threshold_and_top_k(store: KnowledgeStore) -> None:
    await index(store, corpus())
    hits = await store.search(
        SearchRequest("release", vector("release"), 2, SearchFilters(), threshold=0.0)
    )
    assert len(hits) == 2
    strict = await store.search(
        SearchRequest("release", vector("release"), 5, SearchFilters(), threshold=0.9)
    )
    assert all(h.similarity >= 0.9 for h in strict)


async def test_reindexing_replaces_instead_of_duplicating(store: KnowledgeStore) -> None:
    await index(store, corpus())
    changed = Document("jira", "SIAM-101", "Completely new ticket text about exports.", "New")
    summary = await index(store, [changed])
    assert summary.documents == 1
    hits = await store.search(
        SearchRequest("exports", vector("exports"), 10, SearchFilters(), threshold=0.0)
    )
    assert [h.source_id for h in hits].count("SIAM-101") == 1
    assert await store.count() == 6


async def test_get_find_and_delete(store: KnowledgeStore) -> None:
    docs = corpus()
    await index(store, docs)
    wiki = docs[2]
    stored = await store.get_by_id(wiki.id)
    assert stored is not None and stored.content == wiki.content and len(stored.chunks) == 2
    assert stored.metadata == {"app_under_test": "aoma"} and stored.created_at
    for key in (wiki.source_id, wiki.id, stored.chunks[1].id):
        found = await store.find_documents("wiki", key, "default")
        assert [doc.id for doc in found] == [wiki.id]
    assert await store.find_documents("jira", wiki.source_id, "default") == []
    assert await store.delete(wiki.id) is True
    assert await store.delete(wiki.id) is False
    assert await store.get_by_id(wiki.id) is None
    hits = await search(store, "create a test case in AOMA", 10)
    assert wiki.source_id not in {h.source_id for h in hits}


async def test_unicode_and_very_long_documents(store: KnowledgeStore) -> None:
    long_text = "\n\n".join(
        f"Absatz {i}: Größenänderung für Übersetzungen 🚀 日本語." for i in range(400)
    )
    doc = Document("wiki", "ünïcode/页面", long_text, "Ünïcode 页面")
    summary = await index(store, [doc])
    assert summary.chunks > 10
    [stored] = await store.find_documents("wiki", "ünïcode/页面", "default")
    assert stored.content == long_text and stored.title == "Ünïcode 页面"
    hits = await search(store, "Größenänderung")
    assert hits and hits[0].source_id == "ünïcode/页面"


async def test_generation_changes_on_every_write(store: KnowledgeStore) -> None:
    start = await store.generation()
    await index(store, corpus()[:1])
    after_write = await store.generation()
    assert after_write != start
    assert await store.generation() == after_write
    await store.delete(corpus()[0].id)
    assert await store.generation() != after_write


async def test_a_collection_generation_moves_with_its_writes_only(store: KnowledgeStore) -> None:
    first, second = (replace(doc, collection="a") for doc in corpus()[:2])
    other = replace(corpus()[2], collection="b")
    await index(store, [first, other])
    a, b = await store.collection_generation("a"), await store.collection_generation("b")
    await index(store, [second])
    assert await store.collection_generation("a") != a
    assert await store.collection_generation("b") == b
    a, b = await store.collection_generation("a"), await store.collection_generation("b")
    await store.delete(other.id)
    assert await store.collection_generation("b") != b
    assert await store.collection_generation("a") == a
    a, b = await store.collection_generation("a"), await store.collection_generation("b")
    assert await store.delete_documents([first.id]) == 1
    assert await store.collection_generation("a") != a
    assert await store.collection_generation("b") == b


async def test_hashes_and_vectors_are_reusable(store: KnowledgeStore) -> None:
    docs = corpus()
    await index(store, docs)
    hashes = await store.document_hashes([d.id for d in docs] + ["missing"])
    assert hashes == {d.id: d.content_hash for d in docs}
    chunk = docs[0].chunks[0]
    vectors = await store.embeddings_by_hash([chunk.content_hash])
    assert np.allclose(vectors[chunk.content_hash], vector(chunk.embedded_text))


async def test_another_embedder_is_refused(store: KnowledgeStore) -> None:
    await index(store, corpus()[:1])
    await store.check_embedder(EMBEDDER.name, EMBEDDER.dimension)
    with pytest.raises(EmbedderMismatchError, match="Mixing vector spaces"):
        await store.check_embedder("local:all-MiniLM-L6-v2", 384)


async def test_concurrent_writers_lose_nothing(store: KnowledgeStore) -> None:
    docs = [
        Document("git", f"commit-{i}", f"Commit {i} changes module {i % 7}.", f"C{i}")
        for i in range(60)
    ]
    await asyncio.gather(*(index(store, docs[i::6]) for i in range(6)))
    assert await store.count() == 60
    assert (await store.health_check())["status"] == "ok"


async def test_search_modes_use_one_ranking_each(store: KnowledgeStore) -> None:
    await index(store, corpus())
    query = "FLAC"
    by_keyword = await store.search(
        SearchRequest(query, vector(query), 5, SearchFilters(), mode="keyword")
    )
    assert [h.source_id for h in by_keyword] == ["kb-7"]
    assert 0.0 <= by_keyword[0].similarity <= 1.0
    by_vector = await store.search(
        SearchRequest(query, vector(query), 20, SearchFilters(), mode="vector")
    )
    assert {h.source_id for h in by_vector} <= {d.source_id for d in corpus()}
    hybrid = await store.search(SearchRequest(query, vector(query), 20, SearchFilters()))
    assert {h.chunk.id for h in hybrid} == {h.chunk.id for h in by_vector} | {
        h.chunk.id for h in by_keyword
    }


async def test_collections_and_export(store: KnowledgeStore) -> None:
    await index(store, corpus())
    extra = [Document("wiki", f"p{i}", f"Page {i}", f"P{i}", collection="docs") for i in range(3)]
    await index(store, extra)
    assert await store.collections() == {"default": 6, "docs": 3}
    exported = [doc async for doc in store.iter_documents("docs")]
    assert sorted(d.source_id for d in exported) == ["p0", "p1", "p2"]
    for doc in exported:
        assert doc.collection == "docs" and doc.chunks
        for chunk in doc.chunks:
            assert np.allclose(np.asarray(chunk.embedding), vector(chunk.embedded_text), atol=1e-6)
    assert [d async for d in store.iter_documents("missing")] == []


async def test_the_last_of_repeated_documents_wins(store: KnowledgeStore) -> None:
    await store.check_embedder(EMBEDDER.name, EMBEDDER.dimension)
    versions = []
    for text in ("First version of the page.", "Second version of the page."):
        doc = Document("wiki", "page", text, "Page")
        doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, text, "Page")]
        doc.chunks[0].embedding = vector(doc.chunks[0].embedded_text)
        versions.append(doc)
    await store.index_documents(versions)
    stored = await store.get_by_id(versions[0].id)
    assert stored is not None and stored.content == "Second version of the page."
    assert await store.count() == 1


async def test_a_document_missing_a_vector_is_refused_whole(store: KnowledgeStore) -> None:
    docs = corpus()
    await index(store, docs)
    wiki = docs[2]
    changed = Document(wiki.source_type, wiki.source_id, "Replaced text.", "Replaced")
    changed.chunks = [
        Chunk(chunk_id(wiki.id, i), wiki.id, i, f"Replacement part {i}.") for i in range(2)
    ]
    changed.chunks[0].embedding = vector(changed.chunks[0].embedded_text)
    with pytest.raises(IndexingError):
        await store.index_documents([changed])
    stored = await store.get_by_id(wiki.id)
    assert stored is not None and stored.content == wiki.content
    assert [c.content for c in stored.chunks] == [c.content for c in wiki.chunks]
    assert await store.document_hashes([wiki.id]) == {wiki.id: wiki.content_hash}
    hits = await search(store, "replacement part")
    assert "Replacement part 0." not in {h.chunk.content for h in hits}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def under_a_file(tmp_path: Path) -> Path:
    """A path that cannot be created: its parent is a regular file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    return blocker / "store"


# backend name -> settings of a store whose engine cannot be reached
UNREACHABLE: dict[str, Callable[[Path], Settings]] = {
    "sqlite": lambda tmp: make_settings(tmp, db_path=under_a_file(tmp) / "k.db"),
    "chroma": lambda tmp: make_settings(tmp, chroma_host="127.0.0.1", chroma_port=closed_port()),
    "qdrant": lambda tmp: make_settings(tmp, qdrant_url=f"http://127.0.0.1:{closed_port()}"),
    "postgres": lambda tmp: make_settings(
        tmp, database_url=Secret(f"postgresql://knowledge@127.0.0.1:{closed_port()}/knowledge")
    ),
}


@pytest.mark.parametrize("name", list(UNREACHABLE))
async def test_an_unreachable_engine_fails_visibly(name: str, tmp_path: Path) -> None:
    backend = make_store(name, UNREACHABLE[name](tmp_path))
    with pytest.raises(BackendConnectionError):
        await backend.open()
    health = await backend.health_check()
    assert health["status"] == "unavailable" and health["error"]
    for mode in SEARCH_MODES:
        with pytest.raises(BackendConnectionError):
            await backend.search(
                SearchRequest("login", vector("login"), 5, SearchFilters(), mode=mode)
            )
    await backend.close()


# -- the service on every backend ---------------------------------------------------------

# backend name -> (the module its extra installs, settings that need nothing running)
EXTRAS: dict[str, tuple[str, Callable[[Path], Settings]]] = {
    "postgres": ("asyncpg", lambda tmp: make_settings(tmp, store="postgres")),
    "supabase": (
        "supabase",
        lambda tmp: make_settings(
            tmp,
            store="supabase",
            supabase_url="https://project.supabase.co",
            supabase_service_role_key=Secret("key"),
        ),
    ),
    "chroma": ("chromadb", lambda tmp: make_settings(tmp, store="chroma", chroma_path=tmp / "c")),
    "qdrant": (
        "qdrant_client",
        lambda tmp: make_settings(tmp, store="qdrant", qdrant_path=":memory:"),
    ),
}


@pytest.mark.parametrize("name", list(EXTRAS))
def test_a_missing_extra_names_the_install_command(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, settings = EXTRAS[name]
    monkeypatch.setitem(sys.modules, module, None)
    app = create_app(settings(tmp_path))
    needs = rf"pip install 'knowledge-api\[{name}\]'"
    with pytest.raises(ConfigurationError, match=needs), TestClient(app):
        pass


POSTED = ("source_type", "source_id", "content", "title", "metadata")
"""What the corpus's documents say in POST /v1/knowledge/documents."""


def as_json(doc: Document) -> dict[str, Any]:
    return {name: getattr(doc, name) for name in POSTED}


@pytest.mark.parametrize("name", list(BACKENDS))
def test_the_service_runs_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Index, query, filter, look up, delete and report health over HTTP."""
    with TestClient(create_app(BACKENDS[name](request, tmp_path))) as client:
        documents = [as_json(doc) for doc in corpus()]
        created = client.post("/v1/knowledge/documents", json={"documents": documents})
        assert created.status_code == 201 and created.json()["indexed"] == 6
        aoma = {
            "query": "How do I create a test case in AOMA?",
            "synthesize": False,
            "filters": {"app_under_test": "aoma"},
        }
        results = client.post("/v1/knowledge/query", json=aoma).json()["results"]
        assert results[0]["source_id"] == "https://wiki.example.com/aoma/test-cases"
        assert {r["metadata"]["app_under_test"] for r in results} == {"aoma"}
        recency = {"field": "created_at", "half_life_days": 30}
        recent = client.post("/v1/knowledge/query", json={**aoma, "ranking": {"recency": recency}})
        assert recent.json()["results"] and recent.json()["metrics"]["ranking"]["recency"] == {
            **recency,
            "undated": 0,
        }
        audio = {"query": "Which audio formats are accepted?", "sources": ["knowledge"]}
        body = client.post("/v1/knowledge/query", json=audio).json()
        assert [r["source_id"] for r in body["results"]] == ["kb-7"]
        assert "[1]" in body["synthesis"]
        doc_id = created.json()["ids"][3]
        assert client.get(f"/v1/knowledge/documents/{doc_id}").json()["source_id"] == "kb-7"
        detail = client.get("/v1/knowledge/detail/knowledge/kb-7").json()
        assert detail["id"] == doc_id and detail["title"] == "Supported audio formats"
        assert client.delete(f"/v1/knowledge/documents/{doc_id}").status_code == 200
        assert client.delete(f"/v1/knowledge/documents/{doc_id}").status_code == 404
        assert client.get(f"/v1/knowledge/documents/{doc_id}").status_code == 404
        assert client.get("/v1/knowledge/documents/not-a-uuid").status_code == 404
        again = client.post("/v1/knowledge/query", json=audio).json()
        assert again["results"] == [] and again["metrics"]["cache_hit"] is False
        health = client.get("/health").json()
        assert (
            health["store"]["backend"] == name.removesuffix("-replica")
            and health["store"]["documents"] == 5
        )
        assert health["status"] == "healthy"


@pytest.mark.parametrize("name", list(BACKENDS))
def test_result_pages_compose_the_longer_page_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Three pages of two results are the first six, in order, each saying where the
    next starts; facets count the whole match set on every page."""
    with TestClient(create_app(BACKENDS[name](request, tmp_path))) as client:
        documents = [as_json(doc) for doc in corpus()]
        assert client.post("/v1/knowledge/documents", json={"documents": documents}).is_success
        asked = {"query": "search latency and timeouts", "synthesize": False, "threshold": 0}
        whole = client.post("/v1/knowledge/query", json={**asked, "limit": 6}).json()
        assert len(whole["results"]) == 6
        paged, offsets, counted = [], [], []
        for offset in (0, 2, 4):
            page = {**asked, "limit": 2, "offset": offset, "facets": ["source_type"]}
            body = client.post("/v1/knowledge/query", json=page).json()
            paged += [r["id"] for r in body["results"]]
            offsets.append(body["next_offset"])
            counted.append(body["facets"])
        assert paged == [r["id"] for r in whole["results"]]
        assert offsets[:2] == [2, 4]
        assert counted[0] == counted[1] == counted[2]
        every = client.post("/v1/knowledge/query", json={**asked, "limit": 20}).json()
        assert sum(counted[0]["source_type"].values()) == len(every["results"]) > 6


@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_key_reaches_only_its_collections_on_every_route(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Tenant isolation: a key restricted to collections reads and writes no other one."""
    settings = BACKENDS[name](request, tmp_path).replace(auth="keys")
    tenant = asyncio.run(make_key(settings, "tenant", ["admin"], ("a", "c")))
    operator = asyncio.run(make_key(settings, "operator", ["admin"]))
    with TestClient(create_app(settings)) as client:
        for collection in ("a", "b"):
            batch = [{**as_json(doc), "collection": collection} for doc in corpus()]
            created = client.post(
                "/v1/knowledge/documents", json={"documents": batch}, headers=bearer(operator)
            )
            assert created.status_code == 201, created.text
        theirs = created.json()["ids"][3]  # kb-7 in b
        mine = bearer(tenant)

        def status(method: str, path: str, body: dict[str, Any] | None = None) -> int:
            return client.request(method, path, json=body, headers=mine).status_code

        ask = {"query": "Which audio formats are accepted?", "synthesize": False}
        assert status("POST", "/v1/knowledge/query", {**ask, "collection": "a"}) == 200
        assert status("POST", "/v1/knowledge/query", {**ask, "collection": "b"}) == 403
        assert status("POST", "/v1/knowledge/query", ask) == 403  # the default collection
        answer = {"query": "Which audio formats are accepted?", "threshold": 0.0}
        assert status("POST", "/v1/knowledge/answer", {**answer, "collection": "a"}) == 200
        assert status("POST", "/v1/knowledge/answer", {**answer, "collection": "b"}) == 403
        retrieve = {"query": "audio formats"}
        assert status("POST", "/v1/knowledge/retrieve", {**retrieve, "collection": "a"}) == 200
        assert status("POST", "/v1/knowledge/retrieve", {**retrieve, "collection": "b"}) == 403
        missing = client.post(
            "/v1/knowledge/retrieve", json={**retrieve, "collection": "c"}, headers=mine
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["details"]["available"] == ["a"]  # not b
        validate = {"collection": "b", "test_queries": ["audio"]}
        assert status("POST", "/v1/knowledge/validate", validate) == 403
        assert status("GET", "/v1/knowledge/detail/knowledge/kb-7?collection=a") == 200
        assert status("GET", "/v1/knowledge/detail/knowledge/kb-7?collection=b") == 403
        document = {**as_json(corpus()[0]), "collection": "b"}
        assert status("POST", "/v1/knowledge/documents", document) == 403
        assert status("GET", f"/v1/knowledge/documents/{theirs}") == 404
        assert status("DELETE", f"/v1/knowledge/documents/{theirs}") == 404
        support = {"intent": "refund", "message": "money back please"}
        assert status("POST", "/v1/knowledge/support", support) == 403
        assert (
            client.get(f"/v1/knowledge/documents/{theirs}", headers=bearer(operator)).json()[
                "collection"
            ]
            == "b"
        )


# -- sources, listings, bulk deletes ----------------------------------------------------


async def index_source(store: KnowledgeStore, docs: Sequence[Document], source: str) -> None:
    async def embed(texts: Sequence[str]) -> np.ndarray:
        return EMBEDDER.embed_documents(texts)

    await Ingestor(store, EMBEDDER, embed).ingest(docs, source=source)


def pages(count: int, collection: str = "default", prefix: str = "page") -> list[Document]:
    return [
        Document(
            "wiki",
            f"{prefix}-{n:03}.md",
            f"Page {n} about topic {n}.",
            f"Page {n}",
            {"n": n},
            collection=collection,
        )
        for n in range(count)
    ]


async def test_a_source_records_its_documents_and_its_runs(store: KnowledgeStore) -> None:
    await index_source(store, pages(3), "/srv/docs")
    await index_source(store, pages(2, prefix="other"), "/srv/other")
    await index(store, corpus())  # documents of no source
    owned = await store.source_documents("default", "/srv/docs")
    assert sorted(owned.values()) == ["page-000.md", "page-001.md", "page-002.md"]
    stored = [await store.get_by_id(doc_id) for doc_id in owned]
    assert [doc.source for doc in stored if doc] == ["/srv/docs"] * 3
    listed = await store.sources()
    assert [(s.collection, s.name, s.documents) for s in listed] == [
        ("default", "/srv/docs", 3),
        ("default", "/srv/other", 2),
    ]
    assert all(s.last_run for s in listed)
    assert await store.sources("elsewhere") == []
    # a document another source produces too is a document of its own
    await index_source(store, pages(1), "/srv/other")
    assert len(await store.source_documents("default", "/srv/docs")) == 3
    assert len(await store.source_documents("default", "/srv/other")) == 3


async def test_a_connector_source_keeps_its_record_until_deleted(store: KnowledgeStore) -> None:
    await index(store, corpus())
    first = '{"kind": "imap", "cursor": ""}'
    await store.record_source("mail", "inbox", connector=first)
    await store.record_source("mail", "/srv/files", "/srv/files")
    assert [(s.name, s.connector) for s in await store.sources("mail")] == [
        ("/srv/files", ""),
        ("inbox", first),
    ]
    await store.record_source("mail", "inbox")  # a run naming no record keeps it
    assert (await store.sources("mail"))[1].connector == first
    moved = '{"kind": "imap", "cursor": "7"}'
    await store.record_source("mail", "inbox", connector=moved)
    assert (await store.sources("mail"))[1].connector == moved
    await store.delete_source("mail", "inbox")
    await store.record_source("mail", "inbox")
    assert (await store.sources("mail"))[1].connector == ""


async def test_one_holder_at_a_time_leases_a_source(store: KnowledgeStore) -> None:
    await index(store, corpus())
    await store.record_source("mail", "inbox", connector='{"kind": "imap"}')
    assert not await store.lease_source("mail", "unknown", "a", 60)
    assert await store.lease_source("mail", "inbox", "a", 60)
    assert await store.lease_source("mail", "inbox", "a", 60)  # renewed
    assert not await store.lease_source("mail", "inbox", "b", 60)
    assert await store.lease_source("mail", "inbox", "a", 0)  # let go
    assert await store.lease_source("mail", "inbox", "b", 60)
    assert not await store.lease_source("mail", "inbox", "a", 60)
    # renewed to end soon (a short lease asked of another holder while it runs would
    # be a race with the clock on a loaded machine: it may have run out already)
    assert await store.lease_source("mail", "inbox", "b", 0.5)
    await asyncio.sleep(0.6)  # b's lease ran out: a process that died holds it no more
    assert await store.lease_source("mail", "inbox", "a", 60)
    assert (await store.sources("mail"))[0].connector == '{"kind": "imap"}'


def readme(text: str) -> Document:
    return Document("wiki", "README.md", text, "README", {"path": "README.md"})


async def test_two_sources_keep_a_document_each_of_one_relative_path(
    store: KnowledgeStore,
) -> None:
    """Two repositories' README.md are two documents: neither replaces the other, and
    deleting one source leaves the other's."""
    await index_source(store, [readme("Repository A builds the kestrel firmware.")], "/srv/repoA")
    await index_source(store, [readme("Repository B holds the osprey manuals.")], "/srv/repoB")
    await index(store, [readme("A README posted on its own.")])
    counts = {s.name: s.documents for s in await store.sources()}
    assert counts == {"/srv/repoA": 1, "/srv/repoB": 1}
    found = await store.find_documents("wiki", "README.md", "default")
    assert [(d.source, d.content) for d in found] == [
        ("", "A README posted on its own."),
        ("/srv/repoA", "Repository A builds the kestrel firmware."),
        ("/srv/repoB", "Repository B holds the osprey manuals."),
    ]
    # a document of no source keeps the id it always had
    assert found[0].id == document_id("default", "wiki", "README.md")
    assert len({d.id for d in found}) == 3
    hits = await search(store, "kestrel firmware osprey manuals", k=10)
    assert {h.document_id for h in hits} >= {found[1].id, found[2].id}
    assert await store.delete_source("default", "/srv/repoB") == 1
    left = await store.find_documents("wiki", "README.md", "default")
    assert [d.source for d in left] == ["", "/srv/repoA"]
    hits = await search(store, "kestrel firmware", k=10)
    assert found[1].id in {h.document_id for h in hits}


class EarlierDocument(Document):
    """A document as the version before sourced ids stored it: its id never names its
    source."""

    @property
    def id(self) -> str:
        return document_id(self.collection, self.source_type, self.source_id)


def database_url(name: str, settings: Settings, request: pytest.FixtureRequest) -> str:
    """The Postgres database under a postgres or supabase store of the suite."""
    if name == "postgres":
        return settings.database_url.get()
    return str(request.getfixturevalue("postgrest").dsn)


async def stored_before_sourced_ids(
    name: str, store: KnowledgeStore, settings: Settings, request: pytest.FixtureRequest
) -> None:
    """Put a store back as the version before sourced ids left it (their migration not
    applied), so that the next open (or `knowledge-api migrate`) migrates it."""
    if name == "sqlite":
        with sqlite3.connect(settings.db_path) as conn:
            conn.execute("DROP TRIGGER documents_acl_ad")  # 010 again
            conn.execute("DROP TABLE document_acl")
            conn.execute("ALTER TABLE documents DROP COLUMN acl")
            for column in ("root", "connector", "lease_holder", "lease_until"):
                conn.execute(f"ALTER TABLE sources DROP COLUMN {column}")  # 008 and 009 again
            for column in ("start_offset", "end_offset", "page"):
                conn.execute(f"ALTER TABLE chunks DROP COLUMN {column}")  # and 011
            conn.execute("PRAGMA user_version = 7")
    elif name in ("postgres", "supabase"):
        conn = await asyncpg.connect(database_url(name, settings, request))
        try:
            await conn.execute(
                # 017 again, then what redefines its functions since (020)
                "DELETE FROM knowledge_schema_migrations WHERE version IN (17, 20); "
                "ALTER TABLE knowledge_documents ADD CONSTRAINT "
                "knowledge_documents_collection_source_type_source_id_key "
                "UNIQUE (collection, source_type, source_id)"
            )
        finally:
            await conn.close()
    else:
        record = await store._read_record()  # type: ignore[attr-defined]
        del record["document_ids"]
        await store._write_record(record)  # type: ignore[attr-defined]


# postgres-replica is the postgres store and its migrations, read from a standby
@pytest.mark.parametrize("name", [name for name in BACKENDS if name != "postgres-replica"])
async def test_documents_of_a_source_take_ids_naming_it_without_embedding_again(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A store written when ids named no source is migrated on open: each document of a
    source takes its new id, its chunks the ids that follow, with the vectors and dates
    they had; documents of no source keep theirs."""
    settings = BACKENDS[name](request, tmp_path)
    store = make_store(settings.store, settings)
    await store.open()
    earlier = [EarlierDocument(**as_fields(doc)) for doc in pages(3)]
    await index_source(store, earlier, "/srv/docs")
    await index(store, corpus())
    before = {doc.source_id: await store.get_by_id(doc.id) for doc in earlier}
    await stored_before_sourced_ids(name, store, settings, request)
    await store.close()
    if name == "supabase":  # the service never migrates it: `knowledge-api migrate` does
        await pg.migrated(database_url(name, settings, request), EMBEDDER.dimension)
    store = make_store(settings.store, settings)
    await store.open()
    try:
        owned = await store.source_documents("default", "/srv/docs")
        assert sorted(owned.values()) == ["page-000.md", "page-001.md", "page-002.md"]
        for doc_id, source_id in owned.items():
            old = before[source_id]
            assert old is not None and doc_id == document_id(
                "default", "wiki", source_id, "/srv/docs"
            )
            assert await store.get_by_id(document_id("default", "wiki", source_id)) is None
            [new] = await store.find_documents("wiki", source_id, "default")
            assert new.id == doc_id and new.source == "/srv/docs"
            assert (new.created_at, new.content, new.metadata) == (
                old.created_at,
                old.content,
                old.metadata,
            )
            assert [c.id for c in new.chunks] == [
                chunk_id(doc_id, c.chunk_index) for c in old.chunks
            ]
            exported = {d.id: d for d in [d async for d in store.iter_documents("default")]}
            for chunk, was in zip(exported[doc_id].chunks, old.chunks, strict=True):
                written = EMBEDDER.embed_documents([was.embedded_text])[0]
                assert np.allclose(chunk.embedding, written)
        for doc in corpus():  # no source: the same id
            assert await store.get_by_id(doc.id) is not None
        hits = await search(store, "Page 1 about topic 1", k=3)
        assert hits[0].document_id == document_id("default", "wiki", "page-001.md", "/srv/docs")
        # the rule of one document per source id went with the migration
        await index_source(store, pages(1), "/srv/other")
        assert len(await store.find_documents("wiki", "page-000.md", "default")) == 2
    finally:
        await store.close()


def as_fields(doc: Document) -> dict[str, Any]:
    return {f.name: getattr(doc, f.name) for f in fields(Document)}


async def test_listing_pages_by_cursor_in_a_stable_order(store: KnowledgeStore) -> None:
    await index_source(store, pages(7), "/srv/docs")
    await index(store, corpus())
    await index_source(store, pages(2, collection="other"), "/srv/docs")
    seen, after = [], ""
    while True:
        page = await store.list_documents(DocumentPage("default", limit=3, after=after))
        if not page:
            break
        seen += page
        after = page[-1].id
    assert len(seen) == 7 + len(corpus())
    assert [d.id for d in seen] == sorted(d.id for d in seen)
    first = next(d for d in seen if d.source_id == "page-001.md")
    assert (first.title, first.source, first.metadata, first.chunks) == (
        "Page 1",
        "/srv/docs",
        {"n": 1},
        1,
    )
    assert first.updated_at and first.collection == "default"
    only = await store.list_documents(DocumentPage("default", 100, "", "wiki", "/srv/docs"))
    assert sorted(d.source_id for d in only) == [f"page-{n:03}.md" for n in range(7)]
    jira = await store.list_documents(DocumentPage("default", 100, source_type="jira"))
    assert {d.source_type for d in jira} == {"jira"} and jira
    unowned = await store.list_documents(DocumentPage("default", 100, source=""))
    assert len(unowned) == len(corpus())
    stats = {c.name: c for c in await store.collection_stats()}
    assert (stats["default"].documents, stats["default"].sources) == (7 + len(corpus()), 1)
    assert stats["default"].chunks >= stats["default"].documents
    assert (stats["other"].documents, stats["other"].chunks, stats["other"].sources) == (2, 2, 1)
    assert stats["other"].updated_at


async def test_bulk_deletes_by_id_and_by_source(store: KnowledgeStore) -> None:
    await index_source(store, pages(5), "/srv/docs")
    await index_source(store, pages(3, prefix="kept"), "/srv/kept")
    before = await store.generation()
    owned = sorted(await store.source_documents("default", "/srv/docs"))
    assert await store.delete_documents([*owned[:2], "not-an-id"]) == 2
    assert await store.get_by_id(owned[0]) is None
    assert await store.generation() != before
    hits = await search(store, "Page 0 about topic 0")
    assert owned[0] not in {h.document_id for h in hits} and owned[1] not in {
        h.document_id for h in hits
    }
    assert await store.delete_source("default", "/srv/docs") == 3
    assert await store.source_documents("default", "/srv/docs") == {}
    assert [s.name for s in await store.sources()] == ["/srv/kept"]
    assert len(await store.source_documents("default", "/srv/kept")) == 3
    assert await store.delete_source("default", "/srv/none") == 0


@pytest.mark.parametrize("name", list(BACKENDS))
def test_listing_routes_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Collections, documents paged by cursor, sources and their bulk delete over HTTP,
    with the keys' scopes and collections."""
    settings = BACKENDS[name](request, tmp_path).replace(auth="keys")
    reader = asyncio.run(make_key(settings, "reader", ["read"], ("a", "c")))
    writer = asyncio.run(make_key(settings, "writer", ["read", "write"]))
    app = create_app(settings)
    with TestClient(app) as client:
        ingest = app.state.service.ingest
        client.portal.call(lambda: ingest(pages(5, collection="a"), source="/srv/a docs"))
        client.portal.call(lambda: ingest(pages(2, collection="a", prefix="x"), source="team/x"))
        client.portal.call(lambda: ingest(pages(1, collection="b"), source="/srv/b"))
        read, write = bearer(reader), bearer(writer)

        listed = client.get("/v1/knowledge/collections", headers=read).json()["collections"]
        assert [(c["name"], c["documents"], c["sources"]) for c in listed] == [("a", 7, 2)]
        assert listed[0]["chunks"] == 7 and listed[0]["updated_at"]
        everything = client.get("/v1/knowledge/collections", headers=write).json()
        assert [c["name"] for c in everything["collections"]] == ["a", "b"]

        seen, cursor = [], ""
        while True:
            url = "/v1/knowledge/documents?collection=a&limit=3" + (
                f"&cursor={cursor}" if cursor else ""
            )
            page = client.get(url, headers=read).json()
            seen += page["documents"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert len(page["documents"]) == 3
        assert len(seen) == 7 and [d["id"] for d in seen] == sorted(d["id"] for d in seen)
        assert set(seen[0]) == {
            "id",
            "title",
            "source_type",
            "source_id",
            "source",
            "collection",
            "metadata",
            "chunks",
            "created_at",
            "updated_at",
            "acl",
        }
        assert seen[0]["created_at"] and seen[0]["created_at"] <= seen[0]["updated_at"]
        only = client.get(
            "/v1/knowledge/documents", params={"collection": "a", "source": "team/x"}, headers=read
        ).json()
        assert sorted(d["source_id"] for d in only["documents"]) == ["x-000.md", "x-001.md"]
        assert only["next_cursor"] is None

        def error(
            path: str, status: int, headers: dict[str, str] = read, method: str = "GET"
        ) -> str:
            response = client.request(method, path, headers=headers)
            assert response.status_code == status, response.text
            return str(response.json()["error"]["message"])

        first = client.get("/v1/knowledge/documents?collection=a&limit=3", headers=read).json()
        assert "cursor" in error("/v1/knowledge/documents?collection=a&cursor=garbage", 400)
        other = f"/v1/knowledge/documents?collection=a&source=team/x&cursor={first['next_cursor']}"
        assert "cursor" in error(other, 400)  # a cursor of another listing
        assert "limit" in error("/v1/knowledge/documents?collection=a&limit=501", 400)
        assert "limit" in error("/v1/knowledge/documents?collection=a&limit=ten", 400)
        assert "source_type" in error("/v1/knowledge/documents?collection=a&source_type=x", 400)
        assert "colour" in error("/v1/knowledge/documents?colour=red", 400)
        error("/v1/knowledge/documents?collection=b", 403)
        missing = client.get("/v1/knowledge/documents?collection=c", headers=read)
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "collection_not_found"
        assert missing.json()["error"]["details"]["available"] == ["a"]

        names = client.get("/v1/knowledge/sources", headers=read).json()["sources"]
        assert [(s["collection"], s["name"], s["documents"]) for s in names] == [
            ("a", "/srv/a docs", 5),
            ("a", "team/x", 2),
        ]
        assert len(client.get("/v1/knowledge/sources", headers=write).json()["sources"]) == 3
        error("/v1/knowledge/sources?collection=b", 403)

        error("/v1/knowledge/sources/team/x?collection=a", 403, method="DELETE")  # read only
        gone = client.delete("/v1/knowledge/sources/team/x?collection=a", headers=write)
        assert gone.status_code == 200, gone.text
        assert gone.json() == {"success": True, "collection": "a", "source": "team/x", "deleted": 2}
        error("/v1/knowledge/sources/team/x?collection=a", 404, write, "DELETE")
        typo = client.delete("/v1/knowledge/sources//srv/b?collection=bb", headers=write)
        assert typo.json()["error"]["type"] == "collection_not_found", typo.text
        assert typo.status_code == 404 and typo.json()["error"]["details"]["available"] == [
            "a",
            "b",
        ]
        spaced = client.delete("/v1/knowledge/sources//srv/a%20docs?collection=a", headers=write)
        assert spaced.json()["deleted"] == 5
        emptied = client.get("/v1/knowledge/documents?collection=a", headers=read)
        assert emptied.json()["error"]["type"] == "collection_not_found"  # nothing left in a
        gone_too = client.post(
            "/v1/knowledge/query",
            json={"query": "Page 1 about topic 1", "collection": "a", "threshold": 0.0},
            headers=read,
        )  # nothing of the deleted sources is found: the collection holds nothing now
        assert gone_too.status_code == 404
        assert gone_too.json()["error"]["type"] == "collection_not_found"


async def test_export_then_import_gives_the_same_search_results(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    """A round trip through a file: everything deleted, then read back without
    embedding, answers every query as before."""
    await index_source(store, corpus(), "/srv/corpus")
    # passages of no similarity at all (cosine <= 0) tie, in no defined order: left out
    before = {query: await search(store, query, threshold=0.01) for query in KNOWN_ANSWERS}
    assert all(before.values())
    stored = [doc async for doc in store.iter_documents("default")]
    path = tmp_path / "default.jsonl.gz"
    exported = await transfer.export_collection(store, EMBEDDER, "default", path)
    assert (exported.documents, exported.chunks) == (
        len(stored),
        sum(len(doc.chunks) for doc in stored),
    )
    assert await store.delete_documents([doc.id for doc in stored]) == len(stored)
    assert await search(store, "login page timeout with SSO") == []

    imported = await transfer.import_file(store, EMBEDDER, path)
    assert (imported.documents, imported.skipped, imported.embedded) == (len(stored), 0, 0)
    for query, hits in before.items():
        again = await search(store, query, threshold=0.01)
        assert [(h.source_id, h.chunk.id) for h in again] == [
            (h.source_id, h.chunk.id) for h in hits
        ]
        assert [h.similarity for h in again] == pytest.approx([h.similarity for h in hits])
    assert [s.name for s in await store.sources("default")] == ["/srv/corpus"]
    assert len(await store.source_documents("default", "/srv/corpus")) == len(stored)
    again = await transfer.import_file(store, EMBEDDER, path)
    assert (again.documents, again.skipped) == (0, len(stored))  # nothing changed

    copied = await transfer.import_file(store, EMBEDDER, path, collection="copy")
    assert copied.documents == len(stored)
    hits = await search(store, "which audio formats are accepted, WAV FLAC MP3", collection="copy")
    assert hits[0].source_id == "kb-7"


async def test_a_restore_keeps_both_dates_of_every_document(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    """Imported, a document keeps the created_at and updated_at of its export (and a
    listing shows both); ingested again, it keeps its created_at and is updated now."""
    await index_source(store, corpus(), "/srv/corpus")
    path = tmp_path / "default.jsonl"
    await transfer.export_collection(store, EMBEDDER, "default", path)
    header, *lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    dates = {}
    for day, line in enumerate(lines, start=1):
        line["created_at"] = f"2020-01-{day:02d}T03:04:05+00:00"
        line["updated_at"] = f"2021-02-{day:02d}T06:07:08+02:00"  # read as UTC
        dates[line["source_id"]] = (line["created_at"], f"2021-02-{day:02d}T04:07:08+00:00")
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in [header, *lines]))
    stored = [doc async for doc in store.iter_documents("default")]
    await store.delete_documents([doc.id for doc in stored])

    await transfer.import_file(store, EMBEDDER, path)
    restored = [doc async for doc in store.iter_documents("default")]
    assert {d.source_id: (d.created_at, d.updated_at) for d in restored} == dates
    listed = await store.list_documents(DocumentPage("default", limit=100))
    assert {d.source_id: (d.created_at, d.updated_at) for d in listed} == dates
    (hit,) = await search(store, "when is the 4.2 release", k=1)
    assert hit.created_at == dates[hit.source_id][0]

    first = restored[0]
    changed = Document(first.source_type, first.source_id, "Changed text.", source=first.source)
    assert changed.id == first.id
    await index(store, [changed])
    again = await store.get_by_id(first.id)
    assert again is not None and again.created_at == dates[first.source_id][0]
    assert again.updated_at > "2025"


async def test_a_document_keeps_the_dates_it_was_given(store: KnowledgeStore) -> None:
    """An item's own dates (a ticket's, a commit's) are the document's: stored as given,
    filtered and listed by, and kept when the item is written again with new ones."""
    docs = corpus()
    docs[0].created_at, docs[0].updated_at = (
        "2019-03-01T07:30:00+00:00",
        "2019-03-05T00:00:00+00:00",
    )
    await index(store, docs)
    stored = await store.get_by_id(docs[0].id)
    assert stored is not None
    assert (stored.created_at, stored.updated_at) == (docs[0].created_at, docs[0].updated_at)
    old = parse_filter({"created_at": {"$lt": "2020-01-01"}})
    hits = await store.search(SearchRequest("", None, 20, SearchFilters(where=old)))
    hits += await store.search(
        SearchRequest(docs[0].title, vector(docs[0].title), 20, SearchFilters(where=old))
    )
    assert {hit.source_id for hit in hits} == {docs[0].source_id}
    edited = Document(
        docs[0].source_type,
        docs[0].source_id,
        docs[0].content + " Edited.",
        created_at=docs[0].created_at,
        updated_at="2019-04-01T00:00:00+00:00",
    )
    await index(store, [edited])
    again = await store.get_by_id(docs[0].id)
    assert again is not None and again.updated_at == "2019-04-01T00:00:00+00:00"


@pytest.mark.parametrize("name", list(BACKENDS))
async def test_a_mirror_adds_updates_and_prunes_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from knowledge_api.compose import build_service
    from knowledge_api.usecases import sources as use

    service = build_service(BACKENDS[name](request, tmp_path))
    await service.open_storage()
    await service.load_embedder()
    try:
        plan = await use.plan_mirror(service, pages(4), "/srv/docs", "default", prune=True)
        assert (len(plan.added), len(plan.updated), plan.deleted) == (4, 0, {})
        await use.mirror(service, plan)
        changed = pages(4)[1:]  # page-000 gone
        changed[0].content = "Page 1 now says something else."
        plan = await use.plan_mirror(service, changed, "/srv/docs", "default", prune=True)
        assert plan.lines() == ["update page-001.md", "delete page-000.md"]
        plan.check_deletions(0.5, allowed=False)  # 1 of 4: allowed
        report = await use.mirror(service, plan)
        assert (report.indexed.documents, report.unchanged, report.deleted) == (1, 2, 1)
        assert sorted((await service.store.source_documents("default", "/srv/docs")).values()) == [
            "page-001.md",
            "page-002.md",
            "page-003.md",
        ]
        emptied = await use.plan_mirror(service, [], "/srv/docs", "default", prune=True)
        with pytest.raises(use.MassDeleteRefused):
            emptied.check_deletions(0.5, allowed=False)
    finally:
        await service.stop()


@pytest.mark.parametrize("name", list(BACKENDS))
async def test_the_first_mirror_of_a_path_adopts_its_documents_of_no_source(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Documents indexed before sources were kept are written again under the source's
    name by its first mirror (no vector computed again), not left beside as copies."""
    from knowledge_api.compose import build_service
    from knowledge_api.usecases import sources as use

    service = build_service(BACKENDS[name](request, tmp_path))
    await service.open_storage()
    await service.load_embedder()
    try:
        await service.ingest(pages(2))
        plan = await use.plan_mirror(service, pages(2), "/srv/docs", "default", prune=True)
        report = await use.mirror(service, plan)
        assert (report.indexed.documents, report.indexed.embedded) == (2, 0)
        found = await service.store.find_documents("wiki", "page-000.md", "default")
        assert [doc.source for doc in found] == ["/srv/docs"]
        assert len(await service.store.source_documents("default", "")) == 0
        assert sum((await service.collections()).values()) == 2
    finally:
        await service.stop()


async def test_upload_jobs_are_kept_in_the_store(store: KnowledgeStore, tmp_path: Path) -> None:
    """Every replica answers for a job, and a restarted service finds the ones it left."""
    jobs = store.side_tables(tmp_path / "jobs.db").jobs
    await jobs.open()
    job = Job("j1", "manuals", "wiki", "upload", "host-a:/up", [JobFile("a.pdf", "00000", 9)])
    await jobs.save(job)
    await jobs.save(Job("j2", "manuals", "wiki", "upload", "host-b:/up"))
    job.status, job.chunks_total = "running", 4
    job.files[0].state, job.files[0].reason = "failed", "encrypted PDF"
    await jobs.save(job)
    await jobs.close()

    reopened = store.side_tables(tmp_path / "jobs.db").jobs  # as a restarted service opens it
    await reopened.open()
    try:
        stored = await reopened.get("j1")
        assert stored == job and stored is not job
        assert stored.created_at and stored.updated_at >= stored.created_at
        assert [j.id for j in await reopened.unfinished("host-a:/up")] == ["j1"]
        assert [j.id for j in await reopened.unfinished()] == ["j1", "j2"]  # every service's
        stored.status = "done"
        await reopened.save(stored)
        assert await reopened.unfinished("host-a:/up") == []
        assert await reopened.get("nope") is None
    finally:
        await reopened.close()


@pytest.mark.parametrize("name", list(BACKENDS))
def test_files_uploaded_over_http_are_found_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    settings = BACKENDS[name](request, tmp_path).replace(upload_dir=str(tmp_path / "up"))
    files = [
        ("file", ("manual.pdf", pdf_bytes([["The turbine manual covers blade pitch."]]))),
        ("file", ("empty.md", b"")),
    ]
    with TestClient(create_app(settings)) as client:
        accepted = client.post("/v1/knowledge/files", files=files, data={"collection": "m"})
        assert accepted.status_code == 202, accepted.text
        job = wait_for(client, accepted.json()["job_id"])
        assert job["status"] == "done", job
        assert job["errors"] == [{"file": "empty.md", "reason": "empty file: 0 bytes"}]
        ask = {"query": "turbine blade pitch", "collection": "m", "synthesize": False}
        results = client.post("/v1/knowledge/query", json=ask).json()["results"]
        assert results and results[0]["source_id"] == "manual.pdf"


# numbers each backend must keep exactly: bounds of 64 bits, past 2**53, floats at
# the edges of the double range, a float that is whole and one that is not exact (the
# service reads -0.0 as 0.0: jsonb has no negative zero)
NUMBERS: dict[str, int | float] = {
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "past_2_53": 2**53 + 1,
    "zero": 0,
    "huge": 1e300,
    "largest": 1.7976931348623157e308,
    "tiny": 5e-324,
    "tenth": 0.1,
    "whole_float": 1.0,
    "float_1e15": 1e15,
    "fraction": -123456789.123456789,
}


async def test_numbers_read_back_as_the_same_json_numbers(store: KnowledgeStore) -> None:
    doc = Document("wiki", "numbers", "A page of numbers.", "Numbers", dict(NUMBERS))
    await index(store, [doc])
    stored = await store.get_by_id(doc.id)
    assert stored is not None
    hits = await search(store, "page of numbers")
    assert hits and hits[0].source_id == "numbers"
    for metadata in (stored.metadata, hits[0].metadata):
        assert {k: orjson.dumps(v) for k, v in metadata.items()} == {
            k: orjson.dumps(v) for k, v in NUMBERS.items()
        }


# -- the filter language, against the reference evaluation ------------------------------

FILTERED = [
    ("jira", "F-0", {"team": "qa", "n": 1, "ok": True, "due": "2026-01-15", "tag": "alpha beta"}),
    ("jira", "F-1", {"team": "dev", "n": 2.5, "ok": False, "due": "2026-01-15T10:00:00Z"}),
    ("git", "F-2", {"team": "ops", "n": 3, "due": "2025-12-31T23:30:00-01:00", "tag": "beta"}),
    ("git", "F-3", {"team": "qa", "n": -4, "ok": True, "due": "soon", "tag": "gamma"}),
    ("wiki", "F-4", {"team": "dev", "n": "5", "due": "2026-02-01T00:00:00+00:00"}),
    ("wiki", "F-5", {"n": 10, "ok": True, "due": "2026-02-30"}),
    ("email", "F-6", {"team": "qa", "n": 0, "ok": False, "due": "2025-06-01", "tag": "alpha"}),
    ("email", "F-7", {"team": "sales", "n": 7, "due": "2026-01-01 00:00"}),
    ("email", "F-8", {"team": "sales", "due": "2026-01-20T24:00", "tag": "alpha  alpha"}),
]
FILTER_CASES: list[dict[str, Any]] = [
    {"team": "qa"},
    {"team": "qa", "ok": True},
    {"n": 3},
    {"n": 2.5},
    {"ok": False},
    {"team": {"$ne": "qa"}},
    {"n": {"$gt": 2}},
    {"n": {"$gte": 1, "$lt": 7}},
    {"n": {"$lte": 0}},
    {"team": {"$in": ["dev", "ops"]}},
    {"team": {"$nin": ["qa", "dev"]}},
    {"n": {"$in": [1, 10, "5"]}},
    {"ok": {"$exists": True}},
    {"tag": {"$exists": False}},
    {"tag": {"$contains": "alpha"}},
    {"due": {"$gte": "2026-01-01"}},
    {"due": {"$lt": "2026-01-01T00:30:00Z"}},
    {"due": {"$gt": "2026-01-15", "$lte": "2026-02-01"}},
    {"source_type": "git"},
    {"source_type": {"$in": ["wiki", "email"]}, "n": {"$gt": 5}},
    {"source_id": {"$ne": "F-0"}, "team": "qa"},
    {"created_at": {"$gte": "2000-01-01"}, "team": "dev"},
    {"updated_at": {"$lt": "2000-01-01"}},
    {"$or": [{"team": "ops"}, {"n": {"$lt": 0}}]},
    {"$and": [{"team": "qa"}, {"$not": {"ok": True}}]},
    {"$not": {"team": {"$in": ["qa", "dev"]}}},
    {"$or": [{"$and": [{"source_type": "jira"}, {"n": {"$gt": 2}}]}, {"tag": "gamma"}]},
    {"tag": {"$contains": "beta"}},
    {"$not": {"tag": {"$contains": "alpha"}}},
    {"source_id": {"$contains": "F-3"}},
    {"source_type": {"$contains": "git"}},
    {"source_type": {"$contains": "F-3"}},
    {"$not": {"source_type": {"$contains": "wiki"}}, "n": {"$gt": 2}},
    {"n": {"$in": [1, True, "5"]}},
    {"ok": {"$in": [False]}, "n": {"$nin": [0]}},
    {"$not": {"n": {"$gt": 2}}},
    {"$not": {"due": {"$gte": "2026-01-01"}}},
    {"$not": {"ok": {"$exists": True}}},
    {"$not": {"$or": [{"team": "qa"}, {"n": {"$lte": 2}}]}},
    {"created_at": {"$lt": "2999-01-01"}, "$not": {"source_type": "git"}},
    {"source_type": {"$gt": 1}},
    {"source_type": {"$exists": False}},
    {"$not": {"tag": {"$exists": False}}},
    {"$not": {"$not": {"ok": {"$exists": False}}}},
    {"$not": {"n": {"$nin": [1, 3]}}},
    {"$or": [{"tag": {"$ne": "beta"}}, {"n": {"$gte": 3}}], "due": {"$exists": True}},
    {"source_id": {"$gte": "2026-01-01"}},
]
UNSUPPORTED: dict[str, set[str]] = {"chroma": {"$gte"}, "qdrant": {"$gte"}}
"""Backend -> operators it refuses among FILTER_CASES (a 400 naming both)."""
UNSUPPORTED_ANYWHERE = {"chroma": set(RANGES), "qdrant": set(RANGES)}
"""Backend -> operators it may refuse (a date range on a passage's source_type or
source_id; on Qdrant, a range bound beyond 2^53): the list docs/api.md gives."""


async def filtered_store(store: KnowledgeStore) -> None:
    await index(
        store,
        [
            Document(kind, key, f"Release note {key}: the upload queue.", key, meta)
            for kind, key, meta in FILTERED
        ],
    )


def expected(case: dict[str, Any]) -> set[str]:
    tree = parse_filter(case)
    now = datetime.now(UTC).isoformat()
    return {
        key
        for kind, key, meta in FILTERED
        if matches(
            tree,
            {**meta, "source_type": kind, "source_id": key, "created_at": now, "updated_at": now},
        )
    }


@pytest.mark.parametrize("mode", SEARCH_MODES)
async def test_every_filter_case_matches_the_reference(
    store: KnowledgeStore, mode: SearchMode
) -> None:
    await filtered_store(store)
    refused = UNSUPPORTED.get(store.name, set())
    for case in FILTER_CASES:
        where = SearchFilters(where=parse_filter(case))
        query = "release note upload queue"
        try:
            hits = await store.search(SearchRequest(query, vector(query), 20, where, 0.0, mode))
        except InvalidRequest as e:
            assert e.details["backend"] == store.name and e.details["operator"] in refused, case
            continue
        assert {h.source_id for h in hits} == expected(case), (case, mode)


TREE_VALUES: dict[str, list[Any]] = {
    "team": ["qa", "dev", "ops", "sales", "QA", 1, True],
    "n": [1, 2.5, 3, -4, "5", 10, 0, 7, True, 1.0, "3"],
    "ok": [True, False, 1, "true"],
    "due": [
        "2026-01-15",
        "2026-01-01",
        "2025-12-31T23:30:00-01:00",
        "2026-02-01T00:00:00Z",
        "soon",
    ],
    "tag": ["alpha", "beta", "gamma", "alpha beta", "Alpha"],
    "source_type": ["git", "jira", "wiki", "email", "x"],
    "source_id": ["F-0", "F-3", "F-8", "F"],
    "created_at": ["2000-01-01", "2999-01-01"],
    "updated_at": ["2000-01-01", "2999-01-01"],
    "absent": ["a", 1],
}
"""Values per field of FILTERED, the other fields' mixed in by the tree maker: values of
the wrong type, dates that are no dates, a number as a text."""
TREE_OPERATORS = ("=", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists")


def random_condition(draw: random.Random) -> dict[str, Any]:
    field = draw.choice(list(TREE_VALUES))
    values = TREE_VALUES[field] + draw.choice(list(TREE_VALUES.values()))[:2]
    op = draw.choice((*TREE_OPERATORS, "$contains"))
    if op == "=":
        return {field: draw.choice(values)}
    if op in ("$in", "$nin"):
        return {field: {op: draw.sample(values, draw.randint(1, 3))}}
    if op == "$exists":
        return {field: {op: draw.choice([True, False])}}
    if op == "$contains":
        return {field: {op: draw.choice(["alpha", "beta", "F-3", "qa", "git"])}}
    return {field: {op: draw.choice(values)}}


def random_tree(draw: random.Random, depth: int = 3) -> dict[str, Any]:
    """A filter of up to `depth` levels of `$and`, `$or`, `$not` and implicit ands."""
    if depth == 0 or draw.random() < 0.4:
        return random_condition(draw)
    kind = draw.choice(["$and", "$or", "$not", "fields"])
    if kind == "$not":
        return {"$not": random_tree(draw, depth - 1)}
    if kind == "fields":
        return {k: v for _ in range(draw.randint(2, 3)) for k, v in random_condition(draw).items()}
    return {kind: [random_tree(draw, depth - 1) for _ in range(draw.randint(1, 3))]}


async def test_random_filter_trees_match_the_reference(store: KnowledgeStore) -> None:
    """Seeded random trees beyond the hand-written cases: each valid one finds on every
    backend (in a random mode) exactly the passages the reference lets through, and
    counts their facets as the reference does; a backend refuses only with a 400 naming
    an operator of its list in docs/api.md (Chroma's keyword mode filters in process,
    so a filter its facets refuse may still search)."""
    await filtered_store(store)
    draw, tried = random.Random(30), 0
    query = "release note upload queue"

    def refused(e: InvalidRequest) -> bool:
        return e.details["backend"] == store.name and e.details["operator"] in (
            UNSUPPORTED_ANYWHERE.get(store.name, set())
        )

    while tried < 150:
        case = random_tree(draw)
        try:
            where = SearchFilters(where=parse_filter(case))
        except InvalidRequest:
            continue  # the parser's rules have tests of their own
        tried += 1
        mode = draw.choice(SEARCH_MODES)
        fields = tuple(draw.sample(["team", "n", "ok", "tag", "source_type", "source_id"], 3))
        passed = expected(case)
        passages = [
            {**meta, "source_type": kind, "source_id": key}
            for kind, key, meta in FILTERED
            if key in passed
        ]
        try:
            hits = await store.search(SearchRequest(query, vector(query), 20, where, 0.0, mode))
            assert {h.source_id for h in hits} == passed, (case, mode)
            assert await store.facet_counts(where, fields) == facets.count(fields, passages), case
        except InvalidRequest as e:
            assert refused(e), case


async def test_keys_beyond_ascii_filter_in_every_mode(store: KnowledgeStore) -> None:
    """A metadata key of non-ASCII letters is found by every test, in every search mode
    (Chroma's keyword side once missed it: its JSON escaped the key, which a JSON path
    does not read)."""
    docs = [
        Document("jira", "U-0", "Note zero of the queue.", "U-0", {"équipe": "x"}),
        Document("git", "U-1", "Note one of the queue.", "U-1", {"équipe": "y z"}),
        Document("wiki", "U-2", "Note two of the queue.", "U-2", {}),
    ]
    await index(store, docs)
    cases: list[dict[str, Any]] = [
        {"équipe": "x"},
        {"$not": {"équipe": "x"}},
        {"équipe": {"$exists": False}},
        {"$or": [{"équipe": {"$in": ["y z"]}}, {"source_type": "wiki"}]},
        {"équipe": {"$contains": "z"}},
    ]
    for case in cases:
        tree = parse_filter(case)
        passed = {
            d.source_id
            for d in docs
            if matches(tree, {**d.metadata, "source_type": d.source_type, "source_id": d.source_id})
        }
        for mode in SEARCH_MODES:
            query = "note of the queue"
            hits = await store.search(
                SearchRequest(query, vector(query), 10, SearchFilters(where=tree), 0.0, mode)
            )
            assert {h.source_id for h in hits} == passed, (case, mode)


async def test_fractions_compare_with_integers_exactly(store: KnowledgeStore) -> None:
    """A fraction compared with integer values (scores 0, 1, 2 against 0.5): Chroma cut
    the fraction to an integer, so `$gte 0.5` let 0 through and `$eq 0.1` found 0."""
    scores = [0, 1, 2, -1, 0.5, -0.5, 0.0]
    await index(
        store,
        [
            Document("jira", f"S-{i}", f"Score note {i} of the queue.", f"S-{i}", {"score": n})
            for i, n in enumerate(scores)
        ],
    )
    query = "score note of the queue"
    for bound, op in itertools.product([0.5, -0.5, 0.1, 1.5, -1.5], [*RANGES, "$eq", "$ne"]):
        case = {"score": {op: bound}}
        tree = parse_filter(case)
        passed = {f"S-{i}" for i, n in enumerate(scores) if matches(tree, {"score": n})}
        hits = await store.search(
            SearchRequest(query, vector(query), 20, SearchFilters(where=tree))
        )
        assert {h.source_id for h in hits} == passed, case
        negated = SearchFilters(where=parse_filter({"$not": case}))
        hits = await store.search(SearchRequest(query, vector(query), 20, negated))
        assert {h.source_id for h in hits} == {f"S-{i}" for i in range(len(scores))} - passed


async def test_integers_beyond_doubles_compare_exactly(store: KnowledgeStore) -> None:
    """Ids of 64 bits (snowflakes) differ in digits a double does not hold: equality
    finds the one asked for, not its neighbours."""
    ids = [1790000000000000000, 1790000000000000001, 2**63 - 1, -(2**63)]
    await index(
        store,
        [
            Document("jira", f"I-{i}", f"Ticket {i} of the queue.", f"I-{i}", {"tid": n})
            for i, n in enumerate(ids)
        ],
    )
    query = "ticket of the queue"
    for i, n in enumerate(ids):
        where = SearchFilters(where=parse_filter({"tid": n}))
        hits = await store.search(SearchRequest(query, vector(query), 10, where))
        assert [h.source_id for h in hits] == [f"I-{i}"], n
    both = SearchFilters(where=parse_filter({"tid": {"$in": ids[:2]}}))
    assert {
        h.source_id for h in await store.search(SearchRequest(query, vector(query), 10, both))
    } == {
        "I-0",
        "I-1",
    }
    above = SearchFilters(where=parse_filter({"tid": {"$gt": ids[0]}}))
    try:  # a range on them: exact, or refused where the store compares doubles
        hits = await store.search(SearchRequest(query, vector(query), 10, above))
    except InvalidRequest as e:
        assert (store.name, e.details["operator"]) == ("qdrant", "$gt")
        return
    assert {h.source_id for h in hits} == {"I-1", "I-2"}


async def test_a_filter_applies_before_the_limit(store: KnowledgeStore) -> None:
    """Five matches of forty passages: `limit: 5` finds all five, in every mode."""
    many = [
        Document("jira", f"L-{i}", f"Upload queue note {i}.", f"L-{i}", {"bucket": i % 8})
        for i in range(40)
    ]
    await index(store, many)
    for mode in SEARCH_MODES:
        for case in ({"bucket": 3}, {"bucket": {"$in": [3]}, "source_id": {"$ne": "x"}}):
            where = SearchFilters(where=parse_filter(case))
            try:
                hits = await store.search(
                    SearchRequest("upload queue note", vector("upload"), 5, where, 0.0, mode)
                )
            except InvalidRequest as e:
                assert e.details["operator"] in UNSUPPORTED.get(store.name, set())
                continue
            assert sorted(h.source_id for h in hits) == [f"L-{i}" for i in (11, 19, 27, 3, 35)]


async def test_a_requests_own_ranking_reaches_the_search(store: KnowledgeStore) -> None:
    await index(store, corpus())
    query = "asset search pagination timeout"
    found = vector(query)

    async def ranked(mode: SearchMode, ranking: Ranking = SETTINGS_RANKING) -> list[SearchHit]:
        return await store.search(
            SearchRequest(query, found, 20, SearchFilters(), 0.0, mode, ranking)
        )

    def ids(hits: list[SearchHit]) -> list[str]:
        return [hit.chunk.id for hit in hits]

    by_vector, by_keyword = ids(await ranked("vector")), ids(await ranked("keyword"))
    rrf = await ranked("hybrid", Ranking(fusion="rrf", prf=False))
    assert ids(rrf) == [key for key, _ in reciprocal_rank_fusion([by_vector, by_keyword])]
    by_meaning = await ranked("hybrid", Ranking(vector_weight=1.0, prf=False))
    assert ids(by_meaning) == by_vector
    by_words = await ranked("hybrid", Ranking(vector_weight=0.0, prf=False))
    assert ids(by_words)[0] == by_keyword[0]
    assert set(ids(by_words)[: len(by_keyword)]) == set(by_keyword)
    assert ids(by_words) != ids(by_meaning)
    assert all(hit.created_at and hit.updated_at for hit in rrf)


@pytest.mark.parametrize("field", ["created_at", "updated_at"])
async def test_recency_ranks_by_the_documents_own_dates(store: KnowledgeStore, field: str) -> None:
    """Two passages of equal text written a second apart (dates are kept to the second):
    each hit carries its document's stored dates, so recency on them (a half-life of a
    second, more than the tie's place in a fused order weighs) puts the newer first, as
    the reference order of the stored dates says, with none undated."""
    text = "Rotate the upload queue credentials every quarter."
    older = Document("jira", "R-old", text, "Credentials")
    newer = Document("jira", "R-new", text, "Credentials")
    await index(store, [older])
    await asyncio.sleep(1.05 - time.time() % 1)
    await index(store, [newer])
    stored = {
        d.id: d
        for d in [await store.get_by_id(older.id), await store.get_by_id(newer.id)]
        if d is not None
    }
    reference = sorted(stored.values(), key=lambda d: millis_of(getattr(d, field)), reverse=True)
    assert [d.source_id for d in reference] == ["R-new", "R-old"]
    query = "upload queue credentials"
    for mode in SEARCH_MODES:
        hits = await store.search(
            SearchRequest(query, vector(query), 5, SearchFilters(), 0.0, mode)
        )
        assert sorted(h.source_id for h in hits) == ["R-new", "R-old"], mode
        for hit in hits:
            own = stored[hit.document_id]
            assert millis_of(hit.created_at) == millis_of(own.created_at), (mode, hit.created_at)
            assert millis_of(hit.updated_at) == millis_of(own.updated_at), (mode, hit.updated_at)
        ranked, undated = by_recency(hits, Recency(field, 1 / 86_400))  # a second
        assert undated == 0, mode
        assert [h.source_id for h in ranked] == [d.source_id for d in reference], mode


# -- facets, against the reference count ---------------------------------------------------

FACET_FIELDS = ("team", "n", "ok", "tag", "source_type", "source_id", "size")
FACET_CASES: list[tuple[dict[str, Any], tuple[str, ...] | None]] = [
    ({}, None),
    ({"team": "qa"}, None),
    ({}, ("jira", "email")),
    ({"n": {"$gte": 1, "$lt": 7}}, None),
    ({"$or": [{"team": "ops"}, {"tag": {"$contains": "alpha"}}]}, ("email", "git")),
    ({"$not": {"ok": {"$exists": True}}}, None),
    ({"source_id": {"$ne": "F-0"}, "due": {"$gte": "2026-01-01"}}, None),
    ({"team": "nobody"}, None),
]


async def test_facets_refuse_what_the_search_refuses(store: KnowledgeStore) -> None:
    """A filter a backend cannot express is the request's 400 when counting its facets
    too (naming the operator and the backend), not a failure of the store."""
    await filtered_store(store)
    where = SearchFilters(where=parse_filter({"source_id": {"$gte": "2026-01-01"}}))
    query = "release note upload queue"
    try:
        hits = await store.search(SearchRequest(query, vector(query), 20, where))
    except InvalidRequest as e:
        assert e.details["operator"] in UNSUPPORTED[store.name]
        with pytest.raises(InvalidRequest) as counting:
            await store.facet_counts(where, ("team",))
        assert counting.value.details == e.details
        return
    assert hits == [] and store.name not in UNSUPPORTED
    assert await store.facet_counts(where, ("team",)) == facets.count(("team",), [])


async def test_facets_count_every_matching_passage_as_the_reference(
    store: KnowledgeStore,
) -> None:
    """The same facet cases on every backend; a long document counts once per passage."""
    docs = [
        Document(kind, key, f"Release note {key}: the upload queue.", key, dict(meta))
        for kind, key, meta in FILTERED
    ]
    long_text = "\n\n".join(f"Paragraph {i} of the upload queue runbook. " * 12 for i in range(12))
    # numbers at the ends of what is stored: counted under one text on every backend
    extremes = [2**63 - 1, -(2**63), 1e300, 1e19, 1e-300, 2.5]
    docs += [
        Document("git", f"F-size-{i}", f"Release note size {i}.", f"S{i}", {"size": size})
        for i, size in enumerate(extremes)
    ]
    docs.append(Document("jira", "F-long", long_text, "Runbook", {"team": "qa", "n": 3.0}))
    await index(store, docs)
    assert len(docs[-1].chunks) > 1
    await index(store, [Document("jira", "elsewhere", "Note.", "x", {"team": "qa"}, "other")])
    now = datetime.now(UTC).isoformat()
    for case, sources in FACET_CASES:
        tree = parse_filter(case)
        passages = [
            {**d.metadata, "source_type": d.source_type, "source_id": d.source_id}
            for d in docs
            for _ in d.chunks
            if (sources is None or d.source_type in sources)
            and matches(
                tree,
                {
                    **d.metadata,
                    "source_type": d.source_type,
                    "source_id": d.source_id,
                    "created_at": now,
                    "updated_at": now,
                },
            )
        ]
        found = await store.facet_counts(SearchFilters(sources, tree), FACET_FIELDS)
        assert found == facets.count(FACET_FIELDS, passages), (case, sources)
    other = await store.facet_counts(SearchFilters(collection="other"), ("team",))
    assert dict(other["team"].counts) == {"qa": 1}


def ranked(hits: Sequence[SearchHit]) -> list[tuple[str, str, int, float, Any]]:
    """A ranking as a reader compares it: which passage, in which place, scored how (the
    ids of a passage name its collection, so two collections' copies differ by id);
    similarities to float32's precision (an engine's own cosine, or one computed here,
    as the passage was found by one list or the other)."""
    return [
        (
            h.source_type,
            h.source_id,
            h.chunk.chunk_index,
            round(h.score, 9),
            pytest.approx(h.similarity, abs=1e-6),
        )
        for h in hits
    ]


async def test_several_collections_rank_as_one_collection_holding_them_all(
    store: KnowledgeStore,
) -> None:
    """The same documents split across two collections and all in a third: a search of
    the two as one gives the third's ranking, in every mode, with filters and a tight
    top-k (each leg cut to its best over the union, not per collection). No two passages
    kept tie (each says its words a number of times of its own, and the threshold leaves
    out those no closer to the query than orthogonal): a store breaks ties by id, and ids
    name the collection."""
    extra = [
        Document(
            ("wiki", "jira", "git")[i % 3],
            f"note-{i}",
            f"Note {i}: "
            + "the upload queue " * (1 + i)
            + "login " * (1 + 7 * i % 18)
            + "search latency " * (1 + 5 * i % 18),
            f"Note {i}",
            {"team": ("qa", "ops")[i % 2]},
        )
        for i in range(18)
    ]
    documents = corpus() + extra
    split = [replace(doc, collection=("left", "right")[i % 2]) for i, doc in enumerate(documents)]
    whole = [replace(doc, collection="whole") for doc in documents]
    await index(store, split)
    await index(store, whole)
    both = SearchFilters(collections=("left", "right"))
    queries = [*KNOWN_ANSWERS, "release note upload queue", "login latency"]
    for query, mode, k in itertools.product(queries, SEARCH_MODES, (3, 8)):
        query_vector = None if mode == "keyword" else vector(query)
        union = await store.search(SearchRequest(query, query_vector, k, both, 0.01, mode))
        one = await store.search(
            SearchRequest(query, query_vector, k, SearchFilters(collection="whole"), 0.01, mode)
        )
        assert union and ranked(union) == ranked(one), (query, mode, k)
        placed = {(d.source_type, d.source_id): d.collection for d in split}
        assert [h.collection for h in union] == [placed[h.source_type, h.source_id] for h in union]
    where = pairs({"team": "qa"})
    query, sources = "upload queue latency", ("wiki", "git")
    filtered = replace(both, where=where, source_types=sources)
    union = await store.search(SearchRequest(query, vector(query), 5, filtered, 0.01))
    whole_filtered = SearchFilters(sources, where, collection="whole")
    one = await store.search(SearchRequest(query, vector(query), 5, whole_filtered, 0.01))
    assert union and ranked(union) == ranked(one)
    counted = await store.facet_counts(both, ("team", "source_type"))
    assert counted == await store.facet_counts(
        SearchFilters(collection="whole"), ("team", "source_type")
    )


# text whose offsets are easy to get wrong: emoji (two UTF-16 units), a combining
# accent, CJK, CRLF line ends, tabs and runs of spaces the chunker respaces
SPAN_TEXT = (
    "# Spans\r\n\r\nCafé 🎉 naïve e\u0301clair — 日本語のテキストです。\r\n\r\n"
    "Tabs\there\tand\r\n   there: the Tier-2 cache keeps entries for 24 hours.\r\n\r\n"
    + "Another sentence of prose 🚀 follows here. "
    * 40
)
PAGED_TEXT = (
    "## Page 1\n\nThe turbine manual covers blade pitch.\n\n"
    "## Page 2\n\nTorque limits are 40 Nm for the hub bolts."
)


def span_documents() -> list[Document]:
    return [
        Document("wiki", "spans.md", SPAN_TEXT, "Spans"),
        Document("knowledge", "manual.pdf", PAGED_TEXT, "Manual", {"pages": 2}),
    ]


def assert_placed(doc: Document) -> None:
    """Every chunk reads where it says in the stored text, in code points and in UTF-16."""
    utf16 = doc.content.encode("utf-16-le")
    for chunk in doc.chunks:
        assert chunk.start is not None and chunk.end is not None, chunk
        there = doc.content[chunk.start : chunk.end]
        assert " ".join(there.split()) == " ".join(chunk.content.split())
        start16, end16 = (spans.utf16(doc.content, at) for at in (chunk.start, chunk.end))
        assert utf16[2 * start16 : 2 * end16].decode("utf-16-le") == there


async def test_chunks_record_their_place_and_page_in_the_document(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    """Stored, read back, found by search, exported and imported: each chunk keeps where
    it sits in its document's text, and a PDF's chunk its page."""
    await index(store, span_documents())
    text, paged = [await store.get_by_id(doc.id) for doc in span_documents()]
    assert text is not None and paged is not None and len(text.chunks) > 1
    assert_placed(text)
    assert_placed(paged)
    assert [c.page for c in paged.chunks] == [1, 2]
    assert all(c.page is None for c in text.chunks)
    texts = await store.document_texts([text.id, paged.id, document_id("default", "wiki", "no")])
    assert texts == {text.id: SPAN_TEXT, paged.id: PAGED_TEXT}
    (hit,) = await search(store, "torque limits hub bolts", k=1, collection="default")
    assert (hit.chunk.start, hit.chunk.end, hit.chunk.page) == (
        paged.chunks[1].start,
        paged.chunks[1].end,
        2,
    )

    path = tmp_path / "spans.jsonl"
    await transfer.export_collection(store, EMBEDDER, "default", path)
    await store.delete_documents([text.id, paged.id])
    await transfer.import_file(store, EMBEDDER, path)
    restored = await store.get_by_id(text.id)
    assert restored is not None
    assert [(c.start, c.end) for c in restored.chunks] == [(c.start, c.end) for c in text.chunks]


async def test_backfill_gives_stored_chunks_their_offsets(store: KnowledgeStore) -> None:
    """Chunks written without offsets (before they were recorded) get them from the
    stored text, with their vectors as they were."""
    docs = span_documents()
    await index(store, docs)
    for doc in docs:
        for chunk in doc.chunks:
            chunk.start = chunk.end = chunk.page = None
    await store.delete_documents([doc.id for doc in docs])
    await store.index_documents(docs)
    bare = await store.get_by_id(docs[0].id)
    assert bare is not None and all(c.start is None for c in bare.chunks)

    done = await backfill(store, ["default"])
    assert (done.documents, done.unplaced) == (2, 0)
    text, paged = [await store.get_by_id(doc.id) for doc in docs]
    assert text is not None and paged is not None
    assert_placed(text)
    assert [c.page for c in paged.chunks] == [1, 2]
    (hit,) = await search(store, "torque limits hub bolts", k=1)
    assert hit.chunk.page == 2
    assert (await backfill(store, ["default"])).documents == 0


@pytest.mark.parametrize("name", list(BACKENDS))
def test_citations_slice_the_stored_document_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """An answer's citations, read through the backend's own hits and documents: each
    quote is the stored text at its document span, in code points and in UTF-16."""
    settings = BACKENDS[name](request, tmp_path).replace(answer_threshold="0.1")
    doc = {"source_type": "wiki", "source_id": "spans.md", "title": "Spans", "content": SPAN_TEXT}
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/knowledge/documents", json=doc).status_code == 201
        question = "How long does the Tier-2 cache keep entries?"
        for unit in ("codepoints", "utf16"):
            body = client.post(
                "/v1/knowledge/answer", json={"query": question, "offsets": unit}
            ).json()
            assert body["status"] == "success", body
            (citation,) = body["citations"]
            stored = client.get(f"/v1/knowledge/documents/{citation['document_id']}").json()
            start, end = citation["document"]["start"], citation["document"]["end"]
            if unit == "utf16":
                there = stored["content"].encode("utf-16-le")[2 * start : 2 * end]
                assert there.decode("utf-16-le") == citation["quote"]
            else:
                assert stored["content"][start:end] == citation["quote"]
            assert citation["quote"].endswith("the Tier-2 cache keeps entries for 24 hours.")
