"""Both tiers in this process's memory (KNOWLEDGE_CACHE=memory): each replica its own."""

from __future__ import annotations

from typing import Any

from knowledge_api.cache.base import Caches, Tier


class MemoryCaches(Caches):
    backend = "memory"

    @classmethod
    def from_settings(cls, settings: Any) -> MemoryCaches:
        return cls(
            responses=Tier(settings.response_cache_size, settings.response_cache_ttl),
            embeddings=Tier(settings.embedding_cache_size, settings.embedding_cache_ttl),
        )
