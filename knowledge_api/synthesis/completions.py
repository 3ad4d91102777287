"""A streamed chat completion in the shape OpenAI defined, which Groq and every
OpenAI-compatible server send: its text piece by piece, the tokens it reports, and the
SDK's errors as ProviderError (the chain moves on)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from knowledge_api.registry import import_extra
from knowledge_api.synthesis.base import CUT_SHORT, Prompt, ProviderError, RemoteLink, Usage


def chat_stream(
    link: RemoteLink,
    sdk: str,
    prompt: Prompt,
    usage: Usage,
    tokens: Callable[[Any], int | None],
    **options: Any,
) -> AsyncGenerator[str, None]:
    """The reply of `link`'s model to `prompt`, streamed through its client of the SDK
    `sdk` (openai, groq); `options`: what the provider's request takes besides."""
    return completion_text(
        import_extra(sdk, link.extra),
        lambda: link.client.chat.completions.create(
            model=link.model,
            messages=[{"role": "user", "content": prompt.text}],
            temperature=link.temperature,
            stream=True,
            **options,
        ),
        usage,
        tokens,
    )


async def completion_text(
    sdk: Any,
    start: Callable[[], Awaitable[Any]],
    usage: Usage,
    tokens: Callable[[Any], int | None],
) -> AsyncGenerator[str, None]:
    """The text of the stream `start()` opens with the SDK module `sdk` (openai, groq);
    `tokens` reads the total a chunk reports, if it does."""
    try:
        stream = await start()
        finished = False
        async with stream:
            async for chunk in stream:
                usage.tokens = tokens(chunk) or usage.tokens
                if chunk.choices and (piece := chunk.choices[0].delta.content):
                    yield piece
                finished = finished or bool(chunk.choices and chunk.choices[0].finish_reason)
        if not finished:
            raise ProviderError(CUT_SHORT)
    except sdk.APIStatusError as e:
        raise ProviderError(f"HTTP {e.status_code}: {error_message(e.body)}") from e
    except sdk.APIError as e:
        raise ProviderError(f"{type(e).__name__}: {e.message}") from e
    except ValueError as e:  # a body that is not the JSON such a server sends
        raise ProviderError(f"malformed response: {str(e)[:200]}") from e


def error_message(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
    return str(body)[:200]
