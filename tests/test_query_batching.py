"""Micro-batching of query embeddings: concurrent queries share a forward pass of the
real model, get the vectors they would get alone, and a full queue is a 503."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.embeddings.batching import QueryBatcher
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.embeddings.local import LocalEmbedder
from knowledge_api.errors import EmbeddingError, Overloaded
from tests.conftest import corpus, make_settings
from tests.test_errors import assert_error_shape

QUERIES = [
    "how do I reset my password",
    "login page times out",
    "which audio formats can be ingested",
    "release date of version 4.2",
    "median search latency last week",
    "link a test case to a jira ticket",
    "pagination returns duplicate assets",
    "a much longer question about why the gateway timeout was raised to sixty seconds",
]


class CountingEmbedder(LocalEmbedder):
    """The real model, recording how many texts each encoder call ran."""

    def __init__(self) -> None:
        super().__init__(precision="auto")
        self.runs: list[int] = []

    def _run_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.runs.append(len(texts))
        return super()._run_queries(texts)


@pytest.fixture(scope="module")
def model() -> CountingEmbedder:
    embedder = CountingEmbedder()
    embedder.load()
    return embedder


def batcher_of(embedder: Any, window_ms: float = 0.0, size: int = 32, queue: int = 64) -> Any:
    async def run(texts: Sequence[str]) -> np.ndarray:
        return await asyncio.to_thread(embedder.embed_queries, texts)

    return QueryBatcher(run, window_ms, size, queue)


@pytest.mark.model
async def test_concurrent_queries_share_one_encoder_call(model: CountingEmbedder) -> None:
    alone = np.stack([model.embed_query(q) for q in QUERIES])
    model.runs.clear()
    batcher = batcher_of(model)
    try:
        vectors = await asyncio.gather(*(batcher.embed(q) for q in QUERIES))
    finally:
        await batcher.close()
    assert model.runs == [len(QUERIES)]
    cosines = np.sum(np.stack(vectors) * alone, axis=1)
    assert cosines.min() >= 0.9999, cosines


@pytest.mark.model
async def test_batches_never_exceed_the_batch_size(model: CountingEmbedder) -> None:
    model.runs.clear()
    batcher = batcher_of(model, size=3)
    try:
        await asyncio.gather(*(batcher.embed(q) for q in QUERIES))
    finally:
        await batcher.close()
    assert model.runs == [3, 3, 2]
    assert batcher.stats()["batches"] == 3 and batcher.stats()["embedded"] == len(QUERIES)


async def test_a_window_gathers_queries_that_arrive_apart() -> None:
    """The window is far longer than the gap between the two (whatever the machine's
    load); the second fills the batch, which ends the wait."""
    embedder = FakeEmbedder()
    batcher = batcher_of(embedder, window_ms=10_000.0, size=2)

    async def later(query: str) -> np.ndarray:
        await asyncio.sleep(0.02)
        return await batcher.embed(query)  # type: ignore[no-any-return]

    try:
        await asyncio.gather(batcher.embed(QUERIES[0]), later(QUERIES[1]))
    finally:
        await batcher.close()
    assert embedder.calls == 1 and embedder.texts_embedded == 2


async def test_a_failed_batch_fails_each_of_its_queries_and_the_next_batch_runs() -> None:
    class FailingOnce(FakeEmbedder):
        def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
            if self.calls == 0:
                self.calls += 1
                raise EmbeddingError("model crashed")
            return super().embed_batch(texts)

    batcher = batcher_of(FailingOnce())
    try:
        results = await asyncio.gather(
            *(batcher.embed(q) for q in QUERIES[:3]), return_exceptions=True
        )
        assert all(isinstance(r, EmbeddingError) for r in results)
        assert (await batcher.embed(QUERIES[0])).shape == (64,)
    finally:
        await batcher.close()


async def test_past_the_queue_bound_a_query_is_refused_at_once() -> None:
    batcher = batcher_of(FakeEmbedder(), queue=2)
    first = [asyncio.ensure_future(batcher.embed(q)) for q in QUERIES[:2]]
    await asyncio.sleep(0)  # both are queued; the worker has not taken them yet
    try:
        with pytest.raises(Overloaded) as refused:
            await batcher.embed(QUERIES[2])
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
        assert len(await asyncio.gather(*first)) == 2
    finally:
        await batcher.close()
    assert batcher.stats()["refused"] == 1


async def test_queries_that_wait_go_in_the_order_they_came_oldest_first() -> None:
    """While the model is busy, queries queue; each batch takes the oldest of them, so
    none waits behind one that came later (the tail under load is the wait of the
    unluckiest query), and one whose caller left takes no place in a batch."""
    batches: list[list[str]] = []
    gate = asyncio.Event()

    async def run(texts: Sequence[str]) -> np.ndarray:
        batches.append(list(texts))
        await gate.wait()  # the model is busy till the queue has formed
        return FakeEmbedder().embed_queries(texts)

    batcher = QueryBatcher(run, 0.0, 2, 64)
    try:
        first = asyncio.ensure_future(batcher.embed(QUERIES[0]))
        while not batches:
            await asyncio.sleep(0)
        queued = [asyncio.ensure_future(batcher.embed(q)) for q in QUERIES[1:]]
        await asyncio.sleep(0)
        queued[1].cancel()  # its caller left while it waited
        gate.set()
        await asyncio.gather(first, *queued[:1], *queued[2:])
    finally:
        await batcher.close()
    q = QUERIES
    assert batches == [[q[0]], [q[1], q[3]], [q[4], q[5]], [q[6], q[7]]]


class GatedEmbedder(FakeEmbedder):
    """Holds the model thread until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.entered.set()
        assert self.gate.wait(10)
        return super().embed_queries(texts)


def test_a_full_queue_is_503_with_retry_after_through_the_app(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, query_batch_size=1, query_queue_size=1)
    service = build_service(settings)
    embedder = GatedEmbedder()
    service.embedder = embedder
    with TestClient(create_app(settings, service)) as client, ThreadPoolExecutor(2) as pool:
        client.portal.call(service.ingest, corpus())
        embedder.entered.clear()

        def ask(query: str) -> Any:
            return client.post("/v1/knowledge/query", json={"query": query, "synthesize": False})

        running = pool.submit(ask, QUERIES[0])
        assert embedder.entered.wait(10)
        waiting = pool.submit(ask, QUERIES[1])
        deadline = time.monotonic() + 10
        while service.query_batcher.stats()["waiting"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = ask(QUERIES[2])
        embedder.gate.set()
        assert running.result(10).status_code == 200
        assert waiting.result(10).status_code == 200
    error = assert_error_shape(refused, 503)
    assert error["type"] == "overloaded" and refused.headers["retry-after"] == "1"
    assert error["details"]["queued"] == 1


@pytest.mark.model
def test_a_query_micro_batch_and_an_ingestion_batch_agree() -> None:
    """Queries run on a model of one stream, ingestion batches on every stream of
    another compilation of the same weights: the same vectors."""
    embedder = LocalEmbedder(precision="auto")
    embedder.load()
    query = embedder.embed_queries(["reset a password", "rotate the signing keys"])
    passage = embedder.embed_documents(["rotate the signing keys", "reset a password"])
    assert float(query[0] @ passage[1]) >= 0.9999 and float(query[1] @ passage[0]) >= 0.9999
    assert float(query[0] @ passage[0]) < 0.9
