"""The HTTP side of Gemini, Groq, OpenAI (and Azure OpenAI) and Cohere, answered by respx.

The real SDKs send real requests; these helpers build what the providers send back:
SSE bodies of streamed answers, error bodies, streams that stall or break midway.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from knowledge_api.config.fields import Secret
from knowledge_api.settings import Settings
from tests.conftest import make_settings

GEMINI_URL = "https://gemini.test"
GROQ_URL = "https://groq.test"
COHERE_URL = "https://cohere.test"
GEMINI_KEY = "gm-secret-key-1111"
GROQ_KEY = "gq-secret-key-2222"
COHERE_KEY = "co-secret-key-3333"
GEMINI_GENERATE = r"^https://gemini\.test/v1/models/gemini-2\.0-flash:streamGenerateContent"
GROQ_CHAT = f"{GROQ_URL}/openai/v1/chat/completions"
COHERE_RERANK = f"{COHERE_URL}/v2/rerank"
OPENAI_KEY = "sk-secret-key-4444"
OPENAI_CHAT = "https://api.openai.com/v1/chat/completions"
AZURE_URL = "https://answers.openai.azure.com"
AZURE_DEPLOYMENT = "answers-4o"
AZURE_CHAT = f"{AZURE_URL}/openai/deployments/{AZURE_DEPLOYMENT}/chat/completions"


def each_failure(failures: Mapping[str, tuple[Any, str]]) -> pytest.MarkDecorator:
    """A test run once for each of `failures`, named by its key: what the provider answers
    (or raises) as `response`, and what the fallback's reason must say as `reason`."""
    return pytest.mark.parametrize(
        ("response", "reason"), list(failures.values()), ids=list(failures)
    )


def llm_settings(tmp_path: Path, **changes: Any) -> Settings:
    """Both LLM links configured, each at its test host."""
    values: dict[str, Any] = {
        "gemini_api_key": Secret(GEMINI_KEY),
        "gemini_base_url": GEMINI_URL,
        "groq_api_key": Secret(GROQ_KEY),
        "groq_base_url": GROQ_URL,
    }
    return make_settings(tmp_path, **{**values, **changes})


def mocked() -> Iterator[respx.MockRouter]:
    """For a fixture: every HTTP request must match a route, none reaches the network."""
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        yield router


# -- Gemini -----------------------------------------------------------------------------


def gemini_chunk(text: str, finish: str | None = None, tokens: int | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate]}
    if tokens is not None:
        chunk["usageMetadata"] = {"totalTokenCount": tokens}
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def gemini_answer(pieces: Sequence[str], tokens: int = 42) -> httpx.Response:
    body = b"".join(
        gemini_chunk(piece, *(("STOP", tokens) if i == len(pieces) - 1 else ()))
        for i, piece in enumerate(pieces)
    )
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def gemini_error(status: int, message: str = "failure", code: str = "INTERNAL") -> httpx.Response:
    error = {"error": {"code": status, "message": message, "status": code}}
    return httpx.Response(status, json=error)


# -- Groq -------------------------------------------------------------------------------


def groq_chunk(text: str, last: bool = False, tokens: int = 0) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "llama-3.3-70b-versatile",
        "choices": [
            {"index": 0, "delta": {"content": text}, "finish_reason": "stop" if last else None}
        ],
    }
    if last:
        chunk["x_groq"] = {
            "id": "req-1",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": tokens},
        }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def groq_answer(pieces: Sequence[str], tokens: int = 77) -> httpx.Response:
    body = b"".join(groq_chunk(p, i == len(pieces) - 1, tokens) for i, p in enumerate(pieces))
    return httpx.Response(
        200, content=body + b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"}
    )


def groq_error(status: int, message: str = "failure") -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message, "type": "server_error"}})


# -- OpenAI (and every server of its shape) -------------------------------------------


def openai_chunk(text: str | None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    chunk = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def openai_usage(tokens: int) -> bytes:
    """The last chunk when `stream_options.include_usage` is asked: no choices, the usage."""
    counted = {"prompt_tokens": tokens - 1, "completion_tokens": 1, "total_tokens": tokens}
    chunk = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1}
    chunk.update(model="gpt-4o-mini", choices=[], usage=counted)
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def openai_answer(pieces: Sequence[str], tokens: int = 55) -> httpx.Response:
    body = b"".join(openai_chunk(piece) for piece in pieces)
    body += openai_chunk(None, "stop") + openai_usage(tokens) + b"data: [DONE]\n\n"
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def openai_error(status: int, message: str = "failure") -> httpx.Response:
    error = {"message": message, "type": "server_error", "code": None}
    return httpx.Response(status, json={"error": error})


# -- Cohere -----------------------------------------------------------------------------


def cohere_ranking(indices: Sequence[int]) -> httpx.Response:
    """A v2 rerank reply: `indices` (0-based, into the documents sent) best first."""
    results = [
        {"index": index, "relevance_score": round(1.0 - rank / 10, 2)}
        for rank, index in enumerate(indices)
    ]
    body = {"id": "rr-1", "results": results, "meta": {"billed_units": {"search_units": 1}}}
    return httpx.Response(200, json=body)


def cohere_error(status: int, message: str = "failure") -> httpx.Response:
    return httpx.Response(status, json={"message": message})


# -- streams that stall or break ----------------------------------------------------------


class Stream(httpx.AsyncByteStream):
    """A streamed body sent piece by piece: then it ends, stalls or breaks.

    It records how many pieces were sent and whether the client closed it, from
    whichever thread the server runs on. With `held`, the pieces after the first wait
    until the test sets it: what a client sees before the rest is sent is then no race."""

    def __init__(
        self,
        pieces: Sequence[bytes],
        then: str = "end",
        pause: float = 0.0,
        stall: float = 30.0,
        held: threading.Event | None = None,
    ) -> None:
        self.pieces = list(pieces)
        self.then = then
        self.pause = pause
        self.stall = stall
        self.held = held
        self.sent = 0
        self.closed = threading.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            if self.closed.is_set():
                return
            yield piece
            self.sent += 1
            if self.held is not None and self.sent == 1:
                assert await asyncio.to_thread(self.held.wait, 30), "the test never let it on"
            await asyncio.sleep(self.pause)
        if self.then == "stall":
            await asyncio.sleep(self.stall)
        elif self.then == "break":
            raise httpx.ReadError("connection reset by peer")

    async def aclose(self) -> None:
        self.closed.set()


def streamed(stream: Stream) -> httpx.Response:
    return httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
