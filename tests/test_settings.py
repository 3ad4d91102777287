from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_api.errors import ConfigurationError
from knowledge_api.settings import Secret, Settings, declared

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


@pytest.mark.parametrize(
    "env, message",
    [
        ({"KNOWLEDGE_API_PORT": "abc"}, "KNOWLEDGE_API_PORT must be int"),
        ({"KNOWLEDGE_API_PORT": "0"}, "KNOWLEDGE_API_PORT must be a positive number"),
        ({"KNOWLEDGE_SEED_ON_EMPTY": "maybe"}, "KNOWLEDGE_SEED_ON_EMPTY must be bool"),
        ({"KNOWLEDGE_EMBEDDING_PRECISION": "fp16"}, "auto, fp32, bf16 or int8"),
    ],
)
def test_invalid_values_fail_at_start(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env(environ=env, env_file=None)


def test_secret_hides_its_value() -> None:
    secret = Secret("sk-live-123")
    assert "sk-live-123" not in repr(secret) and "sk-live-123" not in str(secret)
    assert secret.get() == "sk-live-123" and secret and not Secret("")


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    missing = [env for env, _, _ in declared() if f"`{env}`" not in readme]
    assert missing == []
