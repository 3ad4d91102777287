"""The Python clients against the service: every route, streams, and the error tree."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.client import AsyncKnowledgeClient, KnowledgeClient
from knowledge_api.errors import CollectionNotFound, InvalidQuery, NotFound, Unauthorized
from knowledge_api.settings import Settings
from tests.conftest import corpus, seeded_at
from tests.test_access import make_key
from tests.test_faults import free_port, serve

DOC = {"source_type": "wiki", "source_id": "guide", "content": "Rotate the signing keys monthly."}


def test_every_route_through_the_blocking_client(client: TestClient) -> None:
    knowledge = KnowledgeClient(http=client)
    assert knowledge.health()["status"] == "healthy"
    found = knowledge.query("login timeout", limit=2, synthesize=False)
    assert found["results"][0]["source_id"] == "SIAM-101"
    events = [name for name, _ in knowledge.query_stream("login timeout")]
    fused = [name for name in events if name != "source_results"]  # each source's first
    assert fused[0] == "results" and fused[-1] == "done"
    assert "source_results" not in events[events.index("results") :]  # only ahead
    answered = knowledge.answer("Which audio formats are accepted?", threshold=0.0)
    assert answered["status"] == "success"
    streamed = list(knowledge.answer_stream("Which audio formats are accepted?", threshold=0.0))
    assert streamed[-1][0] == "done" and streamed[-1][1]["status"] == "success"
    assert knowledge.retrieve("audio", "default", top_k=1)["retrieved_chunks"]
    assert knowledge.validate("default", ["audio"])["success"] is True
    assert knowledge.support("refund", "money back")["coverage"] == "none"
    assert knowledge.detail("jira", "SIAM-101")["title"] == "Login timeout"
    knowledge.add_documents({**DOC, "collection": "other"})
    several = knowledge.retrieve("audio", collections=["default", "other"], top_k=1)
    assert several["retrieved_chunks"][0]["collection"] == "default"
    created = knowledge.add_documents(DOC)
    doc_id = created["ids"][0]
    assert knowledge.document(doc_id)["source_id"] == "guide"
    assert knowledge.delete_document(doc_id)["deleted"] == doc_id


def test_errors_are_raised_as_the_error_tree(client: TestClient) -> None:
    knowledge = KnowledgeClient(http=client)
    with pytest.raises(InvalidQuery) as bad:
        knowledge.query("   ")
    assert bad.value.status == 400 and bad.value.details["field"] == "query"
    with pytest.raises(CollectionNotFound) as missing:
        knowledge.retrieve("audio", "nowhere")
    assert missing.value.details["available"] == ["default"]
    with pytest.raises(NotFound):
        knowledge.document("no-such-id")


async def test_the_async_client(settings: Settings) -> None:
    settings = settings.replace(auth="keys")
    token = await make_key(settings, "reader", ["read"])
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.service.ingest(corpus())
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        async with AsyncKnowledgeClient(api_key=token, http=http) as knowledge:
            found = await knowledge.query("login timeout", synthesize=False)
            assert found["results"][0]["source_id"] == "SIAM-101"
            events = [name async for name, _ in knowledge.answer_stream("audio formats")]
            assert events[0] == "results" and events[-1] == "done"
        async with AsyncKnowledgeClient(
            http=httpx.AsyncClient(transport=transport, base_url="http://testserver")
        ) as anonymous:
            with pytest.raises(Unauthorized):
                await anonymous.query("login timeout")


def test_cli_query_asks_a_running_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --url the CLI loads no model: it asks the service through the client."""
    port = free_port()
    server = serve(tmp_path, port, KNOWLEDGE_SEED_ON_EMPTY="true")
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "no-such-embedder")  # would fail if loaded
    try:
        url = f"http://127.0.0.1:{port}"
        seeded_at(url)
        assert main(["query", "How is a query answered?", "--url", url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["results"]
        assert main(["query", "   ", "--url", url]) == 2
    finally:
        server.terminate()
        server.wait(timeout=10)
