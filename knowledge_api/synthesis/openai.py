"""Any OpenAI-compatible chat model through the openai SDK: OpenAI's own API (the
default base URL), a server of one's own that speaks the same API (Ollama, vLLM,
llama.cpp's server, LM Studio) or a gateway (OpenRouter) at KNOWLEDGE_OPENAI_BASE_URL,
and Azure OpenAI when KNOWLEDGE_OPENAI_API_VERSION is set (the base URL is then the
resource's endpoint, the model its deployment).

OpenAI's API and Azure need a key; a server of one's own gets a placeholder, since the
SDK sends one. OPENAI_API_KEY is sent to OpenAI's API only: a key kept for OpenAI does
not go to whatever server the base URL names. No SDK retries, the chain is the retry
policy.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit

from knowledge_api.config.fields import Secret
from knowledge_api.errors import ConfigurationError
from knowledge_api.registry import import_extra
from knowledge_api.sdk import sdk_client
from knowledge_api.synthesis.base import Prompt, RemoteLink, Usage
from knowledge_api.synthesis.completions import chat_stream

OPENAI_HOST = "api.openai.com"
PLACEHOLDER_KEY = "no-key"
"""What a server that checks no key is sent (the SDK will not start without one)."""


class OpenAISynthesizer(RemoteLink):
    name = "openai"
    key_env = "KNOWLEDGE_OPENAI_API_KEY"
    extra = "openai"

    settings_fields = (
        "openai_api_key openai_model openai_base_url openai_timeout openai_max_tokens "
        "llm_temperature openai_api_version openai_platform_key"
    )

    def __init__(
        self,
        api_key: Secret,
        model: str,
        base_url: str,
        timeout: float,
        max_tokens: int,
        temperature: float,
        api_version: str = "",
        platform_key: Secret | None = None,
    ) -> None:
        self.api_version = api_version
        official = urlsplit(base_url).hostname == OPENAI_HOST
        if api_version and official:
            raise ConfigurationError(
                "KNOWLEDGE_OPENAI_API_VERSION is set (Azure OpenAI): KNOWLEDGE_OPENAI_BASE_URL "
                "must be the Azure resource's endpoint, such as "
                "https://NAME.openai.azure.com"
            )
        self.official = official or bool(api_version)
        """OpenAI's own API or Azure: a key is needed, and the newer parameter names."""
        if not api_key and official and platform_key:
            api_key = platform_key
        elif not api_key and not self.official:
            api_key = Secret(PLACEHOLDER_KEY)
        super().__init__(api_key, model, base_url, timeout, max_tokens, temperature)

    def connect(self) -> Any:
        openai = import_extra("openai", self.extra)
        if not self.api_version:
            return sdk_client(openai.AsyncOpenAI, self, http_client=self.http)
        return openai.AsyncAzureOpenAI(
            api_key=self.api_key.get(),
            azure_endpoint=self.base_url,
            api_version=self.api_version,
            timeout=self.timeout,
            max_retries=0,
            http_client=self.http,
        )

    def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        # OpenAI and Azure take max_completion_tokens (reasoning models refuse
        # max_tokens); the servers of one's own read max_tokens
        limit = "max_completion_tokens" if self.official else "max_tokens"
        return chat_stream(
            self,
            "openai",
            prompt,
            usage,
            chunk_tokens,
            stream_options={"include_usage": True},
            **{limit: self.max_tokens},
        )

    def health(self) -> dict[str, Any]:
        report = super().health()
        if self.api_version:
            report["azure_api_version"] = self.api_version
        return report


def chunk_tokens(chunk: Any) -> int | None:
    """The usage chunk (the last, asked for with include_usage) carries the total."""
    return chunk.usage.total_tokens if chunk.usage else None
