"""A deterministic embedder for fast tests: signed feature hashing of word stems.

Texts sharing words get similar vectors, so ranking tests mean something, and the
same text always gives the same vector, on any machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from knowledge_api import text
from knowledge_api.embeddings.base import BatchEmbedder, normalize_rows


class FakeEmbedder(BatchEmbedder):
    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.name = f"fake:hash-{dimension}"
        self.calls = 0
        self.texts_embedded = 0

    @classmethod
    def from_settings(cls, settings: Any) -> FakeEmbedder:
        return cls()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries and passages are embedded alike: one call for the whole batch."""
        return self.embed_batch(texts)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts_embedded += len(texts)
        matrix = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, passage in enumerate(texts):
            for word in text.words(passage) or [""]:
                digest = hashlib.blake2b(text.stem(word).encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimension
                matrix[row, bucket] += 1.0 if digest[4] & 1 else -1.0
        return normalize_rows(matrix)
