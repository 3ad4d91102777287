"""A cross-encoder through sentence-transformers: the query and each passage are read
together by one model, which scores how well the passage answers the query.

KNOWLEDGE_RERANK_MODEL is a local folder or a model id. A folder is read as it is, and
an id from the local model cache, without the network; an id not in the cache is
fetched from the model hub when the hub answers within a second, and otherwise the
reranker is unavailable at once (huggingface_hub retries an unreachable hub for more
than a minute), as /health says. The model loads once, when the service starts, and
scores on a thread of its own, so the event loop keeps serving other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

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
        # a folder, or an id in the local cache, loads without the network; another id
        # is asked of the hub only when it answers, before torch is even imported
        here = Path(self.model).is_dir() or cached(self.model)
        if not here and (why := hub_unreachable()) is not None:
            raise ConfigurationError(
                f"cannot load {self.model}: not in the local model cache, and {why}; "
                "name a folder holding the model in KNOWLEDGE_RERANK_MODEL"
            )
        sentence_transformers = import_extra("sentence_transformers", EXTRA)
        # idle OpenMP workers sleep instead of spinning on the cores the server needs
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return sentence_transformers.CrossEncoder(self.model, local_files_only=here)

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


HUB_TIMEOUT_S = 1.0


def cached(model: str) -> bool:
    """Whether the local model cache holds `model` (a hub id)."""
    huggingface_hub = import_extra("huggingface_hub", EXTRA)
    try:
        found = huggingface_hub.try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a model id
        return False
    return isinstance(found, str)


def hub_unreachable() -> str | None:
    """Why the model hub cannot be asked for a model now (offline, or no answer within
    HUB_TIMEOUT_S), or None when it answers."""
    constants = import_extra("huggingface_hub", EXTRA).constants
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        httpx.head(constants.ENDPOINT, timeout=HUB_TIMEOUT_S)
    except httpx.HTTPError as e:
        return f"the model hub ({constants.ENDPOINT}) is unreachable ({type(e).__name__})"
    return None
