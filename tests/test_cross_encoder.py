"""The cross-encoder reranker with a real sentence-transformers CrossEncoder: a tiny
BERT with random weights and a vocabulary of the test corpus' words, built here and
saved to a folder, so nothing is downloaded."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import knowledge_api
from knowledge_api.compose import build_service
from knowledge_api.models import SearchFilters, SearchHit
from knowledge_api.rerankers.cross_encoder import CrossEncoderReranker
from knowledge_api.service import KnowledgeService
from tests.conftest import CORPUS, ask, corpus, make_settings, query_params
from tests.torch_reference import tiny_bert_config

pytest.importorskip("sentence_transformers")

QUESTION = "which audio formats does asset ingestion accept"
PACKAGE_ROOT = Path(knowledge_api.__file__).parent.parent
TOP = 5


def tiny_cross_encoder(folder: Path, seed: int = 0) -> Path:
    """A 1-layer BERT sequence classifier (one label) and its WordPiece vocabulary."""
    from transformers import BertForSequenceClassification, BertTokenizerFast

    words = {w for d in CORPUS for w in re.findall(r"\w+", f"{d.title} {d.content}".lower())}
    words |= set(re.findall(r"\w+", QUESTION))
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = folder / "vocab.txt"
    folder.mkdir(parents=True, exist_ok=True)
    vocab.write_text("\n".join(special + sorted(words) + list(">.,:#")) + "\n")
    size = len(vocab.read_text().split())
    config = tiny_bert_config(seed, size, layers=1, hidden=32, heads=2, positions=256, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


@pytest.fixture
async def service(tmp_path: Path, model_path: Path) -> AsyncIterator[KnowledgeService]:
    settings = make_settings(
        tmp_path, reranker="cross-encoder", rerank_model=str(model_path), rerank_top=TOP
    )
    svc = build_service(settings)
    await svc.start()
    await svc.ingest(corpus())
    yield svc
    await svc.stop()


async def fused(service: KnowledgeService) -> list[SearchHit]:
    found = await service.retrieve(QUESTION, 10, SearchFilters(), 0.0, rerank=False)
    return found.hits


def by_model(model_path: Path, hits: list[SearchHit]) -> list[str]:
    """The chunk ids of `hits` as the model itself orders the first TOP of them."""
    from sentence_transformers import CrossEncoder

    head, tail = hits[:TOP], hits[TOP:]
    pairs = [(QUESTION, hit.chunk.embedded_text) for hit in head]
    scores = CrossEncoder(str(model_path)).predict(pairs, show_progress_bar=False)
    order = sorted(range(len(head)), key=lambda i: -float(scores[i]))
    return [head[i].chunk.id for i in order] + [hit.chunk.id for hit in tail]


def ids(hits: list[Any]) -> list[str]:
    return [hit.chunk.id for hit in hits]


async def test_the_stage_orders_the_best_hits_by_the_models_scores(
    service: KnowledgeService, model_path: Path
) -> None:
    hits = await fused(service)
    expected = by_model(model_path, hits)
    assert len(hits) > TOP and expected != ids(hits), "the model must change the order"
    body = await ask(service, query_params({"query": QUESTION, "limit": 6, "threshold": 0.0}))
    assert [result["id"] for result in body["results"]] == expected[:6]
    assert "warnings" not in body and body["metrics"]["rerank_ms"] > 0


async def test_the_model_scores_on_its_own_thread_and_loads_once(
    service: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    reranker = service.reranker
    assert isinstance(reranker, CrossEncoderReranker)
    encoder = reranker._encoder
    threads: list[str] = []
    predict = encoder.predict

    def recorded(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return predict(*args, **kwargs)

    monkeypatch.setattr(encoder, "predict", recorded)
    for _ in range(2):
        await service.retrieve(QUESTION, 3, SearchFilters(), 0.0)
    await reranker.open()  # a second open keeps the loaded model
    assert reranker._encoder is encoder
    assert len(threads) == 2 and all(name.startswith("reranker") for name in threads)
    assert threading.main_thread().name not in threads


async def test_health_reports_the_model(service: KnowledgeService, model_path: Path) -> None:
    health = await service.health()
    assert health["reranker"] == {"name": "cross-encoder", "model": str(model_path), "status": "ok"}
    assert health["status"] == "healthy"


async def test_a_model_that_does_not_load_leaves_the_fused_order(tmp_path: Path) -> None:
    missing = tmp_path / "no-model"
    missing.mkdir()
    settings = make_settings(tmp_path, reranker="cross-encoder", rerank_model=str(missing))
    service = build_service(settings)
    await service.start()
    try:
        await service.ingest(corpus())
        hits = await fused(service)
        found = await service.retrieve(QUESTION, 4, SearchFilters(), 0.0)
        assert ids(found.hits) == ids(hits[:4])
        [warning] = found.warnings
        assert warning.startswith("reranker cross-encoder unavailable (cannot load")
        assert found.ranking["reranker"] == "none"  # what ran: the fused order
        health = await service.health()
        assert health["status"] == "degraded"
        assert health["reranker"]["status"] == "unavailable"
        assert str(missing) in health["reranker"]["error"]
    finally:
        await service.stop()


LOAD = """
import asyncio, json, sys
from knowledge_api.rerankers.cross_encoder import CrossEncoderReranker

async def load(model):
    reranker = CrossEncoderReranker(model)
    await reranker.open()
    await reranker.close()
    return reranker.health()

print(json.dumps([asyncio.run(load(model)) for model in sys.argv[1:]]))
"""


def test_without_the_hub_an_id_gives_up_at_once_and_a_folder_still_loads(
    tmp_path: Path, model_path: Path
) -> None:
    """The hub here accepts connections and never answers, as a network that drops
    them: an id in no local cache was retried for more than a minute (68 s measured)
    before the service ran without it; now one request to the hub, which answers
    nothing within a second, and /health says so. A folder never asks the hub."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(50)
        hole.settimeout(0.1)
        calls: list[socket.socket] = []
        done = threading.Event()

        def count() -> None:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    calls.append(hole.accept()[0])

        counter = threading.Thread(target=count)
        counter.start()
        env = {
            **os.environ,
            "HF_ENDPOINT": f"http://127.0.0.1:{hole.getsockname()[1]}",
            "HF_HOME": str(tmp_path / "hf"),  # an empty cache
            "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("HF_HUB_OFFLINE", None)
        command = [sys.executable, "-c", LOAD, "example/not-cached", str(model_path)]
        try:
            ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        finally:
            done.set()
            counter.join()
            for call in calls:
                call.close()
    assert ran.returncode == 0, ran.stderr
    by_id, by_folder = json.loads(ran.stdout.splitlines()[-1])
    assert by_id["status"] == "unavailable"
    assert by_id["error"].startswith(
        "cannot load example/not-cached: not in the local model cache, and the model hub "
        f"({env['HF_ENDPOINT']}) is unreachable"
    )
    assert by_folder["status"] == "ok"
    assert len(calls) == 1  # the one look at the hub, none for the folder
