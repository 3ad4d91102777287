"""The MCP server: the knowledge base as tools for an LLM client, over streamable HTTP
at /mcp (in the HTTP app, behind its API keys: mcp/endpoint.py) and over stdio
(`knowledge-api mcp`).

Each tool parses its arguments with the same request bodies the HTTP routes declare,
calls the same use cases and renders the same views, so a tool answers what the route
answers. A bad argument is a tool error naming the field and the rule it broke.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ListToolsResult, ToolAnnotations
from pydantic import Field
from starlette.requests import Request

from knowledge_api import tracing
from knowledge_api.errors import CollectionNotFound, KnowledgeAPIError, NotFound
from knowledge_api.ledger import Actor, changes, local_user
from knowledge_api.models import DEFAULT_COLLECTION
from knowledge_api.ranking import MAX_OFFSET
from knowledge_api.routes import answer as answer_route
from knowledge_api.routes import chat, detail, documents
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import answers, conversation
from knowledge_api.usecases import query as query_use
from knowledge_api.usecases.references import Turn
from knowledge_api.views import document_view
from knowledge_api.views import query as query_contract
from knowledge_api.web.access import EVERYONE, WRITE, Access, access
from knowledge_api.web.traces import CONTEXT

WRITING_TOOLS = frozenset({"add_document"})
INSTRUCTIONS = (
    "A knowledge base of indexed documents (docs, tickets, commits, KB articles) in "
    "collections. Use `answer` for a question that needs a grounded answer with numbered "
    "sources, `search` for the passages themselves, `get_document` for the full record "
    "behind a result, `list_collections` to see what can be searched."
)

Query = Annotated[str, Field(description="The question or search text.")]
CollectionArg = Annotated[
    str,
    Field(description="The collection to search (see list_collections)."),
]
CollectionsArg = Annotated[
    list[str] | None,
    Field(
        description="Several collections (1-10) searched as one ranking, instead of `collection`.",
    ),
]
History = Annotated[
    list[dict[str, Any]] | None,
    Field(
        description="The conversation before this question, oldest first: messages "
        "{role: user|assistant, content: text}, the answers with the sources they listed. "
        "A follow-up is then searched as a standalone question."
    ),
]
Sources = Annotated[
    list[str] | None,
    Field(description="Source types to search, e.g. ['docs', 'jira']; all when absent."),
]
Limit = Annotated[int, Field(description="Most results returned (1-20).")]
Filters = Annotated[
    dict[str, Any] | None,
    Field(
        description="What results must match: metadata keys and source_type, source_id, "
        "created_at, updated_at, each to a value or {operator: value} ($eq $ne $gt $gte $lt "
        "$lte $in $nin $exists $contains), combined with $and/$or/$not; e.g. "
        "{'app_under_test': 'web', 'created_at': {'$gte': '2026-01-01'}}."
    ),
]
Offset = Annotated[
    int,
    Field(
        description="Character offset into the result: 0 for the start; a truncated result "
        "names the offset of its rest."
    ),
]
Skip = Annotated[
    int,
    Field(
        description="Results skipped (0-200): the next page of results starts at the "
        "`next_skip` of the page before."
    ),
]
Offsets = Annotated[
    str,
    Field(
        description="How the offsets of `citations` count: codepoints (Python's string "
        "indices) or utf16 (JavaScript's)."
    ),
]
RankingArg = Annotated[
    dict[str, Any] | None,
    Field(
        description="This search's own ranking, each key optional: fusion (convex or rrf), "
        "vector_weight (0-1), prf (true/false: the feedback round), recency ({field: "
        "created_at, half_life_days: N}: newer first), rerank (true/false)."
    ),
]


def caller(ctx: Context[Any, Any]) -> Access:
    """The caller of an HTTP tool call, as /mcp's guard found it; over stdio the local
    user, who may do everything the command line may."""
    request = ctx.request_context.request
    return access(request) if isinstance(request, Request) else EVERYONE


def tool_actor(ctx: Context[Any, Any], who: Access) -> Actor:
    """Who writes through a tool: the key and request id of an HTTP call, the local user
    over stdio."""
    request = ctx.request_context.request
    if isinstance(request, Request):
        return Actor(who.name, getattr(request.state, "request_id", None))
    return local_user()


def clipped(body: Any, offset: int, max_chars: int) -> str:
    """`body` as JSON, at most `max_chars` of it from `offset`, saying how to get the rest."""
    text = json.dumps(body, ensure_ascii=False, indent=1)
    if offset < 0 or (offset and offset >= len(text)):
        raise ToolError(f"offset: must be between 0 and {max(len(text) - 1, 0)}")
    part = text[offset : offset + max_chars]
    end = offset + len(part)
    if end < len(text):
        part += (
            f"\n[truncated: characters {offset}-{end} of {len(text)} shown; call this tool "
            f"again with the same arguments and offset={end} for the rest]"
        )
    return part


def steady(body: dict[str, Any], *measured: str) -> dict[str, Any]:
    """A route's body without what is measured anew on every call (ids, timings): the
    same call renders the same text, so an offset continues where the last part ended."""
    return {name: value for name, value in body.items() if name not in measured}


@contextmanager
def tool_errors(ctx: Context[Any, Any] | None = None) -> Iterator[None]:
    """A request the service refuses is a tool error saying what to fix; a missing
    collection's names only those the caller may reach."""
    try:
        yield
    except CollectionNotFound as e:
        seen = e.seen_by(caller(ctx).reaches) if ctx is not None else e
        raise ToolError(seen.message) from e
    except KnowledgeAPIError as e:
        raise ToolError(e.message) from e


