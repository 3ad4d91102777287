from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from knowledge_api.config.fields import Secret, specs
from knowledge_api.errors import ConfigurationError
from knowledge_api.settings import Settings, declared

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults_need_no_environment() -> None:
    settings = Settings.from_env(environ={}, env_file=None)
    assert settings.port == 3006
    assert settings.store == "sqlite" and settings.embedder == "local"
    assert settings.response_cache_ttl == 12 * 3600
    assert settings.embedding_cache_ttl == 24 * 3600
    assert settings.max_body_bytes == 64 * 1024


def test_environment_overrides_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nKNOWLEDGE_API_PORT=4000\nexport KNOWLEDGE_FUSION_K='30'\n")
    settings = Settings.from_env(environ={"KNOWLEDGE_API_PORT": "5000"}, env_file=env_file)
    assert settings.port == 5000 and settings.fusion_k == 30


@pytest.mark.parametrize("raw, expected", [("false", False), ("0", False), ("YES", True)])
def test_booleans(raw: str, expected: bool) -> None:
    env = {"KNOWLEDGE_SEED_ON_EMPTY": raw}
    assert Settings.from_env(environ=env, env_file=None).seed_on_empty is expected


def test_unknown_setting_fails_with_a_suggestion() -> None:
    with pytest.raises(ConfigurationError, match="did you mean KNOWLEDGE_API_PORT"):
        Settings.from_env(environ={"KNOWLEDGE_API_PROT": "1"}, env_file=None)


def test_secret_hides_its_value() -> None:
    secret = Secret("sk-live-123")
    assert "sk-live-123" not in repr(secret) and "sk-live-123" not in str(secret)
    assert secret.get() == "sk-live-123" and secret and not Secret("")


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    missing = [env for env, _, _ in declared() if f"`{env}`" not in readme]
    assert missing == []


DOCS = Path(__file__).resolve().parent.parent / "knowledge_api" / "docs"
GUIDES = (DOCS / "configuration.md", DOCS / "chroma-and-qdrant.md")
"""Where each setting is documented: the configuration guide, and the page of the two
stores whose settings it points to."""
HEAD = re.compile(
    r"`(?P<env>[A-Z][A-Z0-9_]*)`(?: \(default(?P<default>(?:`[^`]*`|[^)`])*)\))?"
    r"(?P<then>, and |, | and |: |$)"
)
"""One variable a bullet opens with, its default as written, and what follows."""


def documented(text: str) -> list[tuple[str, str | None, str]]:
    """(variable, default as written, bullet) for each variable a bullet of `text` opens
    with: `- `A` (default `1`), `B` and `C` (default `2`): ...`. A variable written
    without a default shares the next one's (`B` and `C` above)."""
    found: list[tuple[str, str | None, str]] = []
    for bullet in (line[2:] for line in text.splitlines() if line.startswith("- `")):
        heads, position = [], 0
        while (head := HEAD.match(bullet, position)) is not None:
            heads.append((head["env"], head["default"]))
            if head["then"] in (": ", ""):
                break
            position = head.end()
        shared: str | None = None
        entries = []
        for env, default in reversed(heads):
            shared = default if default is not None else shared
            entries.append((env, shared, bullet))
        found.extend(reversed(entries))
    return found


def written(value: Any) -> str:
    """A declared default as the guide writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return value.get() if isinstance(value, Secret) else str(value)


def test_the_guides_document_every_setting_once_with_its_default_and_choices() -> None:
    entries = documented("\n".join(guide.read_text() for guide in GUIDES))
    envs = [env for env, _, _ in entries]
    assert sorted(env for env in set(envs) if envs.count(env) > 1) == []
    assert sorted({env for env, _, _ in declared()} - set(envs)) == []
    bullets = {env: (default, bullet) for env, default, bullet in entries}
    for declaration, spec in specs(fields(Settings)):
        default, bullet = bullets[spec.env]
        expected = written(declaration.default)
        if default is not None and default.startswith(" `"):
            assert default.split("`")[1] == expected, spec.env
        else:  # no default, `default empty` or `default: what an empty value means`
            assert expected == "", spec.env
        missing = [choice for choice in spec.choices if choice and f"`{choice}`" not in bullet]
        assert missing == [], spec.env


ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|", re.M)
"""A row of the README's configuration tables: variable, default."""


def test_the_readme_tables_give_each_declared_default() -> None:
    rows = dict(ROW.findall(README.read_text()))
    for declaration, spec in specs(fields(Settings)):
        default = rows[spec.env].strip()
        described = default.startswith(("(", "`"))  # (empty), (bundled docs), `uploads` beside
        assert ("" if described else default) == written(declaration.default), spec.env


