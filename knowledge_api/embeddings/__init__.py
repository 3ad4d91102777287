"""Embedders, chosen by name (KNOWLEDGE_EMBEDDER)."""

from knowledge_api.embeddings.base import Embedder
from knowledge_api.registry import Registry

embedders: Registry[Embedder] = Registry("embedder", "KNOWLEDGE_EMBEDDER")
embedders.register("local", "knowledge_api.embeddings.local:LocalEmbedder")
embedders.register("fake", "knowledge_api.embeddings.fake:FakeEmbedder")
embedders.register("gemini", "knowledge_api.embeddings.gemini:GeminiEmbedder")
embedders.register("cohere", "knowledge_api.embeddings.cohere:CohereEmbedder")
