"""Chat clients as they are: the Vercel AI SDK's UI message stream (POST /v1/chat, what
`useChat` reads) and OpenAI's chat completions (POST /v1/chat/completions, for
LibreChat, Open WebUI and the OpenAI SDKs). Both answer the latest user message with
the grounded-answer pipeline of /v1/knowledge/answer: its retrieval, synthesis chain,
cache, citations and confidence; sources come as AI SDK source parts or as OpenAI
url_citation annotations, plus a numbered list under the answer."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, KnowledgeAPIError
from knowledge_api.models import DEFAULT_COLLECTION, SearchHit
from knowledge_api.routes.access import access
from knowledge_api.routes.fields import INTEGER, STRING, array, obj
from knowledge_api.routes.http import JSONResponse, read_json, service
from knowledge_api.routes.sse import UNEXPECTED, log
from knowledge_api.routes.views import FILTERS
from knowledge_api.service import Served
from knowledge_api.usecases import answers
from knowledge_api.usecases.answers import AnswerParams, GroundedAnswer
from knowledge_api.usecases.retrieval import require_collection

UI_STREAM_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}
MAX_QUERY = 500
SHORT_FOLLOW_UP = 8
"""A latest message of fewer words is searched together with the user's previous one
("and for Groq?" means little alone)."""
UI_FIELDS = (
    "id",
    "messages",
    "trigger",
    "messageId",
    "metadata",
    "collection",
    "threshold",
    "filters",
)
COMPLETION = obj(
    {
        "id": STRING,
        "object": STRING,
        "created": INTEGER,
        "model": STRING,
        "choices": array(obj({"index": INTEGER, "message": obj({}, extra=True)}, extra=True)),
    },
    extra=True,
)
"""A chat.completion (without `stream`); with `stream: true`, chat.completion.chunk
events and `data: [DONE]`."""
UI_EVENTS = {
    "type": "string",
    "description": "Server-Sent Events of `data:` lines only: JSON parts of type start, "
    "text-start, text-delta, text-end, source-url, source-document, message-metadata, "
    "finish (or error), then `data: [DONE]`.",
}
COMPLETION_EVENTS = {
    "type": "string",
    "description": "Server-Sent Events of `data:` lines: chat.completion.chunk objects, "
    "the last with finish_reason stop, then `data: [DONE]`.",
}


# -- the conversation ---------------------------------------------------------------


def text_of(message: Any, where: str) -> tuple[str, str]:
    """(role, text) of an AI SDK UIMessage (`parts`) or an OpenAI message (`content`)."""
    body = validation.require_object(message, where)
    role = body.get("role")
    if role not in ("user", "assistant", "system", "developer", "tool"):
        raise InvalidRequest(f"{where}.role", "must be user, assistant or system")
    content = body.get("parts", body.get("content", ""))
    if isinstance(content, str):
        return role, content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}", "needs `parts` (AI SDK) or `content` (OpenAI)")
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return role, "\n".join(texts)


def question(messages: Any, default_threshold: float, body: dict[str, Any]) -> AnswerParams:
    """What to answer: the latest user message, searched with the one before it when it
    is a short follow-up."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages", "must be a non-empty list of messages")
    said = [text_of(m, f"messages[{i}]") for i, m in enumerate(messages)]
    asked = [text.strip() for role, text in said if role == "user" and text.strip()]
    if not asked:
        raise InvalidRequest("messages", "must hold a user message with text")
    query = asked[-1]
    if len(query.split()) < SHORT_FOLLOW_UP and len(asked) > 1:
        query = f"{asked[-2]} {query}"
    collection = validation.collection_name(body.get("collection", DEFAULT_COLLECTION))
    threshold = validation.number(body, "threshold", low=0.0, high=1.0, default=default_threshold)
    where = FILTERS.parse(body, None)
    return AnswerParams(
        query=query[-MAX_QUERY:], threshold=threshold, filters=where, collection=collection
    )


def source_title(hit: SearchHit) -> str:
    return " > ".join(part for part in (hit.chunk.title, hit.chunk.section) if part) or (
        hit.source_id
    )


def source_url(hit: SearchHit) -> str:
    url = hit.metadata.get("url") or hit.source_id
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else ""


def footer(grounded: GroundedAnswer) -> str:
    """The numbered sources under the answer: [n] in the text is source n."""
    lines = [
        f"[{n}] {source_title(hit)}" + (f" ({source_url(hit)})" if source_url(hit) else "")
        for n, hit in grounded.sources
    ]
    return "\n\nSources:\n" + "\n".join(lines) if lines else ""


def said_text(grounded: GroundedAnswer) -> str:
    """The answer, or why there is none (insufficient context, an error)."""
    return grounded.answer or grounded.error_message or ""


# -- POST /v1/chat: the AI SDK UI message stream ------------------------------------------


async def chat(request: Request) -> Response:
    knowledge = service(request)
    body = validation.require_object(await read_json(request))
    validation.reject_unknown(body, UI_FIELDS)
    params = question(body.get("messages"), knowledge.answer_threshold, body)
    access(request).collection(params.collection)
    events = answers.events(knowledge, params)
    first = await anext(events)  # bad input and an unavailable store keep their status
    return StreamingResponse(
        ui_stream(first, events), media_type="text/event-stream", headers=UI_STREAM_HEADERS
    )


