"""Gemini embeddings through google-genai: 768-d vectors, RETRIEVAL_QUERY for queries
and RETRIEVAL_DOCUMENT for passages, up to 100 passages per batch call."""

from __future__ import annotations

from typing import Any

from knowledge_api.embeddings.cloud import CloudEmbedder, Kind
from knowledge_api.registry import import_extra
from knowledge_api.sdk import genai_client

TASK_TYPES = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}


class GeminiEmbedder(CloudEmbedder):
    provider = "gemini"
    key_env = "GOOGLE_GENERATIVE_AI_API_KEY"
    dimension = 768
    batch_size = 100

    def connect(self) -> Any:
        return genai_client(self, httpx_client=self.http)

    def request(self, texts: list[str], kind: Kind) -> list[list[float]]:
        genai = import_extra("google.genai", self.extra)
        response = self.client.models.embed_content(
            model=self.model,
            contents=texts,
            config=genai.types.EmbedContentConfig(
                task_type=TASK_TYPES[kind], output_dimensionality=self.dimension
            ),
        )
        return [embedding.values for embedding in response.embeddings or []]

    def describe(self, error: Exception) -> str:
        genai = import_extra("google.genai", self.extra)
        if isinstance(error, genai.errors.APIError):
            status = " ".join(str(part) for part in (error.code, error.status) if part)
            return f"HTTP {status}: {error.message}"[:300]
        return super().describe(error)
