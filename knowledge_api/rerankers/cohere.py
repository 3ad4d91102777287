"""Cohere Rerank through the cohere SDK (v2 rerank, default model rerank-v3.5).

The SDK sends through an httpx client this reranker owns (opened when the service
starts), at KNOWLEDGE_COHERE_BASE_URL, without retries of its own: a ranking that
fails or takes longer than KNOWLEDGE_RERANK_TIMEOUT keeps the fused order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from knowledge_api.models import SearchHit
from knowledge_api.registry import import_extra
from knowledge_api.rerankers.base import OrderingReranker, RerankError, passage_text
from knowledge_api.sdk import AsyncSdk, cohere_failure, sdk_client

DEFAULT_MODEL = "rerank-v3.5"
EXTRA = "cohere"
KEY_ENV = "COHERE_API_KEY"


class CohereReranker(AsyncSdk, OrderingReranker):
    name = "cohere"
    key_env = KEY_ENV
    extra = EXTRA

    settings_fields = "cohere_api_key rerank_model cohere_base_url rerank_timeout"

    def __init__(self, api_key: Any, model: str, base_url: str, timeout: float) -> None:
        super().__init__()
        self.api_key = api_key
        self.model = model or DEFAULT_MODEL
        self.base_url = base_url
        self.timeout = timeout

    def connect(self) -> Any:
        cohere = import_extra("cohere", EXTRA)
        return sdk_client(
            cohere.AsyncClientV2,
            self,
            httpx_client=self.http,
            log_warning_experimental_features=False,
        )

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
            raise RerankError(cohere_failure(e)) from e
        except ValueError as e:  # a body that is not the JSON Cohere sends
            raise RerankError(f"malformed response: {str(e)[:200]}") from e
        return [result.index for result in response.results or []]

    def details(self) -> dict[str, Any]:
        return {"model": self.model, "key": KEY_ENV}
