"""What the cloud providers' SDK clients share: the key, the client opened in the
service's lifespan (sending through an httpx client the provider owns, traced), and
no retries of the SDK's own: the caller decides what a failure means."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from knowledge_api import tracing
from knowledge_api.errors import ConfigurationError
from knowledge_api.registry import import_extra


def sdk_client(factory: Callable[..., Any], owner: Any, **options: Any) -> Any:
    """`factory`'s client of `owner`'s key, endpoint and timeout, without retries."""
    return factory(
        api_key=owner.api_key.get(),
        base_url=owner.base_url,
        timeout=owner.timeout,
        max_retries=0,
        **options,
    )


def genai_client(owner: Any, **http: Any) -> Any:
    """A google-genai client of `owner`'s key, endpoint and timeout, sending through the
    httpx client `http` names (`httpx_client=` or `httpx_async_client=`)."""
    genai = import_extra("google.genai", owner.extra)
    return genai.Client(
        api_key=owner.api_key.get(),
        http_options=genai.types.HttpOptions(
            base_url=owner.base_url,
            timeout=int(owner.timeout * 1000) if owner.timeout else None,
            **http,
        ),
    )


def cohere_failure(error: Any) -> str:
    """What a cohere `ApiError` says; a status under 300 means the SDK could not read
    the body it was sent."""
    if error.status_code and error.status_code < 300:
        return f"malformed response: {cohere_message(error.body)}"
    return f"HTTP {error.status_code}: {cohere_message(error.body)}"


def cohere_message(body: Any) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:200]
    return str(body)[:200]


class AsyncSdk:
    """An SDK client opened in the lifespan: `connect` builds it on `self.http`."""

    key_env = ""
    extra = ""
    api_key: Any
    timeout: float | None

    client: Any = None
    http: Any = None
    open_error = ""
    """Why the client could not be opened (the SDK not installed), or empty."""

    async def open(self) -> None:
        if not self.api_key or self.client is not None:
            return
        try:
            http = import_extra("httpx", self.extra).AsyncClient(timeout=self.timeout)
            self.http = tracing.traced_client(http)
            self.client = self.connect()
        except ConfigurationError as e:
            self.open_error = e.message

    def connect(self) -> Any:
        """The SDK client, sending through `self.http`; raises ConfigurationError when
        the SDK is not installed."""
        raise NotImplementedError

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        self.client = self.http = None

    def unavailable(self) -> str | None:
        if not self.api_key:
            return f"missing key: set {self.key_env}"
        if self.client is None:
            return self.open_error or "not opened"
        return None