def test_the_guide_reader_sees_shared_and_described_defaults() -> None:
    text = (
        "- `A` (default `1`), `B` and `C` (default `x (y)`): shared.\n"
        "- `D` (default: the backend's): described.\n"
        "- `E`: no default.\n"
        "- `F` (default `2`, 1-9) and `G` (default empty): each its own.\n"
    )
    assert [(env, default) for env, default, _ in documented(text)] == [
        ("A", " `1`"),
        ("B", " `x (y)`"),
        ("C", " `x (y)`"),
        ("D", ": the backend's"),
        ("E", None),
        ("F", " `2`, 1-9"),
        ("G", " empty"),
    ]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"KNOWLEDGE_API_PORT": "abc"}, "KNOWLEDGE_API_PORT must be int"),
        ({"KNOWLEDGE_API_PORT": "0"}, "KNOWLEDGE_API_PORT must be a positive number"),
        ({"KNOWLEDGE_SEED_ON_EMPTY": "maybe"}, "KNOWLEDGE_SEED_ON_EMPTY must be bool"),
        ({"KNOWLEDGE_EMBEDDING_PRECISION": "fp16"}, "auto, fp32, bf16 or int8"),
        ({"KNOWLEDGE_LOG_LEVEL": "loud"}, "KNOWLEDGE_LOG_LEVEL must be debug, info, warning or"),
        ({"KNOWLEDGE_MCP_MAX_CHARS": "999"}, "KNOWLEDGE_MCP_MAX_CHARS must be at least 1000"),
        ({"KNOWLEDGE_CHROMA_PORT": "70000"}, "KNOWLEDGE_CHROMA_PORT must be between 1 and 65535"),
        ({"KNOWLEDGE_SUPPORT_COLLECTION": "a b"}, "KNOWLEDGE_SUPPORT_COLLECTION must be 1-64"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "must be empty or a number between 0 and 1"),
        ({"KNOWLEDGE_AUDIT_DAYS": "-1"}, "KNOWLEDGE_AUDIT_DAYS must not be negative"),
        # the synthesizers' providers
        ({"KNOWLEDGE_GEMINI_TIMEOUT": "0"}, "KNOWLEDGE_GEMINI_TIMEOUT must be a positive number"),
        ({"KNOWLEDGE_GROQ_MAX_TOKENS": "-5"}, "KNOWLEDGE_GROQ_MAX_TOKENS must be a positive"),
        ({"KNOWLEDGE_LLM_TEMPERATURE": "2.5"}, "between 0 and 2"),
        ({"KNOWLEDGE_ANSWER_THRESHOLD": "1.5"}, "auto or a number between 0 and 1"),
        ({"KNOWLEDGE_ANSWER_THRESHOLD": "high"}, "auto or a number between 0 and 1"),
        ({"KNOWLEDGE_LLM_CONTEXT_CHARS": "0"}, "KNOWLEDGE_LLM_CONTEXT_CHARS must be a positive"),
        # the Postgres store's vector index
        ({"KNOWLEDGE_POSTGRES_EF_SEARCH": "0"}, "KNOWLEDGE_POSTGRES_EF_SEARCH must be between"),
        ({"KNOWLEDGE_POSTGRES_EF_SEARCH": "1001"}, "KNOWLEDGE_POSTGRES_EF_SEARCH must be between"),
        ({"KNOWLEDGE_POSTGRES_EF_SEARCH": "many"}, "KNOWLEDGE_POSTGRES_EF_SEARCH must be int"),
        ({"KNOWLEDGE_POSTGRES_HNSW_M": "1"}, "KNOWLEDGE_POSTGRES_HNSW_M must be between 2 and"),
        ({"KNOWLEDGE_POSTGRES_REBUILD_ROWS": "-1"}, "KNOWLEDGE_POSTGRES_REBUILD_ROWS must not"),
        ({"KNOWLEDGE_POSTGRES_BUILD_MEMORY": "lots"}, "KNOWLEDGE_POSTGRES_BUILD_MEMORY must be"),
        ({"KNOWLEDGE_POSTGRES_BUILD_MEMORY": "1GB'; DROP"}, "KNOWLEDGE_POSTGRES_BUILD_MEMORY"),
        ({"KNOWLEDGE_POSTGRES_SHARED_BUFFERS": "half"}, "KNOWLEDGE_POSTGRES_SHARED_BUFFERS must"),
        ({"KNOWLEDGE_POSTGRES_SHARED_BUFFERS": "1GB'\nfsync = 'off"}, "SHARED_BUFFERS must be"),
        (
            {"KNOWLEDGE_POSTGRES_HNSW_M": "40"},  # ef_construction 64 < 2 x 40
            "KNOWLEDGE_POSTGRES_HNSW_EF_CONSTRUCTION must be between twice",
        ),
        # a shared cache needs its server
        (
            {"KNOWLEDGE_CACHE": "redis", "KNOWLEDGE_REDIS_URL": ""},
            "KNOWLEDGE_REDIS_URL must be set",
        ),
    ],
)
def test_each_rule_names_its_variable_and_what_it_must_be(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env(environ=env, env_file=None)


@pytest.mark.parametrize(
    "env",
    [
        {"KNOWLEDGE_CACHE": "redis"},
        {"KNOWLEDGE_POSTGRES_SHARED_BUFFERS": "512MB", "KNOWLEDGE_ANSWER_THRESHOLD": "0.4"},
        {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"},
        {"KNOWLEDGE_POSTGRES_HNSW_M": "50", "KNOWLEDGE_POSTGRES_HNSW_EF_CONSTRUCTION": "100"},
    ],
)
def test_values_within_their_rules_are_taken(env: dict[str, str]) -> None:
    Settings.from_env(environ=env, env_file=None)
