"""Chat clients as they are: the Vercel AI SDK's UI message stream (POST /v1/chat, what
`useChat` reads) and OpenAI's chat completions (POST /v1/chat/completions, for
LibreChat, Open WebUI and the OpenAI SDKs). Both answer the latest user message with
the grounded-answer pipeline of /v1/knowledge/answer: its retrieval, synthesis chain,
cache, citations and confidence; sources come as AI SDK source parts or as OpenAI
url_citation annotations, plus a numbered list under the answer."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from knowledge_api import validation, views
from knowledge_api.errors import InvalidRequest, KnowledgeAPIError
from knowledge_api.models import DEFAULT_COLLECTION, SETTINGS_RANKING, Ranking, SearchHit
from knowledge_api.routes import models
from knowledge_api.service import KnowledgeService, Served
from knowledge_api.spans import Unit
from knowledge_api.usecases import answers, conversation, references
from knowledge_api.usecases.answers import AnswerParams, GroundedAnswer
from knowledge_api.usecases.conversation import Rewrite
from knowledge_api.usecases.references import Turn
from knowledge_api.views import CHAT_OFFSETS, COLLECTIONS, FILTERS, RANKING
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, Boolean, CollectionName, CollectionNames, Custom, Number
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import (
    ANY,
    BOOLEAN,
    INTEGER,
    NUMBER,
    STRING,
    Schema,
    array,
    nullable,
    obj,
)
from knowledge_api.web.sse import UNEXPECTED, log

UI_STREAM_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}
SOURCE_LINE = re.compile(r"^\[\d+\] (.+?)(?: \(https?://\S+\))?$")
"""A line of the numbered sources under an answer (`footer`), as a client sends it back."""
REWRITE = obj(
    {
        "question": STRING,
        "by": STRING,
        "cited_sources": array(STRING),
        "fallback": nullable(STRING),
        "cache_hit": BOOLEAN,
        "rewrite_ms": NUMBER,
    }
)
"""The standalone question searched for the latest user message, and how it was made
(`by`: none, offline, or the LLM link; `fallback`: why an LLM rewrite was not used)."""
COMPLETION = obj(
    {
        "id": STRING,
        "object": STRING,
        "created": INTEGER,
        "model": STRING,
        "choices": array(obj({"index": INTEGER, "message": obj({}, extra=True)}, extra=True)),
        "rewrite": REWRITE,
        "citations": views.CITATIONS,
    },
    extra=True,
)
"""A chat.completion (without `stream`); with `stream: true`, chat.completion.chunk
events and `data: [DONE]`. `citations`: the words behind every [n] of the answer, its
offsets in UTF-16 code units unless the request says `offsets: "codepoints"`."""
UI_EVENTS = {
    **obj({"data": STRING}, {"event": STRING}),
    "description": "Server-Sent Events of `data:` lines only: JSON parts of type start, "
    "text-start, text-delta, text-end, source-url, source-document, message-metadata, "
    "finish (or error), then `data: [DONE]`. The message-metadata part holds `rewrite`, "
    "the standalone question searched; each source part's providerMetadata.knowledge."
    "citations the words behind each [n] citing it.",
}
COMPLETION_EVENTS = {
    **obj({"data": STRING}, {"event": STRING}),
    "description": "Server-Sent Events of `data:` lines: chat.completion.chunk objects, "
    "the last with finish_reason stop, `rewrite` (the standalone question searched) and "
    "`citations` (the words behind each [n]), then `data: [DONE]`.",
}


# -- the conversation ---------------------------------------------------------------


def said_in(message: Any, where: str) -> tuple[str, str | list[Any] | None]:
    """(role, what it says) of an AI SDK UIMessage (`parts`) or an OpenAI message
    (`content`), checked: 400 naming the message when it is malformed."""
    body = validation.require_object(message, where)
    role = body.get("role")
    if role not in ROLES:
        raise InvalidRequest(f"{where}.role", f"must be one of {', '.join(ROLES)}")
    content = body.get("parts", body.get("content"))
    if content is not None and not isinstance(content, str | list):
        raise InvalidRequest(f"{where}", "needs `parts` (AI SDK) or `content` (OpenAI)")
    return role, content


def text_of(content: str | list[Any] | None) -> str:
    """The text of a message's `parts` or `content` (`said_in`)."""
    if content is None:  # OpenAI: an assistant message that only calls tools has no text
        return ""
    if isinstance(content, list):
        content = "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    # a NUL carries nothing in a conversation, and Postgres keeps none in a text: the
    # question made from it would fail there (messages are free-form, not refused)
    return content.replace("\x00", "")


