"""Configured secrets never leave the process: not in responses, streams, /health or
the log, whichever upstream echoed them."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.config.fields import Secret
from knowledge_api.redaction import Redactor
from knowledge_api.settings import Settings
from tests.conftest import corpus
from tests.kb_host import Host, serve
from tests.providers import GEMINI_GENERATE, GEMINI_KEY, gemini_error, llm_settings, mocked


def test_every_value_is_masked_with_as_many_stars() -> None:
    redactor = Redactor(["s3cret-value", "abc", "s3cret"])
    assert redactor.text("key=s3cret-value and s3cret") == "key=************ and ******"
    assert redactor.bytes(b"abc s3cret") == b"abc ******"  # "abc" is too short to be one
    assert not Redactor([""])


def variants(secret: str) -> list[str]:
    """Copies of `secret` as an upstream may echo it: in every case, and with spaces,
    dashes, dots, underscores, colons, commas, slashes, quotes or line breaks between
    its characters (mixed, too)."""
    cases = [secret, secret.lower(), secret.upper(), secret.swapcase(), secret.title()]
    separators = [" ", "-", ".", "_", ":", ", ", "/", "'", "\n", "\t", " - ", "\u00a0"]
    spelled = [sep.join(form) for form in cases for sep in separators]
    mixed = "".join(c + " -._"[i % 4] for i, c in enumerate(secret.upper()))[:-1]
    bare = secret.replace("-", "")  # its own separators left out
    return [*cases, *spelled, mixed, bare, bare.upper(), " ".join(bare.lower())]


@pytest.mark.parametrize("secret", ["gm-Secret-Key-1111", "AIzaSyD9tSrke72PouQ", "kb.tok_9F"])
def test_every_case_and_separator_variant_is_masked_keeping_the_length(secret: str) -> None:
    redactor = Redactor([secret])
    for copy in variants(secret):
        for text in (f"error: key {copy} is invalid", f"{copy}", f'{{"k":"{copy}"}}'):
            masked = redactor.text(text)
            assert len(masked) == len(text) and copy not in masked, (copy, masked)
            assert masked.replace("*", "") == text.replace(copy, "").replace("*", "")
            data = text.encode()  # the same, byte for byte (a non-ASCII space is two)
            expected = data.replace(copy.encode(), b"*" * len(copy.encode()))
            assert redactor.bytes(data) == expected, copy


def test_words_that_only_share_some_characters_are_left_alone() -> None:
    redactor = Redactor(["gm-secret-key-1111"])
    kept = "gm secret key 111 and gm-secret-key: 1112, GMSECRET KEY"
    assert redactor.text(kept) == kept and redactor.bytes(kept.encode()) == kept.encode()


def test_a_secret_of_mostly_other_characters_is_masked_as_written() -> None:
    redactor = Redactor(["пароль-12"])
    assert redactor.text("password пароль-12!") == "password *********!"
    assert redactor.bytes("пароль-12".encode()) == b"*" * len("пароль-12".encode())


def test_only_configured_values_are_secrets() -> None:
    """Defaults are public (the local Redis address), so nothing configured means
    nothing to mask; a Redis URL with a password is one."""
    assert Settings.from_env(environ={}, env_file=None).secrets() == []
    url = "redis://:hunter2-pass@cache.internal:6379/0"
    configured = Settings.from_env(environ={"KNOWLEDGE_REDIS_URL": url}, env_file=None)
    assert configured.secrets() == [url]
    assert not Redactor(Settings.from_env(environ={}, env_file=None).secrets())


@pytest.mark.parametrize(
    "copy",
    [GEMINI_KEY, GEMINI_KEY.upper(), " ".join(GEMINI_KEY), ".".join(GEMINI_KEY.swapcase())],
    ids=["as-is", "upper", "spaced", "dotted-swapcase"],
)
def test_a_provider_echoing_the_key_does_not_leak_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, copy: str
) -> None:
    echoed = f"API key not valid. Request headers: x-goog-api-key: {copy}"
    caplog.set_level(logging.INFO)
    with contextmanager(mocked)() as mock:
        mock.post(url__regex=GEMINI_GENERATE).mock(
            return_value=gemini_error(400, echoed, "INVALID_ARGUMENT")
        )
        app = create_app(llm_settings(tmp_path, synthesizer="gemini,extractive"))
        with TestClient(app) as client:
            client.portal.call(app.state.service.ingest, corpus())
            body = client.post("/v1/knowledge/query", json={"query": "audio formats"}).text
            with client.stream(
                "POST", "/v1/knowledge/answer", json={"query": "audio formats", "stream": True}
            ) as response:
                stream = "".join(response.iter_text())
            health = client.get("/health").text
    assert "API key not valid" in body and "*" * len(copy) in body
    for shown in (body, stream, health, caplog.text):
        assert GEMINI_KEY not in shown and copy not in shown
        assert not any(form in shown for form in variants(GEMINI_KEY))


def test_a_kb_host_echoing_the_token_does_not_leak_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = "kb-token-7f3a9c"
    caplog.set_level(logging.INFO)
    with serve(Host(fail_status=500, echo_headers=True)) as host:
        settings = llm_settings(
            tmp_path,
            kb_sync_url=host.url,
            kb_sync_token=Secret(token),
            kb_sync_interval=0.05,
            sync_retries=0,
        )
        with TestClient(create_app(settings)) as client:
            for _ in range(200):
                health = client.get("/health").json()
                if health.get("kb_sync", {}).get("status") == "stale":
                    break
                time.sleep(0.02)
            shown = client.get("/health").text
    assert "request headers" in shown and token not in shown
    assert f"Bearer {token}" in str(host.authorization)  # it was sent, and echoed back
    assert token not in caplog.text