def payload(**values: Any) -> dict[str, Any]:
    """The arguments a caller gave, as the HTTP body they stand for."""
    return {name: value for name, value in values.items() if value is not None}


def named(collection: str, collections: list[str] | None) -> dict[str, Any]:
    """Where a tool searches, as the HTTP body says it: `collections` when given (a
    `collection` other than the default beside them is the routes' 400)."""
    if collections is None:
        return {"collection": collection}
    if collection == DEFAULT_COLLECTION:
        return {"collections": collections}
    return {"collection": collection, "collections": collections}


def build(service: KnowledgeService, settings: Settings) -> MCPServer:
    server: MCPServer = MCPServer(
        "knowledge-api", instructions=INSTRUCTIONS, middleware=[TracedTools(), ScopedTools()]
    )
    max_chars = settings.mcp_max_chars

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search(
        query: Query,
        limit: Limit = 5,
        collection: CollectionArg = DEFAULT_COLLECTION,
        collections: CollectionsArg = None,
        sources: Sources = None,
        filters: Filters = None,
        offset: Offset = 0,
        skip: Skip = 0,
        ranking: RankingArg = None,
        *,
        ctx: Context[Any, Any],
    ) -> str:
        """Search the knowledge base: the passages most similar to the query, fused from
        every source, each with its source_type, source_id, similarity and metadata. Pass
        a result's source_type and source_id to get_document for the whole record; pass
        `next_skip` as `skip` for the next results."""
        if not 0 <= skip <= MAX_OFFSET:
            raise ToolError(f"skip: must be between 0 and {MAX_OFFSET}")
        with tool_errors(ctx):
            body = payload(
                query=query,
                **named(collection, collections),
                sources=sources,
                filters=filters,
                ranking=ranking,
            )
            params, _, _ = query_contract.parse(
                {**body, "limit": limit, "synthesize": False, "offset": skip}
            )
            caller(ctx).searches(params.searched)
            params = caller(ctx).asking(params)
            served = await query_use.query(service, params)
        found = steady(query_contract.render(served), "metrics")
        found["next_skip"] = found.pop("next_offset")
        return clipped(found, offset, max_chars)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def answer(
        query: Query,
        ctx: Context[Any, Any],
        collection: CollectionArg = DEFAULT_COLLECTION,
        collections: CollectionsArg = None,
        sources: Sources = None,
        filters: Filters = None,
        offset: Offset = 0,
        history: History = None,
        ranking: RankingArg = None,
        offsets: Offsets = "codepoints",
    ) -> str:
        """Answer a question from the knowledge base: a grounded answer whose [n] marks
        cite the numbered sources listed with it, a confidence (overall 0-1 and a level)
        and a status: insufficient_context when nothing relevant was found (say so rather
        than guess). `citations` quotes, for every [n], the words of source n behind it
        and where they sit in the source, its document and the answer. With the
        conversation so far in `history`, a follow-up ("and how is it configured?") is
        searched as the standalone question shown under `rewrite`."""
        with tool_errors(ctx):
            said = [*chat.turns(history, "history"), Turn("user", query)] if history else None
            params, _, unit = answer_route.parse(
                payload(
                    query=query,
                    **named(collection, collections),
                    sources=sources,
                    filters=filters,
                    ranking=ranking,
                    offsets=offsets,
                ),
                service.answer_threshold,
            )
            caller(ctx).searches(params.searched)
            params = caller(ctx).asking(params)
            rewrite = await conversation.standalone(service, said) if said else None
            if rewrite is not None:
                params = replace(params, query=rewrite.question, context=rewrite.context)
            served = await answers.answer(service, params)
        body = steady(answer_route.render(served, unit), "metadata")
        if rewrite is not None:
            body["rewrite"] = steady(rewrite.view(), "rewrite_ms", "cache_hit")
        return clipped(body, offset, max_chars)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_document(
        type: Annotated[
            str, Field(description="The result's source_type, e.g. docs, jira, git, kb.")
        ],
        id: Annotated[
            str, Field(description="The result's source_id (or a document or chunk id).")
        ],
        ctx: Context[Any, Any],
        collection: Annotated[str, Field(description="The collection it is in.")] = (
            DEFAULT_COLLECTION
        ),
        offset: Offset = 0,
        source: Annotated[
            str | None,
            Field(
                description="The source whose record to show, when several sources hold "
                "one of this source_id (the error lists them); empty: the record of no source."
            ),
        ] = None,
    ) -> str:
        """The full record behind a search or answer result: its whole content, title,
        metadata and chunks."""
        with tool_errors(ctx):
            source_type = detail.TYPE.parse({"type": type}, detail.TYPE.default)
            key = detail.ID.parse({"id": id}, detail.ID.default)
            name = detail.COLLECTION.parse({"collection": collection}, DEFAULT_COLLECTION)
            owner = detail.SOURCE.parse({"source": source}, None)
            who = caller(ctx)
            who.collection(name)
            doc = await service.find_document(source_type, key, name, owner, who.principals)
            if doc is None:
                await service.require_collection(name, who.principals)
                raise NotFound(
                    f"no {source_type} record with id {key!r} in collection {name!r}: "
                    "use a source_type and source_id from search results"
                )
        return clipped(document_view(doc), offset, max_chars)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_collections(ctx: Context[Any, Any]) -> str:
        """The collections you can search, each with its document count."""
        who = caller(ctx)
        with tool_errors():
            counts = await service.collections(who.principals)
        return json.dumps(
            {
                "collections": [
                    {"name": name, "documents": counts[name]} for name in who.visible(counts)
                ]
            },
            indent=1,
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    async def add_document(
        source_type: Annotated[
            str, Field(description="Where the document comes from: docs, jira, git or kb.")
        ],
        source_id: Annotated[str, Field(description="Its id there: a Jira key, a URL.")],
        content: Annotated[
            str, Field(description="Its text; Markdown headings give passages their section.")
        ],
        ctx: Context[Any, Any],
        title: Annotated[str, Field(description="Its title.")] = "",
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Metadata values, e.g. app_under_test.")
        ] = None,
        collection: Annotated[str, Field(description="The collection to index into.")] = (
            DEFAULT_COLLECTION
        ),
    ) -> str:
        """Index a document so search and answer find it (replaces the document with the
        same source_type and source_id). Needs a key with the write scope."""
        with tool_errors():
            who = caller(ctx)
            if not who.allows(WRITE):
                raise ToolError(f"the key {who.name!r} lacks the 'write' scope add_document needs")
            body = {"source_type": source_type, "source_id": source_id, "content": content}
            optional = payload(title=title, metadata=metadata, collection=collection)
            doc = documents.parse_document({**body, **optional}, "arguments")
            who.collection(doc.collection)
            summary = await service.ingest([doc])
            await service.audit(
                tool_actor(ctx, who), "mcp add_document", doc.collection, changes([doc], summary)
            )
        return json.dumps(
            {"id": doc.id, "indexed": summary.documents, "chunks": summary.chunks}, indent=1
        )

    return server