def cited_of(message: Any, text: str) -> tuple[str, ...]:
    """Titles of the sources an earlier answer listed: its AI SDK source parts, or the
    numbered lines under its text."""
    parts = message.get("parts") if isinstance(message, dict) else None
    if isinstance(parts, list):
        titles = tuple(
            part["title"]
            for part in parts
            if isinstance(part, dict)
            and part.get("type") in ("source-url", "source-document")
            and isinstance(part.get("title"), str)
        )
        if titles:
            return titles
    _, _, listed = text.rpartition("\nSources:\n")
    found = (SOURCE_LINE.match(line.strip()) for line in listed.splitlines())
    return tuple(match.group(1) for match in found if match)


def turns(messages: Any, where: str = "messages") -> list[Turn]:
    """The latest turns of the conversation as the client sends it back, those a
    question is made from (`references.MAX_TURNS` user turns before the latest, and
    what follows them); every message is checked (400 naming one that is malformed),
    only those turns are read."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(where, "must be a non-empty list of messages")
    said = [said_in(message, f"{where}[{i}]") for i, message in enumerate(messages)]
    texts: dict[int, str] = {}
    questions = 0
    start = 0
    for i in range(len(said) - 1, -1, -1):  # back to the oldest user turn read
        role, content = said[i]
        if role == "user":
            texts[i] = text_of(content)
            questions += bool(texts[i].strip())
            if questions > references.MAX_TURNS:
                start = i
                break
    read = []
    for i in range(start, len(said)):
        role, content = said[i]
        text = texts[i] if i in texts else text_of(content)
        cited = cited_of(messages[i], text) if role == "assistant" else ()
        read.append(Turn(role, text, cited))
    return read


def asked(
    messages: Any,
    threshold: float,
    collection: str,
    where: Any = None,
    ranking: Ranking = SETTINGS_RANKING,
    collections: tuple[str, ...] = (),
) -> tuple[list[Turn], AnswerParams]:
    """The conversation and where to search (its question still to be made), under the
    request's filter and ranking."""
    said = turns(messages)
    if not any(turn.role == "user" and turn.text.strip() for turn in said):
        raise InvalidRequest("messages", "must hold a user message with text")
    scope = AnswerParams(
        query="",
        threshold=threshold,
        filters=where,
        collection=collection,
        ranking=ranking,
        collections=collections,
    )
    return said, scope


async def question(
    knowledge: KnowledgeService, said: list[Turn], scope: AnswerParams
) -> tuple[AnswerParams, Rewrite]:
    """What to answer: the standalone question made from the conversation (its
    rewrite is shown with the answer). Called once the caller may search the
    collection, so a refused request costs no LLM call."""
    rewrite = await conversation.standalone(knowledge, said)
    return replace(scope, query=rewrite.question, context=rewrite.context), rewrite


