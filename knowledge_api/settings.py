"""One frozen Settings object, read once from the environment (and `.env`).

Every setting is declared once, with its variable name, default, help text and the
rules its value must follow: the service's own here, the other concepts' in `config/`
(traces, stores, providers, support), whose groups are the bases of `Settings`;
`config/fields.py` reads and checks them. The configuration guide is tested against
these declarations. Unknown `KNOWLEDGE_*` variables fail at start-up, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from knowledge_api.config.fields import (
    Form,
    Secret,
    check,
    parsed,
    read_env_file,
    setting,
    specs,
)
from knowledge_api.config.providers import ProviderSettings
from knowledge_api.config.stores import StoreSettings
from knowledge_api.config.support import SupportSettings
from knowledge_api.config.traces import TraceSettings

ON_OFF = ("on", "off")
KPI_ROLES = ("metric", "period", "value", "description", "unit", "owner", "formula", "query")


def column_roles(text: str) -> dict[str, str] | None:
    """`ROLE=COLUMN` pairs separated by commas as {role: column in lower case}; None
    when a pair is malformed or names a role twice or one that is not a KPI role."""
    roles: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        role, sep, column = (item.strip().lower() for item in pair.partition("="))
        if not sep or role not in KPI_ROLES or not column or role in roles:
            return None
        roles[role] = column
    return roles


KPI_COLUMNS = Form(
    f"ROLE=COLUMN pairs separated by commas, each ROLE once, one of {', '.join(KPI_ROLES)}",
    lambda value: column_roles(value) is not None,
)


@dataclass(frozen=True)
class Settings(ProviderSettings, SupportSettings, StoreSettings, TraceSettings):
    """The service, its embedding, cache and search settings; each base holds a concept's."""

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
    max_chat_bytes: int = setting(
        "KNOWLEDGE_MAX_CHAT_BYTES",
        1048576,
        "Largest body of the chat routes (POST /v1/chat, /v1/chat/completions), which "
        "resend the whole conversation (413 above); only its latest turns are read.",
        positive=True,
    )
    max_file_mb: int = setting(
        "KNOWLEDGE_MAX_FILE_MB",
        50,
        "Largest file of an upload (POST /v1/knowledge/files), in MB; a larger one is an "
        "error of its job, the other files are indexed. Also the largest attachment of an "
        "e-mail read by ingest or an upload.",
        positive=True,
    )
    kpi_columns: str = setting(
        "KNOWLEDGE_KPI_COLUMNS",
        "",
        "Columns of KPI files (CSV, JSON lines, Excel) named otherwise than their role, "
        "as ROLE=COLUMN pairs (metric=kpi,period=month,value=amount); a role not named "
        "is read from the column of its own name.",
        form=KPI_COLUMNS,
    )
    max_file_chars: int = setting(
        "KNOWLEDGE_MAX_FILE_CHARS",
        4_000_000,
        "Most characters of text one file (uploaded or ingested) may hold, each paragraph "
        "counting its line break; a file past it is an error of its own, read no further.",
        positive=True,
    )
    max_file_passages: int = setting(
        "KNOWLEDGE_MAX_FILE_PASSAGES",
        10_000,
        "Most passages one uploaded file may make; a file past it is an error of its job.",
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
        "Seconds a client may take to send a request body (408 past it); an upload's "
        "body gets this long plus the time KNOWLEDGE_UPLOAD_MIN_RATE allows what it sent.",
        positive=True,
    )
    upload_min_rate: int = setting(
        "KNOWLEDGE_UPLOAD_MIN_RATE",
        64,
        "Slowest an upload's body may arrive, in KiB/s on average after its first "
        "KNOWLEDGE_BODY_TIMEOUT seconds (408 past it).",
        positive=True,
    )
    max_uploads: int = setting(
        "KNOWLEDGE_MAX_UPLOADS",
        16,
        "Most uploads one process receives at once; past it: 429 with Retry-After.",
        positive=True,
    )
    max_uploads_per_key: int = setting(
        "KNOWLEDGE_MAX_UPLOADS_PER_KEY",
        4,
        "Most uploads one API key (one client address, without keys) sends at once; "
        "past it: 429 with Retry-After.",
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
    ratings_per_minute: int = setting(
        "KNOWLEDGE_RATINGS_PER_MINUTE",
        20,
        "Ratings (POST /v1/knowledge/feedback) each API key (or client address, without "
        "keys) may send a minute, per process; 0 = no limit. Past it: 429 with Retry-After.",
        min=0,
    )
    cors_origins: str = setting(
        "KNOWLEDGE_CORS_ORIGINS",
        "",
        "Comma-separated origins a browser may call from (* for any); empty = no CORS. "
        "A write from a page of an origin neither listed nor the service's own: 403.",
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
