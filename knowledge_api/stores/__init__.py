"""Store backends, chosen by name (KNOWLEDGE_STORE)."""

from knowledge_api.registry import Registry
from knowledge_api.stores.base import KnowledgeStore

stores: Registry[KnowledgeStore] = Registry("store", "KNOWLEDGE_STORE")
stores.register("sqlite", "knowledge_api.stores.sqlite.store:SQLiteStore")
stores.register("postgres", "knowledge_api.stores.postgres.store:PostgresStore")
stores.register("supabase", "knowledge_api.stores.postgres.supabase:SupabaseStore")
stores.register("chroma", "knowledge_api.stores.points.chroma:ChromaStore")
stores.register("qdrant", "knowledge_api.stores.points.qdrant:QdrantStore")
