"""Store settings: the backend, the SQLite file and its vector index, the Postgres and
Supabase stores, the Chroma and Qdrant stores."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_api.config.fields import Form, Secret, Twice, setting

MEMORY = r"[1-9][0-9]*\s*(kB|MB|GB|TB)"
"""A memory size as Postgres reads one."""
SIZE = Form("a size such as 512MB or 2GB", lambda value: bool(re.fullmatch(MEMORY, value)))


def collection_prefix(engine: str) -> Any:
    """The setting of the prefix a points store (Chroma, Qdrant) names its collections
    with: both name them alike (stores/records.py `chunk_collection`)."""
    return setting(
        f"KNOWLEDGE_{engine.upper()}_PREFIX",
        "knowledge",
        f"{engine} collection names: <prefix> (documents), <prefix>-<collection> (chunks).",
    )


@dataclass(frozen=True)
class StoreSettings:
    store: str = setting(
        "KNOWLEDGE_STORE", "sqlite", "Store backend: sqlite, postgres, supabase, chroma or qdrant."
    )
    db_path: Path = setting(
        "KNOWLEDGE_DB_PATH", Path("data/knowledge.db"), "SQLite file of the sqlite store."
    )
    ann_min_chunks: int = setting(
        "KNOWLEDGE_ANN_MIN_CHUNKS",
        100_000,
        "Chunks from which the sqlite store searches int8 codes in inverted lists (faiss, "
        "the ann extra) and rescores exactly, instead of a float32 scan; read at start-up.",
        positive=True,
    )
    ann_probes: int = setting(
        "KNOWLEDGE_ANN_PROBES",
        16,
        "Inverted lists a quantised vector search scans (of about sqrt(chunks)); more is "
        "slower and closer to exact.",
        positive=True,
    )
    keyword_matched_chunks: int = setting(
        "KNOWLEDGE_KEYWORD_MATCHED_CHUNKS",
        5000,
        "Chunks a keyword query of the sqlite store ranks at most: its commonest terms are "
        "left out past it; more is slower on large stores and ranks better by keywords.",
        positive=True,
    )
    # -- Postgres and Supabase stores
    database_url: Secret = setting(
        "KNOWLEDGE_DATABASE_URL",
        Secret(""),
        "Postgres URL of the postgres store and of `knowledge-api migrate` "
        "(empty = an embedded Postgres in KNOWLEDGE_POSTGRES_DATA_DIR).",
    )
    database_read_urls: Secret = setting(
        "KNOWLEDGE_DATABASE_READ_URLS",
        Secret(""),
        "Postgres URLs of read replicas of KNOWLEDGE_DATABASE_URL, comma-separated (postgres "
        "store): searches, listings, facets and documents are read there once a replica has "
        "replayed the collection's last write; writes and everything else go to the primary.",
    )
    replica_check_ms: int = setting(
        "KNOWLEDGE_REPLICA_CHECK_MS",
        100,
        "Milliseconds between two readings of each read replica's replay position (a "
        "collection just written is read from the primary until then).",
        positive=True,
    )
    replica_max_lag_ms: int = setting(
        "KNOWLEDGE_REPLICA_MAX_LAG_MS",
        5000,
        "A read replica further behind the primary than this many milliseconds is taken "
        "out of the reads until it catches up.",
        positive=True,
    )
    postgres_data_dir: Path = setting(
        "KNOWLEDGE_POSTGRES_DATA_DIR",
        Path("data/postgres"),
        "Data directory of the embedded Postgres (used when KNOWLEDGE_DATABASE_URL is empty).",
    )
    postgres_pool_size: int = setting(
        "KNOWLEDGE_POSTGRES_POOL_SIZE",
        10,
        "Most connections the postgres store opens.",
        positive=True,
    )
    postgres_ef_search: int = setting(
        "KNOWLEDGE_POSTGRES_EF_SEARCH",
        100,
        "HNSW candidates a vector search keeps (hnsw.ef_search, 1-1000): more finds more of "
        "the true nearest passages, slower (postgres and supabase stores).",
        min=1,
        max=1000,
    )
    postgres_hnsw_m: int = setting(
        "KNOWLEDGE_POSTGRES_HNSW_M",
        16,
        "Links per vector of the HNSW index (2-100), used when the postgres store builds it.",
        min=2,
        max=100,
    )
    postgres_hnsw_ef_construction: int = setting(
        "KNOWLEDGE_POSTGRES_HNSW_EF_CONSTRUCTION",
        64,
        "Candidates kept while the HNSW index is built (at least twice the links, at most 1000).",
        min=Twice("postgres_hnsw_m"),
        max=1000,
    )
    postgres_rebuild_rows: int = setting(
        "KNOWLEDGE_POSTGRES_REBUILD_ROWS",
        10000,
        "A write of at least this many passages, into a table holding no more, builds the HNSW "
        "index once after the load instead of growing it passage by passage.",
        min=0,
    )
    postgres_build_memory: str = setting(
        "KNOWLEDGE_POSTGRES_BUILD_MEMORY",
        "1GB",
        "maintenance_work_mem of the postgres store's HNSW index builds (the graph of the "
        "whole table should fit: about 1 kB per 384-d passage).",
        form=SIZE,
    )
    postgres_shared_buffers: str = setting(
        "KNOWLEDGE_POSTGRES_SHARED_BUFFERS",
        "auto",
        "shared_buffers (page cache) of the embedded Postgres: auto = a quarter of the "
        "machine's memory (or its container's limit), from 128MB to 2GB, or a size such "
        "as 512MB. A server given by KNOWLEDGE_DATABASE_URL keeps its own.",
        choices=("auto",),
        form=SIZE,
    )
    schema_mode: str = setting(
        "KNOWLEDGE_SCHEMA_MODE",
        "own",
        "Tables of the postgres and supabase stores: own (the service's schema), adopted "
        "(an existing database after `knowledge-api migrate --adopt`) or read_only (an "
        "existing database as it is).",
        choices=("own", "adopted", "read_only"),
    )
    supabase_url: str = setting("SUPABASE_URL", "", "Supabase project URL (supabase store).")
    supabase_service_role_key: Secret = setting(
        "SUPABASE_SERVICE_ROLE_KEY", Secret(""), "Service role key of the Supabase project."
    )
    supabase_timeout: float = setting(
        "KNOWLEDGE_SUPABASE_TIMEOUT", 10.0, "Seconds one Supabase request may take.", positive=True
    )
    supabase_retries: int = setting(
        "KNOWLEDGE_SUPABASE_RETRIES",
        3,
        "Retries of a Supabase request after a transient failure (5xx, 429, timeout, network).",
        min=0,
    )
    supabase_backoff: float = setting(
        "KNOWLEDGE_SUPABASE_BACKOFF",
        0.25,
        "Seconds before the first retry; doubles each time.",
        min=0,
    )
    # -- Chroma and Qdrant stores
    chroma_path: Path = setting(
        "KNOWLEDGE_CHROMA_PATH",
        Path("data/chroma"),
        "Folder of the persistent local Chroma client (used when KNOWLEDGE_CHROMA_HOST is empty).",
    )
    chroma_host: str = setting(
        "KNOWLEDGE_CHROMA_HOST", "", "Chroma server host: set it to use the HTTP client."
    )
    chroma_port: int = setting(
        "KNOWLEDGE_CHROMA_PORT", 8000, "Chroma server port.", min=1, max=65535
    )
    chroma_ssl: bool = setting("KNOWLEDGE_CHROMA_SSL", False, "Reach the Chroma server over HTTPS.")
    chroma_token: Secret = setting(
        "KNOWLEDGE_CHROMA_TOKEN", Secret(""), "Bearer token of the Chroma server (if it asks)."
    )
    chroma_prefix: str = collection_prefix("Chroma")
    qdrant_path: str = setting(
        "KNOWLEDGE_QDRANT_PATH",
        "data/qdrant",
        "Folder of local-mode Qdrant, or :memory: (used when KNOWLEDGE_QDRANT_URL is empty).",
    )
    qdrant_url: str = setting(
        "KNOWLEDGE_QDRANT_URL", "", "Qdrant server URL, e.g. http://localhost:6333."
    )
    qdrant_api_key: Secret = setting(
        "KNOWLEDGE_QDRANT_API_KEY", Secret(""), "API key of the Qdrant server."
    )
    qdrant_prefix: str = collection_prefix("Qdrant")
    qdrant_shards: int = setting(
        "KNOWLEDGE_QDRANT_SHARDS",
        0,
        "Shards of each collection the store creates on a Qdrant cluster (0 = the server's "
        "default, one per node).",
        min=0,
    )
    qdrant_replication: int = setting(
        "KNOWLEDGE_QDRANT_REPLICATION",
        0,
        "Copies of each shard on a Qdrant cluster (replication_factor; 0 = the server's "
        "default, 1).",
        min=0,
    )
    qdrant_write_consistency: int = setting(
        "KNOWLEDGE_QDRANT_WRITE_CONSISTENCY",
        0,
        "Replicas that must acknowledge a write before Qdrant answers it "
        "(write_consistency_factor, at most KNOWLEDGE_QDRANT_REPLICATION; 0 = the server's "
        "default, 1).",
        min=0,
    )
    qdrant_read_consistency: str = setting(
        "KNOWLEDGE_QDRANT_READ_CONSISTENCY",
        "",
        "Replicas a Qdrant cluster asks for each read: empty (the server's default, one), "
        "all, majority, quorum or a number of replicas.",
        choices=("", "all", "majority", "quorum"),
        form=Form("a positive number", lambda value: value.isdigit() and int(value) > 0),
    )
    qdrant_fusion: str = setting(
        "KNOWLEDGE_QDRANT_FUSION",
        "auto",
        "auto: Qdrant's own fusion query where it takes our RRF k (local mode, server 1.16+) "
        "and KNOWLEDGE_FUSION is rrf; shared: fuse in the service.",
        choices=("auto", "shared"),
    )
    qdrant_indexed_fields: str = setting(
        "KNOWLEDGE_QDRANT_INDEXED_FIELDS",
        "app_under_test",
        "Comma-separated metadata keys given a Qdrant payload index for filtering.",
    )
