"""The Embedder protocol; batching lives once in BatchEmbedder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from knowledge_api.models import Progress
from knowledge_api.registry import FromSettings


class Embedder(Protocol):
    name: str
    """Recorded by the store: vectors of different names never mix."""
    dimension: int
    answer_threshold: float
    """Similarity a passage needs to ground an answer when KNOWLEDGE_ANSWER_THRESHOLD is
    auto: where this model's cosines part questions a corpus answers from unrelated ones."""

    def load(self) -> None: ...

    def embed_documents(
        self, texts: Sequence[str], progress: Progress | None = None
    ) -> np.ndarray: ...

    def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """A few short texts compared with a query (an offline answer's sentences):
        rows equal embed_documents's."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Several queries at once (micro-batching): rows equal embed_query's."""
        ...

    def health(self) -> dict[str, Any]: ...


class BatchEmbedder(FromSettings):
    """Subclasses implement `embed_batch` (unit-length float32 rows); this class
    groups texts of similar length so each batch pads as little as possible."""

    name = "batch"
    dimension = 0
    batch_size = 16
    answer_threshold = 0.7
    """The retrieval-agent spec's value, set for large embedding models."""

    def load(self) -> None:
        return None

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_documents(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self.embed_batch([texts[i] for i in rows])
            if progress is not None:
                progress(len(rows))
        return out

    def embed_sentences(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed_batch([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """One embed_query per text; embedders that can run queries together override it."""
        return np.stack([self.embed_query(text) for text in texts])

    def health(self) -> dict[str, Any]:
        return {"name": self.name, "dimension": self.dimension, "status": "ok"}


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    normalized: np.ndarray = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return normalized
