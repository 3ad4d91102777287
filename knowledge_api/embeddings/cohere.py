"""Cohere embeddings through the cohere SDK (v2 embed): embed-english-v3.0, 1024-d,
input_type search_query for queries and search_document for passages, up to 96
passages per call."""

from __future__ import annotations

from typing import Any

from knowledge_api.embeddings.cloud import CloudEmbedder, Kind
from knowledge_api.registry import import_extra
from knowledge_api.sdk import cohere_failure, sdk_client

INPUT_TYPES = {"query": "search_query", "document": "search_document"}


class CohereEmbedder(CloudEmbedder):
    provider = "cohere"
    key_env = "COHERE_API_KEY"
    dimension = 1024
    batch_size = 96

    def connect(self) -> Any:
        cohere = import_extra("cohere", self.extra)
        return sdk_client(
            cohere.ClientV2, self, httpx_client=self.http, log_warning_experimental_features=False
        )

    def request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        response = self.client.embed(
            texts=texts,
            model=self.model,
            input_type=INPUT_TYPES[kind],
            embedding_types=["float"],
        )
        return list(response.embeddings.float_ or [])

    def describe(self, error: Exception) -> str:
        api_error = import_extra("cohere.core.api_error", self.extra).ApiError
        if isinstance(error, api_error):
            return cohere_failure(error)
        return super().describe(error)
