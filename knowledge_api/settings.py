"""One frozen Settings object, read once from the environment (and `.env`).

Every setting is declared here with its variable name, default and help text; the
README's configuration table is checked against these declarations by a test.
Unknown `KNOWLEDGE_*` variables fail at start-up, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from knowledge_api.errors import ConfigurationError

ENV_PREFIX = "KNOWLEDGE_"


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


def setting(env: str, default: Any, help: str) -> Any:
    return field(default=default, metadata={"env": env, "help": help})


@dataclass(frozen=True)
class Settings:
    host: str = setting("KNOWLEDGE_API_HOST", "127.0.0.1", "Interface the HTTP server binds to.")
    port: int = setting("KNOWLEDGE_API_PORT", 3006, "Port of the HTTP server.")
    log_level: str = setting("KNOWLEDGE_LOG_LEVEL", "info", "debug, info, warning or error.")
    store: str = setting("KNOWLEDGE_STORE", "sqlite", "Store backend: sqlite.")
    db_path: Path = setting(
        "KNOWLEDGE_DB_PATH", Path("data/knowledge.db"), "SQLite file of the sqlite store."
    )
    embedder: str = setting("KNOWLEDGE_EMBEDDER", "local", "Embedder: local (MiniLM) or fake.")
    embedding_precision: str = setting(
        "KNOWLEDGE_EMBEDDING_PRECISION",
        "auto",
        "Local model precision: auto (bf16 where the CPU has native bf16), bf16 or fp32.",
    )
    embedding_batch_size: int = setting(
        "KNOWLEDGE_EMBEDDING_BATCH_SIZE", 16, "Passages per forward pass when ingesting."
    )
    embedding_threads: int = setting(
        "KNOWLEDGE_EMBEDDING_THREADS", 0, "Torch threads for the local model (0 = all cores)."
    )
    synthesizer: str = setting("KNOWLEDGE_SYNTHESIZER", "extractive", "Synthesizer: extractive.")
    response_cache_ttl: float = setting(
        "KNOWLEDGE_RESPONSE_CACHE_TTL", 43200.0, "Seconds a cached response lives (tier 1)."
    )
    response_cache_size: int = setting(
        "KNOWLEDGE_RESPONSE_CACHE_SIZE", 10000, "Most responses kept in tier 1."
    )
    embedding_cache_ttl: float = setting(
        "KNOWLEDGE_EMBEDDING_CACHE_TTL", 86400.0, "Seconds a cached query embedding lives (tier 2)."
    )
    embedding_cache_size: int = setting(
        "KNOWLEDGE_EMBEDDING_CACHE_SIZE", 50000, "Most query embeddings kept in tier 2."
    )
    fusion_k: int = setting(
        "KNOWLEDGE_FUSION_K", 60, "k of reciprocal-rank fusion (higher flattens rank weights)."
    )
    candidates: int = setting(
        "KNOWLEDGE_CANDIDATES", 50, "Hits each retriever (vector, keyword) hands to fusion."
    )
    max_body_bytes: int = setting(
        "KNOWLEDGE_MAX_BODY_BYTES", 65536, "Largest request body accepted (413 above)."
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
    # -- Chroma and Qdrant stores
    # -- LLM providers and cloud embedders
    # -- support retrieval and KB sync

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, env_file: str | Path | None = ".env"
    ) -> Settings:
        """Settings from `environ` (default os.environ) over the values of `env_file`."""
        values = dict(read_env_file(env_file)) if env_file else {}
        values.update(os.environ if environ is None else environ)
        reject_unknown(values)
        kwargs = {}
        for f in fields(cls):
            env = f.metadata["env"]
            if env in values:
                kwargs[f.name] = cast(env, values[env], f.default)
        settings = cls(**kwargs)
        settings.validate()
        return settings

    def validate(self) -> None:
        positive = (
            "port",
            "embedding_batch_size",
            "response_cache_size",
            "embedding_cache_size",
            "fusion_k",
            "candidates",
            "max_body_bytes",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{env_name(name)} must be a positive number")
        if self.embedding_precision not in ("auto", "bf16", "fp32"):
            raise ConfigurationError("KNOWLEDGE_EMBEDDING_PRECISION must be auto, bf16 or fp32")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigurationError("KNOWLEDGE_LOG_LEVEL must be debug, info, warning or error")

    def replace(self, **changes: Any) -> Settings:
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        return Settings(**{**current, **changes})


def declared() -> list[tuple[str, Any, str]]:
    """(variable, default, help) of every setting, in declaration order."""
    return [(f.metadata["env"], f.default, f.metadata["help"]) for f in fields(Settings)]


def env_name(attribute: str) -> str:
    return next(str(f.metadata["env"]) for f in fields(Settings) if f.name == attribute)


def reject_unknown(values: Mapping[str, str]) -> None:
    known = {env for env, _, _ in declared()}
    for name in values:
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigurationError(f"unknown setting {name}{hint}")


def cast(env: str, raw: str, default: Any) -> Any:
    kind: type = type(default) if default is not MISSING else str
    try:
        if kind is bool:
            return parse_bool(raw)
        if kind in (int, float):
            return kind(raw)
        if issubclass(kind, Path):
            return Path(raw)
        if kind is Secret:
            return Secret(raw)
        return raw
    except ValueError as e:
        raise ConfigurationError(f"{env} must be {kind.__name__}, got {raw!r}") from e


def parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines of a dotenv file; a missing file is no error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values
