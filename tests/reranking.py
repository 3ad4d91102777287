"""What the provider reranker tests share: a started service over the test corpus (and
a fixture of one) and the hits of one question before and after reranking."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import respx

from knowledge_api.compose import build_service
from knowledge_api.models import SearchFilters, SearchHit
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from tests.conftest import corpus

QUESTION = "Which audio formats does asset ingestion accept?"
TOP = 4


async def started(settings: Settings) -> KnowledgeService:
    service = build_service(settings)
    await service.start()
    await service.ingest(corpus())
    return service


def service_on(settings_of: Callable[[Path], Settings]) -> Any:
    """A fixture of the service `started` on what `settings_of` gives for the test's
    folder, every HTTP request mocked: assigned in a module, its name is the fixture's."""

    @pytest.fixture
    async def service(tmp_path: Path, mock: respx.MockRouter) -> AsyncIterator[KnowledgeService]:
        started_service = await started(settings_of(tmp_path))
        yield started_service
        await started_service.stop()

    return service


async def fused(service: KnowledgeService, limit: int = 6) -> list[SearchHit]:
    found = await service.retrieve(QUESTION, limit, SearchFilters(), 0.0, rerank=False)
    return found.hits


async def reranked(service: KnowledgeService, limit: int = 6) -> Any:
    return await service.retrieve(QUESTION, limit, SearchFilters(), 0.0)


async def ranked_once(settings: Settings) -> tuple[list[SearchHit], Any, dict[str, Any]]:
    """On a service of `settings` started for it alone: the fused hits, the reranked
    retrieval and /health after it."""
    service = await started(settings)
    try:
        return await fused(service), await reranked(service), await service.health()
    finally:
        await service.stop()


def ids(hits: list[SearchHit]) -> list[str]:
    return [hit.chunk.id for hit in hits]
