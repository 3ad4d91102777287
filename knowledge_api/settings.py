"""One frozen Settings object, read once from the environment (and `.env`).

Every setting is declared here once: its variable name, default, help text and the
rules its value must follow (settings_fields.py reads and checks them). The
configuration guide is tested against these declarations. Unknown `KNOWLEDGE_*`
variables fail at start-up, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from knowledge_api.settings_fields import Form, Twice, check, parsed, read_env_file, setting, specs
from knowledge_api.validation import COLLECTION_RULE, valid_collection


def is_ratio(value: str) -> bool:
    try:
        return 0 <= float(value) <= 1
    except ValueError:
        return False


MEMORY = r"[1-9][0-9]*\s*(kB|MB|GB|TB)"
ON_OFF = ("on", "off")
SAMPLERS = tuple(
    f"{parent}{name}"
    for parent in ("", "parentbased_")
    for name in ("always_on", "always_off", "traceidratio")
)
"""OTEL_TRACES_SAMPLER's names: the parentbased ones follow the caller's decision first."""
SIZE = Form("a size such as 512MB or 2GB", lambda value: bool(re.fullmatch(MEMORY, value)))
"""A memory size as Postgres reads one."""
RATIO = Form("a number between 0 and 1", is_ratio)
COLLECTION = Form(COLLECTION_RULE.removeprefix("must be "), valid_collection)


class Secret:
    """A string that never shows its value in repr, str or logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Settings:
    host: str = setting("KNOWLEDGE_API_HOST", "127.0.0.1", "Interface the HTTP server binds to.")
    port: int = setting("KNOWLEDGE_API_PORT", 3006, "Port of the HTTP server.", positive=True)
    api_instances: int = setting(
        "KNOWLEDGE_API_INSTANCES",
        2,
        "Processes PM2 runs on the one port (ecosystem.config.cjs); `serve` runs one.",
    )
    log_level: str = setting(
        "KNOWLEDGE_LOG_LEVEL",
        "info",
        "Lowest level of the lines logged.",
        choices=("debug", "info", "warning", "error"),
    )
    log_format: str = setting(
        "KNOWLEDGE_LOG_FORMAT",
        "text",
        "Log lines as text or json (one object per line); info to stdout, warnings to stderr.",
        choices=("text", "json"),
    )
    metrics_token: Secret = setting(
        "KNOWLEDGE_METRICS_TOKEN",
        Secret(""),
        "Bearer token that opens GET /metrics to a scraper (empty = the admin scope only).",
    )
    # -- traces (OpenTelemetry's own variables, read here like every other)
    otel_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "",
        "OTLP/HTTP collector base URL (spans to <url>/v1/traces as protobuf); empty = no "
        "tracing, at no cost.",
    )
    otel_traces_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "",
        "Full URL spans are posted to, in place of OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces.",
    )
    otel_headers: Secret = setting(
        "OTEL_EXPORTER_OTLP_HEADERS",
        Secret(""),
        "Headers of every export, key=value,key=value (a vendor's API key, say).",
    )
    otel_timeout: float = setting(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        10.0,
        "Seconds one export may take, retries included.",
        positive=True,
    )
    otel_service_name: str = setting(
        "OTEL_SERVICE_NAME",
        "",
        "service.name of the spans (empty = service.name of OTEL_RESOURCE_ATTRIBUTES, else "
        "knowledge-api).",
    )
    otel_resource_attributes: str = setting(
        "OTEL_RESOURCE_ATTRIBUTES",
        "",
        "Resource attributes of the spans, key=value,key=value (deployment.environment.name=prod).",
    )
    otel_traces_sampler: str = setting(
        "OTEL_TRACES_SAMPLER",
        "parentbased_always_on",
        "Which traces are kept: always_on, always_off, traceidratio or parentbased_ each "
        "(the caller's decision first).",
        choices=SAMPLERS,
    )
    otel_traces_sampler_arg: str = setting(
        "OTEL_TRACES_SAMPLER_ARG",
        "",
        "Ratio 0-1 of the traceidratio samplers (empty = 1).",
        choices=("",),
        form=RATIO,
    )
    otel_bsp_max_queue_size: int = setting(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        2048,
        "Spans waiting for export at most; past it they are dropped and counted in /metrics.",
        positive=True,
    )
    otel_sdk_disabled: bool = setting(
        "OTEL_SDK_DISABLED", False, "true turns tracing off whatever the endpoint."
    )
    trace_query_text: bool = setting(
        "KNOWLEDGE_TRACE_QUERY_TEXT",
        False,
        "Put the query's text on its spans (knowledge.query.text); off, spans never carry it.",
    )
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
    embedder: str = setting("KNOWLEDGE_EMBEDDER", "local", "Embedder: local (MiniLM) or fake.")
    embedding_precision: str = setting(
        "KNOWLEDGE_EMBEDDING_PRECISION",
        "auto",
        "Local model precision: auto (bf16 on OpenVINO where the CPU has bf16 matrix units, "
        "amx_bf16 or avx512_bf16, else fp32), fp32, bf16 (fp32 where the CPU cannot) or int8 "
        "(dynamic quantisation of the attention blocks, on ONNX Runtime: the int8 extra).",
        choices=("auto", "fp32", "bf16", "int8"),
    )
    embedding_batch_size: int = setting(
        "KNOWLEDGE_EMBEDDING_BATCH_SIZE",
        16,
        "Passages per forward pass when ingesting.",
        positive=True,
    )
    embedding_threads: int = setting(
        "KNOWLEDGE_EMBEDDING_THREADS",
        0,
        "Cores the local model uses (0 = all): as many inference streams of one thread "
        "each; an ingestion batch runs on each stream at once, a query on one.",
    )
    query_batch_window_ms: float = setting(
        "KNOWLEDGE_QUERY_BATCH_WINDOW_MS",
        0.0,
        "Milliseconds a query embedding waits for others to join its batch when the model "
        "is idle (0 = none: queries that arrive while the model is busy batch anyway).",
        min=0,
    )
    query_batch_size: int = setting(
        "KNOWLEDGE_QUERY_BATCH_SIZE",
        32,
        "Most concurrent queries embedded in one pass.",
        positive=True,
    )
    query_queue_size: int = setting(
        "KNOWLEDGE_QUERY_QUEUE_SIZE",
        512,
        "Most queries waiting for the embedding model; past it, 503 overloaded with Retry-After.",
        positive=True,
    )
    model_cache_dir: str = setting(
        "KNOWLEDGE_MODEL_CACHE_DIR",
        "",
        "Where the local model's built ONNX files are kept; empty = ~/.cache/knowledge-api/models "
        "(under $XDG_CACHE_HOME when set).",
    )
    synthesizer: str = setting(
        "KNOWLEDGE_SYNTHESIZER",
        "gemini,groq,extractive",
        "Synthesis chain, tried in order; extractive (offline) is always the last link.",
    )
    response_cache_ttl: float = setting(
        "KNOWLEDGE_RESPONSE_CACHE_TTL", 43200.0, "Seconds a cached response lives (tier 1)."
    )
    response_cache_size: int = setting(
        "KNOWLEDGE_RESPONSE_CACHE_SIZE", 10000, "Most responses kept in tier 1.", positive=True
    )
    embedding_cache_ttl: float = setting(
        "KNOWLEDGE_EMBEDDING_CACHE_TTL", 86400.0, "Seconds a cached query embedding lives (tier 2)."
    )
    embedding_cache_size: int = setting(
        "KNOWLEDGE_EMBEDDING_CACHE_SIZE",
        50000,
        "Most query embeddings kept in tier 2.",
        positive=True,
    )
    cache: str = setting(
        "KNOWLEDGE_CACHE",
        "memory",
        "Where both cache tiers live: memory (each process its own) or redis (shared by "
        "every replica, a small in-process tier in front).",
        choices=("memory", "redis"),
        requires={"redis": "redis_url"},
    )
    redis_url: Secret = setting(
        "KNOWLEDGE_REDIS_URL",
        Secret("redis://127.0.0.1:6379/0"),
        "Redis of KNOWLEDGE_CACHE=redis (redis://[:password@]host:port/db).",
    )
    redis_prefix: str = setting(
        "KNOWLEDGE_REDIS_PREFIX",
        "knowledge:",
        "Prefix of every Redis key: one per deployment (per store) sharing a Redis.",
    )
    fusion_k: int = setting(
        "KNOWLEDGE_FUSION_K",
        60,
        "k of reciprocal-rank fusion (KNOWLEDGE_FUSION=rrf, and the feedback step); "
        "higher flattens rank weights.",
        positive=True,
    )
    candidates: int = setting(
        "KNOWLEDGE_CANDIDATES",
        50,
        "Hits each retriever (vector, keyword) hands to fusion.",
        positive=True,
    )
    feedback_docs: int = setting(
        "KNOWLEDGE_FEEDBACK_DOCS",
        3,
        "Best hybrid hits whose vectors refine the query (pseudo-relevance feedback); "
        "0 turns the second vector search off.",
        min=0,
    )
    feedback_weight: float = setting(
        "KNOWLEDGE_FEEDBACK_WEIGHT",
        2.0,
        "How far feedback moves the query vector toward the mean of those hits.",
        min=0,
    )
    feedback_rank_weight: float = setting(
        "KNOWLEDGE_FEEDBACK_RANK_WEIGHT",
        3.0,
        "Weight of the refined query's ranking against the first fused ranking.",
        min=0,
    )
    fusion: str = setting(
        "KNOWLEDGE_FUSION",
        "convex",
        "How hybrid search merges its two lists: convex (weighted sum of cosine and "
        "relative keyword score) or rrf (reciprocal ranks).",
        choices=("convex", "rrf"),
    )
    vector_weight: float = setting(
        "KNOWLEDGE_VECTOR_WEIGHT",
        0.8,
        "Share of the cosine in convex fusion (0-1); the keyword score has the rest.",
        min=0,
        max=1,
    )
    reranker: str = setting(
        "KNOWLEDGE_RERANKER",
        "none",
        "Reranking after fusion: none, cross-encoder (a local model), cohere (Cohere Rerank) "
        "or llm (the first available LLM link of the synthesis chain).",
    )
    rerank_top: int = setting(
        "KNOWLEDGE_RERANK_TOP",
        20,
        "Fused hits the reranker orders; the hits after them keep their fused order.",
        positive=True,
    )
    rerank_model: str = setting(
        "KNOWLEDGE_RERANK_MODEL",
        "",
        "cross-encoder: a local folder or a model id (fetched where the machine may download; "
        "default cross-encoder/ms-marco-MiniLM-L6-v2); cohere: its rerank model (default "
        "rerank-v3.5). Empty = the backend's default.",
    )
    rerank_timeout: float = setting(
        "KNOWLEDGE_RERANK_TIMEOUT",
        5.0,
        "Seconds a cohere or llm reranking may take before the fused order is kept.",
        positive=True,
    )
    rewrite_timeout: float = setting(
        "KNOWLEDGE_REWRITE_TIMEOUT",
        2.0,
        "Seconds the LLM rewrite of a chat follow-up into a standalone question may take "
        "before the offline rewrite is searched (and the response says so).",
        positive=True,
    )
    routing: str = setting(
        "KNOWLEDGE_ROUTING",
        "off",
        "Semantic routing of /v1/knowledge/query: on searches only the sources a query "
        "needs (cue words, closeness to each source's centroid); off searches every source.",
        choices=ON_OFF,
    )
    routing_margin: float = setting(
        "KNOWLEDGE_ROUTING_MARGIN",
        0.2,
        "Routing keeps every source whose centroid cosine is within this of the best "
        "one (0-1; larger keeps more).",
        min=0,
        max=1,
    )
    prefetch: str = setting(
        "KNOWLEDGE_PREFETCH",
        "off",
        "on: after a query, answer its likely follow-ups (what users asked next, the "
        "titles of its sources) in the background to warm the caches; off: never.",
        choices=ON_OFF,
    )
    prefetch_per_minute: int = setting(
        "KNOWLEDGE_PREFETCH_PER_MINUTE",
        30,
        "Most follow-up queries prefetched per minute.",
        positive=True,
    )
    prefetch_concurrent: int = setting(
        "KNOWLEDGE_PREFETCH_CONCURRENT",
        1,
        "Most follow-up queries prefetched at once.",
        positive=True,
    )
    prefetch_followups: int = setting(
        "KNOWLEDGE_PREFETCH_FOLLOWUPS",
        3,
        "Most follow-ups predicted after one query.",
        positive=True,
    )
    audit_days: int = setting(
        "KNOWLEDGE_AUDIT_DAYS", 90, "Days the audit trail of writes is kept (0 = for ever).", min=0
    )
    max_body_bytes: int = setting(
        "KNOWLEDGE_MAX_BODY_BYTES",
        65536,
        "Largest request body accepted (413 above); POST /v1/knowledge/documents also "
        "takes a document of the largest content on top of it.",
        positive=True,
    )
    max_file_mb: int = setting(
        "KNOWLEDGE_MAX_FILE_MB",
        50,
        "Largest file of an upload (POST /v1/knowledge/files), in MB; a larger one is an "
        "error of its job, the other files are indexed.",
        positive=True,
    )
    upload_dir: str = setting(
        "KNOWLEDGE_UPLOAD_DIR",
        "",
        "Folder where uploaded files wait for their job (empty: `uploads` beside "
        "KNOWLEDGE_DB_PATH); a restarted service resumes the jobs whose files are there.",
    )
    body_timeout: float = setting(
        "KNOWLEDGE_BODY_TIMEOUT",
        10.0,
        "Seconds a client may take to send a request body (408 past it).",
        positive=True,
    )
    header_timeout: float = setting(
        "KNOWLEDGE_HEADER_TIMEOUT",
        10.0,
        "Seconds a connection may take to send a request's complete headers (the first "
        "request's or the next one's after a response); past it the connection is closed.",
        positive=True,
    )
    keep_alive_timeout: int = setting(
        "KNOWLEDGE_KEEP_ALIVE_TIMEOUT",
        5,
        "Seconds an idle keep-alive connection stays open waiting for its next request.",
        positive=True,
    )
    max_streams: int = setting(
        "KNOWLEDGE_MAX_STREAMS",
        64,
        "Most streamed answers (Server-Sent Events, /mcp streams) one process serves at "
        "once; past it: 503 with Retry-After.",
        positive=True,
    )
    stream_lifetime: float = setting(
        "KNOWLEDGE_STREAM_LIFETIME",
        300.0,
        "Seconds one streamed answer (Server-Sent Events, an /mcp stream) may stay open; "
        "past it the stream ends.",
        positive=True,
    )
    auth: str = setting(
        "KNOWLEDGE_AUTH",
        "auto",
        "keys (every route but /livez, /readyz and a minimal /health needs an API key), off, "
        "or auto: off when the service binds a loopback address, keys otherwise.",
        choices=("auto", "keys", "off"),
    )
    rate_limit: int = setting(
        "KNOWLEDGE_RATE_LIMIT",
        0,
        "Requests per minute each API key (or client address, without keys) may make; "
        "0 = no limit. Past it: 429 with Retry-After.",
        min=0,
    )
    cors_origins: str = setting(
        "KNOWLEDGE_CORS_ORIGINS",
        "",
        "Comma-separated origins a browser may call from (* for any); empty = no CORS.",
    )
    mcp_max_chars: int = setting(
        "KNOWLEDGE_MCP_MAX_CHARS",
        20000,
        "Most characters one MCP tool result returns; a longer one says which offset "
        "gets the rest.",
        min=1000,
    )
    allowed_hosts: str = setting(
        "KNOWLEDGE_ALLOWED_HOSTS",
        "",
        "Comma-separated host names every route answers to besides localhost, IP addresses "
        "and the bound host (DNS-rebinding protection: 421 for any other Host), e.g. "
        "kb.example.com; * = any. KNOWLEDGE_MCP_ALLOWED_HOSTS is read when it is unset.",
        aliases=("KNOWLEDGE_MCP_ALLOWED_HOSTS",),
    )
    mcp_allowed_origins: str = setting(
        "KNOWLEDGE_MCP_ALLOWED_ORIGINS",
        "",
        "Comma-separated browser origins /mcp accepts besides localhost and the bound host.",
    )
    seed_path: str = setting(
        "KNOWLEDGE_SEED_PATH",
        "",
        "Documents ingested on first start when the store is empty (empty = bundled docs).",
    )
    seed_on_empty: bool = setting(
        "KNOWLEDGE_SEED_ON_EMPTY", True, "Ingest the seed documents when the store is empty."
    )
    # -- Postgres and Supabase stores
    database_url: Secret = setting(
        "KNOWLEDGE_DATABASE_URL",
        Secret(""),
        "Postgres URL of the postgres store and of `knowledge-api migrate` "
        "(empty = an embedded Postgres in KNOWLEDGE_POSTGRES_DATA_DIR).",
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
    chroma_prefix: str = setting(
        "KNOWLEDGE_CHROMA_PREFIX",
        "knowledge",
        "Chroma collection names: <prefix> (documents), <prefix>-<collection> (chunks).",
    )
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
    qdrant_prefix: str = setting(
        "KNOWLEDGE_QDRANT_PREFIX",
        "knowledge",
        "Qdrant collection names: <prefix> (documents), <prefix>-<collection> (chunks).",
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
    # -- LLM providers and cloud embedders
    gemini_api_key: Secret = setting(
        "GOOGLE_GENERATIVE_AI_API_KEY", Secret(""), "Gemini API key (synthesis, gemini embedder)."
    )
    groq_api_key: Secret = setting("GROQ_API_KEY", Secret(""), "Groq API key (synthesis).")
    cohere_api_key: Secret = setting(
        "COHERE_API_KEY", Secret(""), "Cohere API key (cohere embedder and reranker)."
    )
    gemini_base_url: str = setting(
        "KNOWLEDGE_GEMINI_BASE_URL",
        "https://generativelanguage.googleapis.com",
        "Gemini API endpoint (a proxy, gateway or regional endpoint).",
    )
    groq_base_url: str = setting(
        "KNOWLEDGE_GROQ_BASE_URL", "https://api.groq.com", "Groq API endpoint."
    )
    cohere_base_url: str = setting(
        "KNOWLEDGE_COHERE_BASE_URL", "https://api.cohere.com", "Cohere API endpoint."
    )
    gemini_model: str = setting(
        "KNOWLEDGE_GEMINI_MODEL", "gemini-2.0-flash", "Gemini model that writes answers."
    )
    groq_model: str = setting(
        "KNOWLEDGE_GROQ_MODEL", "llama-3.3-70b-versatile", "Groq model that writes answers."
    )
    gemini_timeout: float = setting(
        "KNOWLEDGE_GEMINI_TIMEOUT",
        5.0,
        "Seconds Gemini may take to its first token, and between tokens, before the chain "
        "moves on.",
        positive=True,
    )
    groq_timeout: float = setting(
        "KNOWLEDGE_GROQ_TIMEOUT", 5.0, "The same limit for Groq.", positive=True
    )
    gemini_max_tokens: int = setting(
        "KNOWLEDGE_GEMINI_MAX_TOKENS", 500, "Most output tokens of a Gemini answer.", positive=True
    )
    groq_max_tokens: int = setting(
        "KNOWLEDGE_GROQ_MAX_TOKENS", 500, "Most output tokens of a Groq answer.", positive=True
    )
    llm_temperature: float = setting(
        "KNOWLEDGE_LLM_TEMPERATURE",
        0.3,
        "Sampling temperature of the LLM links (0-2).",
        min=0,
        max=2,
    )
    llm_context_chars: int = setting(
        "KNOWLEDGE_LLM_CONTEXT_CHARS",
        6400,
        "Most characters of results an answer is written from (the citable passages).",
        positive=True,
    )
    llm_subject: str = setting(
        "KNOWLEDGE_LLM_SUBJECT",
        "AOMA (Asset and Offering Management Application)",
        "What the prompt says the assistant helps with.",
    )
    gemini_embedding_model: str = setting(
        "KNOWLEDGE_GEMINI_EMBEDDING_MODEL",
        "gemini-embedding-001",
        "Model of the gemini embedder (768-d vectors).",
    )
    cohere_embedding_model: str = setting(
        "KNOWLEDGE_COHERE_EMBEDDING_MODEL",
        "embed-english-v3.0",
        "Model of the cohere embedder (1024-d vectors).",
    )
    cloud_embedding_timeout: float = setting(
        "KNOWLEDGE_CLOUD_EMBEDDING_TIMEOUT",
        30.0,
        "Seconds one request of the gemini or cohere embedder may take.",
        positive=True,
    )
    synthesis_deadline: float = setting(
        "KNOWLEDGE_SYNTHESIS_DEADLINE",
        15.0,
        "Seconds the LLM links may take for a whole answer, together; past it the chain "
        "moves on to the offline link (and says so in warnings).",
        positive=True,
    )
    llm_breaker_failures: int = setting(
        "KNOWLEDGE_LLM_BREAKER_FAILURES",
        3,
        "Failures in a row after which an LLM provider's circuit opens: it is skipped "
        "without a call for KNOWLEDGE_LLM_BREAKER_COOLDOWN seconds (0 = never).",
        min=0,
    )
    llm_breaker_cooldown: float = setting(
        "KNOWLEDGE_LLM_BREAKER_COOLDOWN",
        30.0,
        "Seconds an open circuit skips its provider before one request tries it again.",
        positive=True,
    )
    answer_threshold: str = setting(
        "KNOWLEDGE_ANSWER_THRESHOLD",
        "auto",
        "Default similarity a passage needs to ground an answer (POST /v1/knowledge/answer): "
        "a number 0-1, or auto for the embedder's own (0.4 for the local model, 0.7 otherwise).",
        choices=("auto",),
        form=RATIO,
    )
    # -- support retrieval and KB sync
    support_collection: str = setting(
        "KNOWLEDGE_SUPPORT_COLLECTION",
        "support",
        "Collection KB articles are synced into and support retrieval searches.",
        form=COLLECTION,
    )
    support_timeout_ms: float = setting(
        "KNOWLEDGE_SUPPORT_TIMEOUT_MS",
        100.0,
        "Budget of one support retrieval; past it the fallback answer is returned.",
        positive=True,
    )
    support_min_score: float = setting(
        "KNOWLEDGE_SUPPORT_MIN_SCORE",
        0.7,
        "Lowest relevance_score of a consulted source.",
        min=0,
        max=1,
    )
    support_high_score: float = setting(
        "KNOWLEDGE_SUPPORT_HIGH_SCORE",
        0.8,
        "Coverage is high when a source for the intent and product scores at least this.",
        min=0,
        max=1,
    )
    support_related_score: float = setting(
        "KNOWLEDGE_SUPPORT_RELATED_SCORE",
        0.5,
        "With no source, coverage is low (not none) when the best article scores at least this.",
        min=0,
        max=1,
    )
    support_intent_boost: float = setting(
        "KNOWLEDGE_SUPPORT_INTENT_BOOST",
        0.1,
        "Added to the relevance of an article tagged with the request's intent.",
        min=0,
        max=1,
    )
    support_device_boost: float = setting(
        "KNOWLEDGE_SUPPORT_DEVICE_BOOST",
        0.05,
        "Added to the relevance of an article tagged with the request's product.",
        min=0,
        max=1,
    )
    kb_sync_url: str = setting(
        "KNOWLEDGE_KB_SYNC_URL",
        "",
        "Base URL of the host serving GET /api/kb/articles (empty = no periodic sync).",
    )
    kb_sync_token: Secret = setting(
        "KNOWLEDGE_KB_SYNC_TOKEN", Secret(""), "Bearer token sent to the host KB API, if needed."
    )
    kb_sync_interval: float = setting(
        "KNOWLEDGE_KB_SYNC_INTERVAL",
        900.0,
        "Seconds between the service's incremental syncs.",
        positive=True,
    )
    kb_sync_full_every: int = setting(
        "KNOWLEDGE_KB_SYNC_FULL_EVERY",
        24,
        "Every Nth periodic sync is full (also removes articles gone from the host).",
        positive=True,
    )
    prune_max_fraction: float = setting(
        "KNOWLEDGE_PRUNE_MAX_FRACTION",
        0.5,
        "A mirror (ingest --prune, a full KB sync) deleting more than this share of a "
        "source's documents stops unless told to (--allow-mass-delete).",
        min=0,
        max=1,
    )
    kb_sync_page_size: int = setting(
        "KNOWLEDGE_KB_SYNC_PAGE_SIZE",
        100,
        "Articles asked for per page (the `limit` parameter).",
        min=1,
        max=1000,
    )
    kb_sync_timeout: float = setting(
        "KNOWLEDGE_KB_SYNC_TIMEOUT",
        10.0,
        "Seconds one request to the host may take.",
        positive=True,
    )
    validate_min_similarity: float = setting(
        "KNOWLEDGE_VALIDATE_MIN_SIMILARITY",
        0.3,
        "POST /validate: a query's results are relevant when the best similarity reaches this.",
        min=0,
        max=1,
    )
    validate_pass_score: float = setting(
        "KNOWLEDGE_VALIDATE_PASS_SCORE",
        0.7,
        "POST /validate: overall score needed to pass.",
        min=0,
        max=1,
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, env_file: str | Path | None = ".env"
    ) -> Settings:
        """Settings from `environ` (default os.environ) over the values of `env_file`."""
        values = dict(read_env_file(env_file)) if env_file else {}
        values.update(os.environ if environ is None else environ)
        settings = cls(**parsed(fields(cls), values))
        settings.validate()
        return settings

    def validate(self) -> None:
        """Hold every value to the rules declared with its setting."""
        check(self, fields(self))

    @property
    def uploads_path(self) -> Path:
        """KNOWLEDGE_UPLOAD_DIR, or `uploads` beside the SQLite file."""
        return Path(self.upload_dir) if self.upload_dir else self.db_path.parent / "uploads"

    def secrets(self) -> list[str]:
        """Every configured secret value (and the password inside the database URL). A
        value left at its documented default (the local Redis address) is no secret:
        masking it would only cost every response a search for it."""
        values = [
            getattr(self, f.name).get()
            for f in fields(self)
            if f.type == "Secret" and getattr(self, f.name) != f.default
        ]
        password = urlsplit(self.database_url.get()).password
        return [value for value in [*values, password or ""] if value]

    @cached_property
    def auth_required(self) -> bool:
        """Whether requests need an API key: KNOWLEDGE_AUTH, where auto means keys unless
        the service binds a loopback address only."""
        if self.auth == "auto":
            return not is_loopback(self.host)
        return self.auth == "keys"

    def replace(self, **changes: Any) -> Settings:
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        return Settings(**{**current, **changes})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def declared() -> list[tuple[str, Any, str]]:
    """(variable, default, help) of every setting, in declaration order."""
    return [(spec.env, f.default, spec.help) for f, spec in specs(fields(Settings))]