class TracedTools:
    """A tool call's span (the MCP semantic conventions): the child of the HTTP
    request that carried it, though the MCP server runs it in a task of its own; the
    root of its trace over stdio."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call" or not tracing.recording():
            return await call_next(ctx)
        request = ctx.request
        parent = (
            request.scope.get("state", {}).get(CONTEXT) if isinstance(request, Request) else None
        )
        tool = str((ctx.params or {}).get("name", ""))
        attributes = {
            "mcp.method.name": ctx.method,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "mcp.protocol.version": ctx.protocol_version,
        }
        if ctx.request_id is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        with tracing.within(parent), tracing.span(f"tools/call {tool}", attributes) as span:
            result = await call_next(ctx)
            if getattr(result, "isError", False) or getattr(result, "is_error", False):
                span.set_attribute("error.type", "tool_error")
                tracing.failed(span, "the tool answered with an error")
            return result


class ScopedTools:
    """tools/list offers a caller only the tools its key may call."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        request = ctx.request
        if (
            ctx.method == "tools/list"
            and isinstance(request, Request)
            and not access(request).allows(WRITE)
        ):
            return without_writing_tools(result)
        return result


def without_writing_tools(result: HandlerResult) -> HandlerResult:
    """A tools/list result (the model or its wire form) without the writing tools."""
    if isinstance(result, ListToolsResult):
        tools = [tool for tool in result.tools if tool.name not in WRITING_TOOLS]
        return result.model_copy(update={"tools": tools})
    if isinstance(result, dict) and isinstance(result.get("tools"), list):
        kept = [
            t
            for t in result["tools"]
            if not (isinstance(t, dict) and t.get("name") in WRITING_TOOLS)
        ]
        return {**result, "tools": kept}
    return result


def security() -> TransportSecuritySettings:
    """The SDK's own Host and Origin checks off: /mcp checks both before the SDK sees
    a request (mcp/endpoint.py), Host by the rule every route follows."""
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def build_http(service: KnowledgeService, settings: Settings, path: str) -> MCPServer:
    """The server for streamable HTTP at `path`, stateless (mcp/endpoint.py runs
    its session manager and puts it behind the API keys)."""
    server = build(service, settings)
    server.streamable_http_app(
        streamable_http_path=path, stateless_http=True, transport_security=security()
    )
    return server
