"""Embedders, chosen by name (KNOWLEDGE_EMBEDDER)."""

from knowledge_api.embeddings.base import Embedder
from knowledge_api.registry import Registry

embedders: Registry[Embedder] = Registry("embedder", "KNOWLEDGE_EMBEDDER")
embedders.register("local", "knowledge_api.embeddings.local:LocalEmbedder")
embedders.register("fake", "knowledge_api.embeddings.fake:FakeEmbedder")
