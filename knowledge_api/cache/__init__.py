"""Where the cache tiers live, chosen by name (KNOWLEDGE_CACHE)."""

from knowledge_api.cache.base import Caches
from knowledge_api.registry import Registry

caches: Registry[Caches] = Registry("cache", "KNOWLEDGE_CACHE")
caches.register("memory", "knowledge_api.cache.memory:MemoryCaches")
caches.register("redis", "knowledge_api.cache.redis:RedisCaches")
