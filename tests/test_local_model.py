"""The real all-MiniLM-L6-v2 model, end to end: loaded offline from its package."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.embeddings.local import SENTENCE_TOKENS, LocalEmbedder, padded
from knowledge_api.embeddings.runtimes import Feed, OpenVinoEncoder, cpu_bf16_units
from knowledge_api.errors import EmbeddingError
from tests.conftest import corpus, make_settings, seeded
from tests.test_heap import resident_kb
from tests.torch_reference import TorchEmbedder

pytestmark = pytest.mark.model


@pytest.fixture(scope="session")
def model() -> LocalEmbedder:
    embedder = LocalEmbedder(precision="auto")
    embedder.load()
    return embedder


def test_vectors_are_unit_length_and_deterministic(model: LocalEmbedder) -> None:
    vectors = model.embed_documents(["first passage", "a second, longer passage of text", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(model.embed_query("first passage"), vectors[0], atol=1e-6)


def bundled_passages() -> list[str]:
    """The paragraphs of the bundled docs: a few hundred real passages, 1-2,400 chars."""
    docs = Path(knowledge_api.__file__).parent / "docs"
    paragraphs = (p.strip() for f in sorted(docs.glob("*.md")) for p in f.read_text().split("\n\n"))
    return [p for p in paragraphs if p]


@pytest.fixture(scope="session")
def torch_vectors() -> np.ndarray:
    reference = TorchEmbedder()
    reference.load()
    return reference.embed_documents(bundled_passages())


@pytest.mark.parametrize(
    ("precision", "units"),
    [("fp32", None), ("int8", None), ("int8", [])],
    ids=["fp32", "int8-as-this-cpu-builds-it", "int8-7bit"],
)
def test_every_passage_stays_close_to_the_pytorch_vectors(
    precision: str, units: list[str] | None, torch_vectors: np.ndarray
) -> None:
    """A store written by the PyTorch embedder stays readable: same name, same vectors.

    The lowest cosine over the bundled paragraphs (872 when measured), to PyTorch's
    vectors (the reference column) and to the fp32 path's (the corpus column is the
    same paragraphs: the two columns agree to five places, fp32 being within 1e-5 of
    PyTorch). int8 is served only when configured, on any CPU, so its floor holds on
    every family; where the CPU has no VNNI unit it is built with 7-bit weights
    (runtimes.py), and the `int8-7bit` case runs that build on every CPU. bf16 is
    served only where `auto` picks it (test below, 0.999 of fp32).

    | CPU family                              | fp32    | int8 (8-bit) | int8-7bit | bf16    |
    |-----------------------------------------|---------|--------------|-----------|---------|
    | EPYC Zen 3: AVX2, FMA; no AVX-512, VNNI | 1.00000 | 0.99440      | 0.99650   | -       |
    | EPYC Zen 4: avx512_bf16, avx512_vnni    | 1.00000 | 0.99577      | 0.99621   | 0.99997 |
    | Xeon with AMX (amx_bf16, avx512_vnni)   | 1.00000 | -            | -         | 0.99997 |

    Zen 3's int8 (8-bit) figure is what this test measured there before the 7-bit build
    (so int8 there is the 7-bit build now); its 7-bit figure was measured against fp32
    on the same paragraphs. Under emulation of a Zen 3 (`qemu-x86_64 -cpu EPYC-Milan`:
    ONNX Runtime picks its kernels by the CPUID it sees), 78 of the paragraphs (the 48
    lowest on a Zen 4, 32 at random) gave 0.99524 with 8-bit weights, 0.99628 with 7.
    The 7-bit build on a VNNI CPU costs 0.001 of cosine
    against its 8-bit build in a flat batch (0.99699 -> 0.99607 here, Zen 4), and no
    more than that through the embedder's length-sorted batches (above)."""
    embedder = LocalEmbedder(precision=precision)
    embedder.load(units=units)
    passages = bundled_passages()
    assert len(passages) >= 200 and embedder.name == TorchEmbedder.name
    cosines = np.sum(embedder.embed_documents(passages) * torch_vectors, axis=1)
    assert cosines.min() >= 0.995, passages[int(np.argmin(cosines))][:80]
    query = passages[0]
    assert float(embedder.embed_query(query) @ torch_vectors[0]) >= 0.995


@pytest.fixture(scope="session")
def fp32_vectors() -> np.ndarray:
    embedder = LocalEmbedder(precision="fp32")
    embedder.load()
    return embedder.embed_documents(bundled_passages())


NO_BF16 = "this CPU has no bf16 units (amx_bf16, avx512_bf16): only the fp32 path runs here"


