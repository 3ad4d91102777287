"""Groq through the groq SDK: the link after Gemini in the default chain.

Same parameters as Gemini (temperature, token limit, timeout), its own base URL
(KNOWLEDGE_GROQ_BASE_URL); no SDK retries, the chain is the retry policy.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from knowledge_api.registry import import_extra
from knowledge_api.sdk import sdk_client
from knowledge_api.synthesis.base import Prompt, RemoteLink, Usage
from knowledge_api.synthesis.completions import chat_stream


class GroqSynthesizer(RemoteLink):
    name = "groq"
    key_env = "GROQ_API_KEY"
    extra = "groq"

    settings_fields = (
        "groq_api_key groq_model groq_base_url groq_timeout groq_max_tokens llm_temperature"
    )

    def connect(self) -> Any:
        groq = import_extra("groq", self.extra)
        return sdk_client(groq.AsyncGroq, self, http_client=self.http)

    def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        return chat_stream(
            self, "groq", prompt, usage, chunk_tokens, max_completion_tokens=self.max_tokens
        )


def chunk_tokens(chunk: Any) -> int | None:
    """Groq reports usage in the last chunk, under x_groq (or usage when asked)."""
    usage = chunk.usage or (chunk.x_groq.usage if chunk.x_groq else None)
    return usage.total_tokens if usage else None
