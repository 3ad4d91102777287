"""Cohere Rerank through the cohere SDK (v2 rerank, default model rerank-v3.5).

The SDK sends through an httpx client this reranker owns (opened when the service
starts), at KNOWLEDGE_COHERE_BASE_URL, without retries of its own: a ranking that
fails or takes longer than KNOWLEDGE_RERANK_TIMEOUT keeps the fused order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from knowledge_api import tracing
from knowledge_api.errors import ConfigurationError
from knowledge_api.models import SearchHit
from knowledge_api.registry import import_extra
from knowledge_api.rerankers.base import OrderingReranker, RerankError, passage_text

DEFAULT_MODEL = "rerank-v3.5"
EXTRA = "cohere"
KEY_ENV = "COHERE_API_KEY"


class CohereReranker(OrderingReranker):
    name = "cohere"

    settings_fields = "cohere_api_key rerank_model cohere_base_url rerank_timeout"

    def __init__(self, api_key: Any, model: str, base_url: str, timeout: float) -> None:
        super().__init__()
        self.api_key = api_key
        self.model = model or DEFAULT_MODEL
        self.base_url = base_url
        self.timeout = timeout
        self.client: Any = None
        self.http: Any = None
        self.open_error = ""

    async def open(self) -> None:
        if not self.api_key or self.client is not None:
            return
        try:
            cohere = import_extra("cohere", EXTRA)
            http = import_extra("httpx", EXTRA).AsyncClient(timeout=self.timeout)
            self.http = tracing.traced_client(http)
            self.client = cohere.AsyncClientV2(
                api_key=self.api_key.get(),
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,
                httpx_client=self.http,
                log_warning_experimental_features=False,
            )
        except ConfigurationError as e:
            self.open_error = e.message

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        self.client = self.http = None

    def unavailable(self) -> str | None:
        if not self.api_key:
            return f"missing key: set {KEY_ENV}"
        if self.client is None:
            return self.open_error or "not opened"
        return None

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        api_error = import_extra("cohere.core.api_error", EXTRA).ApiError
        documents = [passage_text(hit) for hit in hits]
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.client.rerank(
                    model=self.model, query=query, documents=documents, top_n=len(documents)
                )
        except TimeoutError as e:
            raise RerankError(f"no ranking within {self.timeout:g} s") from e
        except api_error as e:
            if e.status_code and e.status_code < 300:  # the SDK could not read the body
                raise RerankError(f"malformed response: {message(e.body)}") from e
            raise RerankError(f"HTTP {e.status_code}: {message(e.body)}") from e
        except ValueError as e:  # a body that is not the JSON Cohere sends
            raise RerankError(f"malformed response: {str(e)[:200]}") from e
        return [result.index for result in response.results or []]

    def details(self) -> dict[str, Any]:
        return {"model": self.model, "key": KEY_ENV}


def message(body: Any) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:200]
    return str(body)[:200]
