"""What the cloud embedders (gemini, cohere) share: the key, the SDK client, task types
(a query and a passage are embedded differently), error reporting and health.

Their calls are synchronous and run on the service's model thread like the local
model's; batching is BatchEmbedder's. The SDKs do not retry: a failed query embedding
degrades that query to keyword search (with a warning), a failed ingestion batch
fails the ingestion, which can simply be run again (unchanged documents are skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from knowledge_api.embeddings.base import BatchEmbedder, normalize_rows
from knowledge_api.errors import ConfigurationError, EmbeddingError
from knowledge_api.registry import import_extra

Kind = Literal["query", "document"]


class CloudEmbedder(BatchEmbedder):
    provider = "cloud"
    """Names the provider's extra and its settings: `<provider>_api_key`,
    `<provider>_embedding_model`, `<provider>_base_url`."""
    key_env = ""
    extra = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.extra = cls.provider
        fields = ("api_key", "embedding_model", "base_url")
        cls.settings_fields = " ".join(
            [*(f"{cls.provider}_{field}" for field in fields), "cloud_embedding_timeout"]
        )

    def __init__(self, api_key: Any, model: str, base_url: str, timeout: float) -> None:
        self.api_key = api_key
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.name = f"{self.provider}:{model}"
        self.client: Any = None
        self.http: Any = None
        """The httpx client the SDK sends through, opened with it."""
        self.error = ""
        self.failure = ""

    def load(self) -> None:
        if self.client is not None:
            return
        if not self.api_key:
            self.error = f"missing key: set {self.key_env}"
            raise EmbeddingError(f"the {self.provider} embedder has no key: set {self.key_env}")
        try:
            self.http = import_extra("httpx", self.extra).Client(timeout=self.timeout)
            self.client = self.connect()
        except ConfigurationError as e:
            self.error = e.message
            raise EmbeddingError(e.message) from e

    def connect(self) -> Any:
        """The SDK client, sending through `self.http`; raises ConfigurationError when
        the SDK is not installed."""
        raise NotImplementedError

    def request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        """One API call: a vector per text."""
        raise NotImplementedError

    def describe(self, error: Exception) -> str:
        if isinstance(error, ValueError):  # JSON or schema errors of the response body
            return f"malformed response: {type(error).__name__}: {error}"[:300]
        return f"{type(error).__name__}: {error}"[:300]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts, "document")

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text], "query")[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts, "query")

    def embed(self, texts: Sequence[str], kind: Kind) -> np.ndarray:
        if self.client is None:
            raise EmbeddingError(f"{self.name} is not loaded: {self.error or 'no client'}")
        try:
            matrix = np.asarray(self.request(list(texts), kind), dtype=np.float32)
        except Exception as e:
            self.failure = self.describe(e)
            raise EmbeddingError(f"{self.provider} embedding failed: {self.failure}") from e
        if matrix.shape != (len(texts), self.dimension):
            self.failure = f"malformed response: {matrix.shape} for {len(texts)} texts"
            raise EmbeddingError(f"{self.provider} embedding failed: {self.failure}")
        self.failure = ""
        return normalize_rows(matrix)

    def health(self) -> dict[str, Any]:
        if self.client is None:
            status = "missing_key" if not self.api_key else "failing"
        else:
            status = "failing" if self.failure else "ok"
        report = {
            "name": self.provider,
            "model": self.model,
            "dimension": self.dimension,
            "status": status,
            "key": self.key_env,
        }
        if self.error or self.failure:
            report["error"] = self.failure or self.error
        return report
