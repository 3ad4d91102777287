"""How a command runs: the service opened around its work (the model loaded, or only
the store), and its output on stdout."""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from knowledge_api import compose, tracing
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def with_service(
    settings: Settings, work: Callable[[KnowledgeService], Awaitable[int]], model: bool = True
) -> int:
    async def run() -> int:
        service = compose.build_service(settings)
        await (service.start() if model else service.open_storage())
        try:
            return await work(service)
        finally:
            await service.stop()

    # traced (an ingest: a trace per batch) when OTEL_EXPORTER_OTLP_ENDPOINT says so
    traces = tracing.configure(settings) if tracing.traces_endpoint(settings) else None
    try:
        return asyncio.run(run())
    finally:
        if traces is not None:
            tracing.disable()  # what is queued is sent first, for a few seconds at most


def with_storage(settings: Settings, work: Callable[[KnowledgeService], Awaitable[int]]) -> int:
    """Run `work` with the store and keys open and the model not loaded."""
    return with_service(settings, work, model=False)


Work = Callable[[KnowledgeService, argparse.Namespace], Awaitable[int]]
"""A command's work on the open service, with its arguments; its exit status."""


def on_storage(work: Work) -> Callable[[Settings, argparse.Namespace], int]:
    """A command that is only its work on the store and keys (no model): the command
    for `args.run`. A command that checks its arguments before anything opens keeps
    its own `run_*` around `with_storage`."""

    @functools.wraps(work)
    def run(settings: Settings, args: argparse.Namespace) -> int:
        return with_storage(settings, lambda service: work(service, args))

    return run


def print_json(value: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


def split(values: str) -> list[str]:
    return [value.strip() for value in values.split(",") if value.strip()]
