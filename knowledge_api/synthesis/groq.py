"""Groq through the groq SDK: the link after Gemini in the default chain.

Same parameters as Gemini (temperature, token limit, timeout), its own base URL
(KNOWLEDGE_GROQ_BASE_URL); no SDK retries, the chain is the retry policy.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from knowledge_api.registry import import_extra
from knowledge_api.sdk import sdk_client
from knowledge_api.synthesis.base import CUT_SHORT, Prompt, ProviderError, RemoteLink, Usage


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

    async def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        groq = import_extra("groq", self.extra)
        try:
            stream = await self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt.text}],
                temperature=self.temperature,
                max_completion_tokens=self.max_tokens,
                stream=True,
            )
            finished = False
            async with stream:
                async for chunk in stream:
                    usage.tokens = chunk_tokens(chunk) or usage.tokens
                    if chunk.choices and (piece := chunk.choices[0].delta.content):
                        yield piece
                    finished = finished or bool(chunk.choices and chunk.choices[0].finish_reason)
            if not finished:
                raise ProviderError(CUT_SHORT)
        except groq.APIStatusError as e:
            raise ProviderError(f"HTTP {e.status_code}: {error_message(e.body)}") from e
        except groq.APIError as e:
            raise ProviderError(f"{type(e).__name__}: {e.message}") from e
        except ValueError as e:  # a body that is not the JSON Groq sends
            raise ProviderError(f"malformed response: {str(e)[:200]}") from e


def chunk_tokens(chunk: Any) -> int | None:
    """Groq reports usage in the last chunk, under x_groq (or usage when asked)."""
    usage = chunk.usage or (chunk.x_groq.usage if chunk.x_groq else None)
    return usage.total_tokens if usage else None


def error_message(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
    return str(body)[:200]