@pytest.mark.skipif(not cpu_bf16_units(), reason=NO_BF16)
def test_bf16_stays_within_0_999_of_fp32_on_every_bundled_passage(
    model: LocalEmbedder, fp32_vectors: np.ndarray
) -> None:
    """A store written by either path is read by the other as the same embedder."""
    assert model.precision == "bf16" and model.choice is not None
    assert model.choice.reason.startswith("bf16 auto: the CPU has")
    passages = bundled_passages()
    cosines = np.sum(model.embed_documents(passages) * fp32_vectors, axis=1)
    assert cosines.min() >= 0.999, passages[int(np.argmin(cosines))][:80]
    queries = model.embed_queries(passages[:40])
    assert np.sum(queries * fp32_vectors[:40], axis=1).min() >= 0.999
    assert float(model.embed_query(passages[1]) @ fp32_vectors[1]) >= 0.999


def test_a_cpu_without_bf16_units_runs_fp32_and_says_why(fp32_vectors: np.ndarray) -> None:
    embedder = LocalEmbedder(precision="auto")
    embedder.load(units=[])
    health = embedder.health()
    assert (health["runtime"], health["precision"]) == ("openvino", "fp32")
    assert "no bf16 units" in health["precision_reason"]
    vectors = embedder.embed_documents(bundled_passages()[:60])
    assert np.sum(vectors * fp32_vectors[:60], axis=1).min() >= 0.99999


def test_rows_come_back_in_input_order_whatever_their_lengths(model: LocalEmbedder) -> None:
    """Batches are made of like lengths and run on several streams at once."""
    passages = bundled_passages()[:90]
    mixed = [passages[i] for i in np.random.default_rng(3).permutation(len(passages))]
    vectors = model.embed_documents(mixed)
    one_by_one = np.stack([model.embed_query(text) for text in mixed])
    assert np.sum(vectors * one_by_one, axis=1).min() >= 0.999


@pytest.mark.parametrize(("writer", "reader"), [("fp32", "auto"), ("auto", "fp32")])
def test_a_store_written_by_one_precision_is_read_by_the_other(
    writer: str, reader: str, tmp_path: Path
) -> None:
    """Same embedder identity, vectors within tolerance: the same answers, alike scores."""
    settings = make_settings(tmp_path, embedder="local")
    question = {"query": "our sign-in screen hangs when single sign-on is sluggish"}

    def ask(precision: str, ingest: bool) -> dict[str, object]:
        app = create_app(settings)
        embedder = LocalEmbedder(precision=precision)
        embedder.load()
        app.state.service.embedder = embedder
        with TestClient(app) as client:
            if ingest:
                client.portal.call(app.state.service.ingest, corpus())
            assert client.get("/health").json()["embedder"]["status"] == "ok"
            body = client.post("/v1/knowledge/query", json={**question, "synthesize": False})
            assert body.status_code == 200, body.text
            return body.json()["results"][0]  # type: ignore[no-any-return]

    written = ask(writer, ingest=True)
    read = ask(reader, ingest=False)
    assert read["source_id"] == written["source_id"] == "SIAM-101"
    assert abs(float(read["similarity"]) - float(written["similarity"])) <= 0.002  # type: ignore[arg-type]


