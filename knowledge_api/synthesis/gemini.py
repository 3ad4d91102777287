"""Gemini through google-genai: the first link of the default chain.

The SDK sends through an httpx client this link owns (opened in the lifespan), at
the base URL of KNOWLEDGE_GEMINI_BASE_URL, without retries of its own: when Gemini
fails, the chain moves on instead of waiting.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from knowledge_api.registry import import_extra
from knowledge_api.sdk import genai_client
from knowledge_api.synthesis.base import CUT_SHORT, Prompt, ProviderError, RemoteLink, Usage


class GeminiSynthesizer(RemoteLink):
    name = "gemini"
    key_env = "GOOGLE_GENERATIVE_AI_API_KEY"
    extra = "gemini"

    settings_fields = (
        "gemini_api_key gemini_model gemini_base_url "
        "gemini_timeout gemini_max_tokens llm_temperature"
    )

    def connect(self) -> Any:
        return genai_client(self, httpx_async_client=self.http)

    async def generate(self, prompt: Prompt, usage: Usage) -> AsyncGenerator[str, None]:
        genai = import_extra("google.genai", self.extra)
        config = genai.types.GenerateContentConfig(
            temperature=self.temperature, max_output_tokens=self.max_tokens
        )
        try:
            stream = await self.client.aio.models.generate_content_stream(
                model=self.model, contents=prompt.text, config=config
            )
            finished = False
            async with aclosing(stream):
                async for chunk in stream:
                    if chunk.usage_metadata and chunk.usage_metadata.total_token_count:
                        usage.tokens = chunk.usage_metadata.total_token_count
                    if piece := chunk_text(chunk):
                        yield piece
                    finished = finished or bool(
                        chunk.candidates and chunk.candidates[0].finish_reason
                    )
            if not finished:
                raise ProviderError(CUT_SHORT)
        except genai.errors.APIError as e:
            status = " ".join(str(part) for part in (e.code, e.status) if part)
            raise ProviderError(f"HTTP {status}: {e.message}") from e
        except ValueError as e:  # a body that is not the JSON Gemini sends
            raise ProviderError(f"malformed response: {str(e)[:200]}") from e


def chunk_text(chunk: Any) -> str:
    """The text parts of a streamed chunk (thoughts and other parts are not the answer)."""
    candidates = chunk.candidates or []
    if not candidates or candidates[0].content is None:
        return ""
    parts = candidates[0].content.parts or []
    return "".join(part.text for part in parts if part.text and not part.thought)