ROLES = ("user", "assistant", "system", "developer", "tool", "function")
NOT_BLANK = {"type": "string", "pattern": validation.NOT_BLANK_PATTERN}
SAID: Schema = {"type": ["string", "array", "null"]}
"""A message's `parts` (AI SDK) or `content` (OpenAI): text, or parts of which those of
type text count (`text_of`); null where OpenAI's assistant message only calls tools."""
HAS_TEXT = {
    "anyOf": [
        NOT_BLANK,
        {
            "type": "array",
            "contains": obj({"type": {"const": "text"}, "text": NOT_BLANK}, extra=True),
        },
    ]
}
MESSAGES: Schema = {
    "type": "array",
    "minItems": 1,
    "items": obj({"role": {"enum": list(ROLES)}}, {"parts": SAID, "content": SAID}, extra=True),
    "contains": {  # the question: a user message with text (parts first, as `text_of`)
        "properties": {"role": {"const": "user"}},
        "anyOf": [
            {"required": ["parts"], "properties": {"parts": HAS_TEXT}},
            {
                "not": {"required": ["parts"]},
                "required": ["content"],
                "properties": {"content": HAS_TEXT},
            },
        ],
    },
}
"""The conversation, as `question` reads it."""
CONVERSATION = Custom(
    "messages", "The conversation; the latest user message is answered.", shape=MESSAGES
)
UNUSED = "Sent by the AI SDK; not used."
UI_CHAT = Body(
    "ChatRequest",
    CONVERSATION,
    CollectionName("collection", "The collection to search.", DEFAULT_COLLECTION),
    COLLECTIONS,
    Number(
        "threshold",
        "Lowest similarity of a passage that may ground the answer (default: "
        "KNOWLEDGE_ANSWER_THRESHOLD).",
        None,
    ),
    FILTERS,
    RANKING,
    CHAT_OFFSETS,
    *(Custom(name, UNUSED, None, shape=ANY) for name in ("id", "trigger", "messageId", "metadata")),
)
"""The AI SDK's request (useChat)."""
COMPLETION_REQUEST = Body(
    "ChatCompletionRequest",
    Custom(
        "model",
        "A collection, or knowledge for the default one (GET /v1/models lists them).",
        models.DEFAULT_MODEL,
        shape={"type": "string", "pattern": validation.COLLECTION_PATTERN},
    ),
    CONVERSATION,
    CollectionNames(
        "collections",
        "Several collections searched as one (1-10 names), instead of the one `model` "
        "names; `model` is still echoed.",
        None,
        single="",
    ),
    Boolean("stream", "Answer as chat.completion.chunk events.", False),
    FILTERS,
    RANKING,
    CHAT_OFFSETS,
    others_ignored=True,
)
"""OpenAI's request: fields of OpenAI's this service has no use for (temperature, n,
user ...) are ignored, unlike on the knowledge routes."""


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
    defaults = {"threshold": knowledge.answer_threshold}
    body = await read_json(request, limit=knowledge.settings.max_chat_bytes)
    values = UI_CHAT.parse(body, defaults=defaults)
    said, scope = asked(
        values["messages"],
        values["threshold"],
        values["collection"],
        values["filters"],
        values["ranking"],
        values["collections"],
    )
    access(request).searches(scope.searched)
    scope = access(request).asking(scope)
    params, rewrite = await question(knowledge, said, scope)
    events = answers.events(knowledge, params)
    first = await anext(events)  # bad input and an unavailable store keep their status
    return StreamingResponse(
        ui_stream(first, events, rewrite, values["offsets"]),
        media_type="text/event-stream",
        headers=UI_STREAM_HEADERS,
    )