async def ui_stream(
    first: tuple[str, Any], events: AsyncGenerator[tuple[str, Any], None]
) -> AsyncIterator[bytes]:
    part = 1
    streamed = False
    yield data({"type": "start", "messageId": f"msg-{uuid.uuid4().hex}"})
    yield data({"type": "text-start", "id": f"text-{part}"})
    try:
        async for name, value in rest_of(first, events):
            if name == "delta":
                streamed = True
                yield data({"type": "text-delta", "id": f"text-{part}", "delta": value})
            elif name == "reset":  # a link failed mid-answer: its text stays, the next follows
                yield data({"type": "text-end", "id": f"text-{part}"})
                part += 1
                yield data({"type": "text-start", "id": f"text-{part}"})
            elif name == "done":
                grounded: GroundedAnswer = value.value
                for chunk in ui_done(grounded, f"text-{part}", streamed):
                    yield data(chunk)
    except Exception as e:
        yield data({"type": "error", "errorText": failure_text(e)})
    yield b"data: [DONE]\n\n"


async def rest_of(
    first: tuple[str, Any], events: AsyncGenerator[tuple[str, Any], None]
) -> AsyncIterator[tuple[str, Any]]:
    async with aclosing(events):  # a client gone stops generation at the provider
        yield first
        async for event in events:
            yield event


def ui_done(grounded: GroundedAnswer, text_id: str, streamed: bool) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    if not streamed and said_text(grounded):
        chunks.append({"type": "text-delta", "id": text_id, "delta": said_text(grounded)})
    chunks.append({"type": "text-end", "id": text_id})
    for n, hit in grounded.sources:
        url = source_url(hit)
        source = {"sourceId": f"{n}", "title": source_title(hit)}
        if url:
            chunks.append({"type": "source-url", "url": url, **source})
        else:
            chunks.append({"type": "source-document", "mediaType": "text/plain", **source})
    metadata = {
        "status": grounded.status,
        "confidence": grounded.confidence.view(),
        "provider": grounded.outcome.provider if grounded.outcome else None,
    }
    chunks.append({"type": "message-metadata", "messageMetadata": metadata})
    chunks.append({"type": "finish"})
    return chunks


def data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def failure_text(error: Exception) -> str:
    if isinstance(error, KnowledgeAPIError):
        return error.message
    log.error("unhandled error in a chat stream", exc_info=error)
    return UNEXPECTED


# -- POST /v1/chat/completions: OpenAI's chat completions ---------------------------------


async def completions(request: Request) -> Response:
    """OpenAI clients send many fields of their own (temperature, n, user, ...): those
    this service has no use for are ignored here, unlike on the knowledge routes."""
    knowledge = service(request)
    body = validation.require_object(await read_json(request))
    model = body.get("model", "knowledge")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model", "must name a collection, or knowledge for the default")
    collection = DEFAULT_COLLECTION if model == "knowledge" else model
    asked = {"collection": collection}
    if "filters" in body:
        asked["filters"] = body["filters"]
    params = question(body.get("messages"), knowledge.answer_threshold, asked)
    access(request).collection(params.collection)
    if model != "knowledge":
        await require_collection(knowledge, collection)  # a mistyped model: 404, as OpenAI's
    stream = validation.boolean(body, "stream", default=False)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not stream:
        served = await answers.answer(knowledge, params)
        return JSONResponse(completion(completion_id, model, served))
    events = answers.events(knowledge, params)
    first = await anext(events)
    chunks = completion_chunks(completion_id, model, first, events)
    return StreamingResponse(chunks, media_type="text/event-stream", headers=UI_STREAM_HEADERS)


def completion(completion_id: str, model: str, served: Served[GroundedAnswer]) -> dict[str, Any]:
    grounded = served.value
    content = said_text(grounded) + footer(grounded)
    message = {
        "role": "assistant",
        "content": content,
        "annotations": url_citations(content, grounded),
    }
    tokens = grounded.outcome.tokens_used if grounded.outcome else 0
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": tokens or 0,
            "total_tokens": tokens or 0,
        },
        "status": grounded.status,
        "confidence": grounded.confidence.view(),
    }


def url_citations(content: str, grounded: GroundedAnswer) -> list[dict[str, Any]]:
    """A url_citation for each cited source with a URL, over its first [n] in the text."""
    found = []
    for n, hit in grounded.sources:
        url = source_url(hit)
        start = content.find(f"[{n}]")
        if url and start >= 0:
            citation = {
                "url": url,
                "title": source_title(hit),
                "start_index": start,
                "end_index": start + len(f"[{n}]"),
            }
            found.append({"type": "url_citation", "url_citation": citation})
    return found


async def completion_chunks(
    completion_id: str,
    model: str,
    first: tuple[str, Any],
    events: AsyncGenerator[tuple[str, Any], None],
) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }
        return data(body)

    yield chunk({"role": "assistant", "content": ""})
    said = ""
    try:
        async for name, value in rest_of(first, events):
            if name == "delta":
                said += value
                yield chunk({"content": value})
            elif name == "done":
                grounded: GroundedAnswer = value.value
                rest = footer(grounded) if said else said_text(grounded) + footer(grounded)
                said += rest
                yield chunk({"content": rest, "annotations": url_citations(said, grounded)})
                yield chunk({}, "stop")
    except Exception as e:
        yield data({"error": {"message": failure_text(e), "type": "server_error"}})
    yield b"data: [DONE]\n\n"
