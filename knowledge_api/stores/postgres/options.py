"""What the `postgres` store is told about running its database, beyond where it is
(KNOWLEDGE_POSTGRES_*, KNOWLEDGE_SCHEMA_MODE): one value, read from the settings once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from knowledge_api.stores.postgres.load import DEFAULT_BUILD, IndexBuild


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """How the store runs its database: connections per pool, how the vector index is
    built, whether the schema is its own, the embedded server's page cache."""

    pool_size: int = 10
    index_build: IndexBuild = DEFAULT_BUILD
    manage_schema: bool = True
    """Apply the service's own migrations on open; off for a database whose tables
    other pipelines own (KNOWLEDGE_SCHEMA_MODE adopted or read_only)."""
    shared_buffers: str = "auto"
    """The embedded server's page cache (KNOWLEDGE_POSTGRES_SHARED_BUFFERS)."""

    @classmethod
    def of(cls, settings: Any) -> PostgresOptions:
        build = IndexBuild(
            m=settings.postgres_hnsw_m,
            ef_construction=settings.postgres_hnsw_ef_construction,
            memory=settings.postgres_build_memory,
            rebuild_rows=settings.postgres_rebuild_rows,
        )
        own = settings.schema_mode == "own"
        return cls(settings.postgres_pool_size, build, own, settings.postgres_shared_buffers)


DEFAULT_OPTIONS = PostgresOptions()