async def ui_stream(
    first: tuple[str, Any],
    events: AsyncGenerator[tuple[str, Any], None],
    rewrite: Rewrite,
    unit: Unit = "utf16",
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
                for chunk in ui_done(grounded, f"text-{part}", streamed, rewrite, unit):
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


def ui_done(
    grounded: GroundedAnswer,
    text_id: str,
    streamed: bool,
    rewrite: Rewrite,
    unit: Unit = "utf16",
) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    if not streamed and said_text(grounded):
        chunks.append({"type": "text-delta", "id": text_id, "delta": said_text(grounded)})
    chunks.append({"type": "text-end", "id": text_id})
    cited = citations_of(grounded, unit)
    for n, hit in grounded.sources:
        url = source_url(hit)
        own = [citation for citation in cited if citation["n"] == n]
        source = {
            "sourceId": f"{n}",
            "title": source_title(hit),
            "providerMetadata": {"knowledge": {"citations": own}},
        }
        if url:
            chunks.append({"type": "source-url", "url": url, **source})
        else:
            chunks.append({"type": "source-document", "mediaType": "text/plain", **source})
    metadata = {
        "query_id": grounded.query_id,
        "status": grounded.status,
        "confidence": grounded.confidence.view(),
        "provider": grounded.outcome.provider if grounded.outcome else None,
        "rewrite": rewrite.view(),
        "ranking": grounded.ranking,
    }
    chunks.append({"type": "message-metadata", "messageMetadata": metadata})
    chunks.append({"type": "finish"})
    return chunks


def citations_of(grounded: GroundedAnswer, unit: Unit) -> list[dict[str, Any]]:
    """The evidence of every citation marker of the answer (none without an answer)."""
    return views.citations_view(grounded.outcome, unit) if grounded.answer else []


def data(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def failure_text(error: Exception) -> str:
    if isinstance(error, KnowledgeAPIError):
        return error.message
    log.error("unhandled error in a chat stream", exc_info=error)
    return UNEXPECTED


# -- POST /v1/chat/completions: OpenAI's chat completions ---------------------------------


async def completions(request: Request) -> Response:
    knowledge = service(request)
    values = COMPLETION_REQUEST.parse(
        await read_json(request, limit=knowledge.settings.max_chat_bytes)
    )
    model, stream, unit = values["model"], values["stream"], values["offsets"]
    if not validation.valid_collection(model):
        raise InvalidRequest("model", "must name a collection, or knowledge for the default")
    collection = models.collection_of(model)
    said, scope = asked(
        values["messages"],
        knowledge.answer_threshold,
        collection,
        values["filters"],
        values["ranking"],
        values["collections"],  # several, instead of the model's
    )
    access(request).searches(scope.searched)
    scope = access(request).asking(scope)
    params, rewrite = await question(knowledge, said, scope)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not stream:
        served = await answers.answer(knowledge, params)
        grounded = served.value
        return JSONResponse(completion(completion_id_of(grounded), model, served, rewrite, unit))
    events = answers.events(knowledge, params)
    first = await anext(events)
    chunks = completion_chunks(completion_id, model, first, events, rewrite, unit)
    return StreamingResponse(chunks, media_type="text/event-stream", headers=UI_STREAM_HEADERS)


def completion_id_of(grounded: GroundedAnswer) -> str:
    """`chatcmpl-<query_id>`: the id a client rates the answer by
    (POST /v1/knowledge/feedback takes the query_id after the prefix, or all of it)."""
    return f"chatcmpl-{grounded.query_id}"


def completion(
    completion_id: str,
    model: str,
    served: Served[GroundedAnswer],
    rewrite: Rewrite,
    unit: Unit = "utf16",
) -> dict[str, Any]:
    grounded = served.value
    content = said_text(grounded) + footer(grounded)
    cited = citations_of(grounded, unit)
    message = {
        "role": "assistant",
        "content": content,
        "annotations": url_citations(cited, grounded),
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
        "citations": cited,
        "rewrite": rewrite.view(),
        "ranking": grounded.ranking,
    }


def url_citations(cited: list[dict[str, Any]], grounded: GroundedAnswer) -> list[dict[str, Any]]:
    """A url_citation for each citation marker of a source with a URL, over the
    sentence it cites through its last marker (`answer` of the citation, in the
    route's unit)."""
    found = []
    sources = dict(grounded.sources)
    for citation in cited:
        hit = sources.get(citation["n"])
        url = source_url(hit) if hit is not None else ""
        if url and hit is not None:
            annotation = {
                "url": url,
                "title": source_title(hit),
                "start_index": citation["answer"]["start"],
                "end_index": citation["answer"]["end"],
            }
            found.append({"type": "url_citation", "url_citation": annotation})
    return found


async def completion_chunks(
    completion_id: str,
    model: str,
    first: tuple[str, Any],
    events: AsyncGenerator[tuple[str, Any], None],
    rewrite: Rewrite,
    unit: Unit = "utf16",
) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
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
                cited = citations_of(grounded, unit)
                yield chunk({"content": rest, "annotations": url_citations(cited, grounded)})
                # streamed, the id is sent before the answer exists: the last chunk
                # names the query_id (the one a rating refers to)
                last = {"query_id": grounded.query_id, "rewrite": rewrite.view()}
                yield chunk({}, "stop", **last, citations=cited)
    except Exception as e:
        yield data({"error": {"message": failure_text(e), "type": "server_error"}})
    yield b"data: [DONE]\n\n"
