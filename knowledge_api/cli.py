"""knowledge-api serve | ingest | query"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.models import SOURCE_TYPES, QueryRequest
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        result: int = args.run(settings, args)
        return result
    except KnowledgeAPIError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="knowledge-api", description=__doc__)
    commands = root.add_subparsers(required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="override KNOWLEDGE_API_HOST")
    serve.add_argument("--port", type=int, help="override KNOWLEDGE_API_PORT")
    serve.set_defaults(run=run_serve)

    ingest = commands.add_parser("ingest", help="index Markdown, text, HTML and JSONL files")
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ingest.add_argument(
        "--source-type",
        choices=SOURCE_TYPES,
        help="default: wiki for documents, knowledge for JSONL",
    )
    ingest.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata added to every document (repeatable)",
    )
    ingest.add_argument("--base-url", default="", help="URL prefix of the files' paths")
    ingest.set_defaults(run=run_ingest)

    query = commands.add_parser("query", help="ask a question, print the JSON response")
    query.add_argument("text")
    query.add_argument("--limit", type=int, default=5)
    query.add_argument("--sources", default="", help="comma-separated source types")
    query.add_argument("--no-synthesize", action="store_true")
    query.set_defaults(run=run_query)
    return root


def run_serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from knowledge_api.app import create_app

    settings = settings.replace(host=args.host or settings.host, port=args.port or settings.port)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
        loop="uvloop",
        http="httptools",
    )
    return 0


def run_ingest(settings: Settings, args: argparse.Namespace) -> int:
    options = LoadOptions(
        source_type=args.source_type, metadata=parse_meta(args.meta), base_url=args.base_url
    )

    async def ingest(service: KnowledgeService) -> int:
        from tqdm import tqdm

        documents = list(load_paths(args.paths, options))
        started = time.perf_counter()
        with tqdm(total=len(documents), unit="doc", file=sys.stderr, disable=None) as bar:
            summary = await service.ingest(documents, progress=bar.update)
        seconds = time.perf_counter() - started
        print(
            f"{summary.documents} documents indexed ({summary.chunks} chunks, "
            f"{summary.embedded} embedded), {summary.skipped} unchanged skipped, "
            f"in {seconds:.1f}s ({summary.chunks / max(seconds, 1e-9):.0f} chunks/s)"
        )
        return 0

    return with_service(settings, ingest)


def run_query(settings: Settings, args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {
        "query": args.text,
        "limit": args.limit,
        "synthesize": not args.no_synthesize,
    }
    if args.sources:
        payload["sources"] = args.sources.split(",")
    request = QueryRequest.from_payload(payload)

    async def ask(service: KnowledgeService) -> int:
        response = await service.query(request)
        sys.stdout.buffer.write(orjson.dumps(response, option=orjson.OPT_INDENT_2) + b"\n")
        return 0

    return with_service(settings, ask)


def with_service(settings: Settings, work: Callable[[KnowledgeService], Awaitable[int]]) -> int:
    async def run() -> int:
        service = KnowledgeService.from_settings(settings)
        await service.start()
        try:
            return await work(service)
        finally:
            await service.stop()

    return asyncio.run(run())


def parse_meta(pairs: list[str]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --meta takes KEY=VALUE, got {pair!r}")
        meta[key] = value
    return meta
