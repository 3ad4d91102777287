"""A cross-encoder through sentence-transformers: the query and each passage are read
together by one model, which scores how well the passage answers the query.

KNOWLEDGE_RERANK_MODEL is a local folder or a model id; an id is fetched once, where
the machine may download. The model loads once, when the service starts, and scores
on a thread of its own, so the event loop keeps serving other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from knowledge_api.errors import ConfigurationError
from knowledge_api.models import SearchHit
from knowledge_api.registry import import_extra
from knowledge_api.rerankers.base import OrderingReranker, by_score, passage_text

DEFAULT_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
EXTRA = "rerank"


class CrossEncoderReranker(OrderingReranker):
    name = "cross-encoder"

    settings_fields = "rerank_model rerank_top"

    def __init__(self, model: str = "", batch_size: int = 20) -> None:
        super().__init__()
        self.model = model or DEFAULT_MODEL
        self.batch_size = batch_size
        """Pairs per forward pass: KNOWLEDGE_RERANK_TOP, so a ranking is one pass."""
        self.load_error = ""
        self._encoder: Any = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="reranker")

    async def open(self) -> None:
        """Load the model (on the reranker's thread); a failure leaves the reranker
        unavailable, which /health reports, and every ranking keeps the fused order."""
        if self._encoder is not None:
            return
        try:
            self._encoder = await self._on_thread(self.load)
        except ConfigurationError as e:
            self.load_error = e.message
        except Exception as e:
            self.load_error = f"cannot load {self.model}: {type(e).__name__}: {e}"[:300]

    def load(self) -> Any:
        sentence_transformers = import_extra("sentence_transformers", EXTRA)
        # idle OpenMP workers sleep instead of spinning on the cores the server needs
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # a folder is read as it is: no hub lookup for a model that is already here
        local = Path(self.model).is_dir()
        return sentence_transformers.CrossEncoder(self.model, local_files_only=local)

    async def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def unavailable(self) -> str | None:
        if self._encoder is None:
            return self.load_error or "not loaded"
        return None

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        pairs = [(query, passage_text(hit)) for hit in hits]
        scores = await self._on_thread(self.scores, pairs)
        return by_score(scores)

    def scores(self, pairs: list[tuple[str, str]]) -> list[float]:
        predicted = self._encoder.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(score) for score in predicted]

    async def _on_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def details(self) -> dict[str, Any]:
        return {"model": self.model}
