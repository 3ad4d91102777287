"""The Synthesizer protocol: one link of the synthesis chain, writing an answer from the
numbered passages of a prompt, piece by piece as the provider sends it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

from knowledge_api.models import SearchHit
from knowledge_api.registry import FromSettings
from knowledge_api.sdk import AsyncSdk


@dataclass(frozen=True, slots=True)
class Synthesis:
    text: str
    model: str
    citations: list[int] = field(default_factory=list)
    """1-based positions in the hits of every [n] the text contains."""


@dataclass(frozen=True, slots=True)
class Prompt:
    query: str
    hits: tuple[SearchHit, ...]
    """The citable passages: [n] is hits[n - 1]."""
    text: str
    """What an LLM reads: instructions, the numbered passages, the question."""


@dataclass(slots=True)
class Usage:
    """Filled in by a link while it streams, read by the chain when it is done."""

    tokens: int | None = None


CUT_SHORT = "the stream ended without a finish reason: the answer may be cut short"
"""A body that ends by connection close before the provider said it was done."""


class ProviderError(Exception):
    """A provider did not answer (HTTP error, bad body, no text); the chain moves on."""


class Synthesizer(Protocol):
    name: str
    model: str
    temperature: float
    timeout: float | None
    """Seconds allowed to the first piece and between pieces; None: no limit."""

    def unavailable(self) -> str | None:
        """Why this link cannot answer now (e.g. no API key), or None."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        """The answer in pieces, as they arrive; raises ProviderError on failure."""
        ...

    def health(self) -> dict[str, Any]: ...


class RemoteLink(AsyncSdk, FromSettings):
    """What the LLM links share: a key, an SDK client opened in the lifespan, health."""

    name = "remote"

    def __init__(
        self,
        api_key: Any,
        model: str,
        base_url: str,
        timeout: float,
        max_tokens: int,
        temperature: float,
    ) -> None:
        self.api_key = api_key
        self.model = model
        self.base_url = base_url
        self.timeout: float | None = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature

    def health(self) -> dict[str, Any]:
        if not self.api_key:
            status = "missing_key"
        else:
            status = "configured" if self.client is not None else "unavailable"
        report = {"name": self.name, "model": self.model, "status": status, "key": self.key_env}
        if self.open_error:
            report["error"] = self.open_error
        return report
