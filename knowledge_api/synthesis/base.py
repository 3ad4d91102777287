"""The Synthesizer protocol: one link of the synthesis chain, writing an answer from the
numbered passages of a prompt, piece by piece as the provider sends it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

from knowledge_api import tracing
from knowledge_api.errors import ConfigurationError
from knowledge_api.models import SearchHit
from knowledge_api.registry import FromSettings, import_extra


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


class RemoteLink(FromSettings):
    """What the LLM links share: a key, an SDK client opened in the lifespan, health."""

    name = "remote"
    key_env = ""
    extra = ""

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
        self.client: Any = None
        self.http: Any = None
        self.error = ""

    def unavailable(self) -> str | None:
        if not self.api_key:
            return f"missing key: set {self.key_env}"
        if self.client is None:
            return self.error or "not opened"
        return None

    async def open(self) -> None:
        if not self.api_key or self.client is not None:
            return
        try:
            http = import_extra("httpx", self.extra).AsyncClient(timeout=self.timeout)
            self.http = tracing.traced_client(http)
            self.client = self.connect()
        except ConfigurationError as e:
            self.error = e.message

    def connect(self) -> Any:
        """The SDK client, sending through `self.http`; raises ConfigurationError when
        the SDK is not installed."""
        raise NotImplementedError

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        self.client = self.http = None

    def health(self) -> dict[str, Any]:
        if not self.api_key:
            status = "missing_key"
        else:
            status = "configured" if self.client is not None else "unavailable"
        report = {"name": self.name, "model": self.model, "status": status, "key": self.key_env}
        if self.error:
            report["error"] = self.error
        return report
