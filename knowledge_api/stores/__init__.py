"""Store backends, chosen by name (KNOWLEDGE_STORE)."""

from knowledge_api.registry import Registry
from knowledge_api.stores.base import KnowledgeStore

stores: Registry[KnowledgeStore] = Registry("store", "KNOWLEDGE_STORE")
stores.register("sqlite", "knowledge_api.stores.sqlite:SQLiteStore")
