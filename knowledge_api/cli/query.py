"""`query` and `mcp`: asking the knowledge base from a terminal, or through an MCP
client on stdin/stdout."""

from __future__ import annotations

import argparse
from typing import Any

from knowledge_api.cli.running import print_json, split, with_service
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def run_query(settings: Settings, args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {
        "query": args.text,
        "limit": args.limit,
        "synthesize": not args.no_synthesize,
        "collection": args.collection,
    }
    if args.sources:
        payload["sources"] = split(args.sources)
    if args.threshold is not None:
        payload["threshold"] = args.threshold
    from knowledge_api.usecases.query import query
    from knowledge_api.views.query import parse, render

    params, _, _ = parse(payload)  # checked before the model loads
    if args.url:
        from knowledge_api.client import KnowledgeClient

        with KnowledgeClient(args.url, args.api_key) as remote:
            text = payload.pop("query")
            return show(remote.query(text, **payload), args.json)

    async def ask(service: KnowledgeService) -> int:
        return show(render(await query(service, params)), args.json)

    return with_service(settings, ask)


def show(response: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print_json(response)
    else:
        print(readable(response))
    return 0


def readable(response: dict[str, Any]) -> str:
    """The answer, then its numbered sources: [n] in the answer is source n."""
    lines = []
    if response.get("synthesis"):
        lines += [response["synthesis"], ""]
    results = response["results"]
    lines.append("Sources:" if results else "No source reaches the threshold.")
    for n, result in enumerate(results, start=1):
        meta = result["metadata"]
        where = " > ".join(part for part in (meta.get("title"), meta.get("section")) if part)
        lines.append(f"[{n}] {where or result['source_id']}")
        lines.append(
            f"    {result['source_type']}: {result['source_id']}"
            f"  (similarity {result['similarity']:.2f})"
        )
    lines += [f"warning: {warning}" for warning in response.get("warnings", [])]
    return "\n".join(lines)


def run_mcp(settings: Settings, args: argparse.Namespace) -> int:
    """The MCP tools over stdio: stdout carries the protocol, the log goes to stderr."""
    from knowledge_api.mcp import server as mcp

    async def serve(service: KnowledgeService) -> int:
        await mcp.build(service, settings).run_stdio_async()
        return 0

    return with_service(settings, serve)