def test_an_answers_sentences_run_in_small_batches(
    model: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenVINO keeps what it prepared for each batch shape, sized to the largest: an
    answer's sentences run SENTENCE_TOKENS at a time, documents BATCH_TOKENS, with the
    same vectors."""
    encoder = model._encoder
    assert encoder is not None
    run_all = encoder.run_all
    sizes: list[int] = []

    def recorded(feeds: Iterable[Feed], done: Callable[[int, np.ndarray], None]) -> None:
        def seen() -> Iterator[Feed]:
            for feed in feeds:
                sizes.append(feed["input_ids"].size)
                yield feed

        run_all(seen(), done)

    monkeypatch.setattr(encoder, "run_all", recorded)
    sentences = [p.split(". ")[0][:320] for p in bundled_passages()[:14]]
    vectors = model.embed_sentences(sentences)
    assert len(sizes) > 1 and max(sizes) <= SENTENCE_TOKENS
    sizes.clear()
    documents = model.embed_documents(sentences)
    assert max(sizes) > SENTENCE_TOKENS
    assert np.sum(vectors * documents, axis=1).min() >= 0.999


@pytest.mark.skipif(not cpu_bf16_units(), reason=NO_BF16)
def test_a_bf16_query_runs_in_the_calling_thread_and_batches_on_every_stream(
    model: LocalEmbedder,
) -> None:
    """At bf16, queries run on a model of one stream, which OpenVINO runs in the thread
    that calls it, unpinned (no stream's thread to wake, no core it must wait for);
    batches on a model with a stream per core, compiled at the first batch. A query on
    a stream of the batch model left the calling thread a tenth of the process's CPU."""
    assert model.model_file is not None
    encoder = OpenVinoEncoder(model.model_file, "bf16", 2)
    assert encoder.query_model.get_property("NUM_STREAMS") == 1
    assert encoder.query_model.get_property("INFERENCE_NUM_THREADS") == 1
    assert encoder.query_model.get_property("ENABLE_CPU_PINNING") is False
    feed = padded([[101, 7592, 2088, 102]], encoder.pad_to)
    alone = encoder.run(feed)
    thread, process = time.thread_time(), time.process_time()
    for _ in range(20):
        encoder.run(feed)
    share = (time.thread_time() - thread) / (time.process_time() - process)
    assert share >= 0.6, share
    assert encoder.batch_model is None
    batched: dict[int, np.ndarray] = {}
    encoder.run_all([feed, feed], batched.__setitem__)
    assert encoder.batch_model.get_property("NUM_STREAMS") == 2
    assert np.allclose(batched[0], alone, atol=1e-5) and np.allclose(batched[1], alone, atol=1e-5)


def test_fp32_keeps_one_compilation_for_queries_and_batches(model: LocalEmbedder) -> None:
    """fp32 packs the weights for each compilation (56 MB): one serves both."""
    assert model.model_file is not None
    encoder = OpenVinoEncoder(model.model_file, "fp32", 2)
    assert encoder.batch_model is encoder.query_model
    assert encoder.query_model.get_property("NUM_STREAMS") == 2


def test_meaning_beats_wording(model: LocalEmbedder) -> None:
    passages = [
        "The cat sat on the mat.",
        "Quarterly revenue grew by ten percent.",
        "Reset your password from the account settings page.",
    ]
    query = model.embed_query("I forgot my login credentials")
    assert int(np.argmax(model.embed_documents(passages) @ query)) == 2


def test_service_with_the_real_model_answers_paraphrases(
    model: LocalEmbedder, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, embedder="local")
    app = create_app(settings)
    app.state.service.embedder = model
    with TestClient(app) as client:
        client.portal.call(app.state.service.ingest, corpus())
        health = client.get("/health").json()
        assert health["embedder"]["model"] == "all-MiniLM-L6-v2"
        assert health["embedder"]["status"] == "ok"
        assert health["embedder"]["runtime"] == "openvino"
        assert health["embedder"]["precision"] == model.precision
        assert health["embedder"]["precision_reason"] == model.choice.reason  # type: ignore[union-attr]
        body = client.post(
            "/v1/knowledge/query",
            json={
                "query": "our sign-in screen hangs when single sign-on is sluggish",
                "synthesize": False,
            },
        ).json()
        assert body["results"][0]["source_id"] == "SIAM-101"
        assert 0.2 <= body["results"][0]["similarity"] <= 1.0


def test_a_missing_model_degrades_to_keyword_search(tmp_path: Path) -> None:
    class Broken(LocalEmbedder):
        def load(self) -> None:
            self.error = "weights missing"
            raise EmbeddingError("cannot load all-MiniLM-L6-v2: weights missing")

    settings = make_settings(tmp_path, embedder="local", seed_on_empty=True)
    app = create_app(settings)
    app.state.service.embedder = Broken()
    with TestClient(app) as client:
        health = client.get("/health").json()
        assert health["status"] == "degraded" and health["embedder"]["status"] == "failing"
        body = client.post("/v1/knowledge/query", json={"query": "anything"}).json()
        assert body["results"] == [] and "embedder unavailable" in body["warnings"][0]


def test_default_threshold_answers_the_bundled_docs_and_refuses_strangers(
    model: LocalEmbedder, tmp_path: Path
) -> None:
    """`make run` out of the box: questions the docs answer get an answer, others not."""
    settings = make_settings(tmp_path, embedder="local", seed_on_empty=True)
    app = create_app(settings)
    app.state.service.embedder = model
    with TestClient(app) as client:
        seeded(client)

        def status(question: str) -> str:
            body = client.post("/v1/knowledge/answer", json={"query": question}).json()
            return str(body["status"])

        for question in ("How do I ingest documents?", "how do I sync the KB articles"):
            assert status(question) == "success", question
        for question in ("how do I bake sourdough bread", "who won the 2018 world cup"):
            assert status(question) == "insufficient_context", question


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc (Linux)")
def test_the_weights_file_is_not_kept_resident_once_a_shape_is_prepared(
    model: LocalEmbedder,
) -> None:
    """OpenVINO reads the mapped weights to prepare each new input shape; the pages read
    are handed back (heap.release_mapped_file), and a shape met before reads none."""
    assert model.model_file is not None
    encoder = OpenVinoEncoder(model.model_file, "fp32", 1)
    weights = model.model_file.with_suffix(".bin")
    encoder.run(padded([[101, 7592, 102]], encoder.pad_to))
    assert encoder.shapes == {(1, 16)} and resident_kb(weights) < 1024
    encoder.run(padded([[101, *range(2000, 2030), 102]], encoder.pad_to))
    assert encoder.shapes == {(1, 16), (1, 32)} and resident_kb(weights) < 1024
