"""Cosine of the local embedder's ONNX vectors to the PyTorch reference's, per passage.

    .venv/bin/python scripts/embedder_parity.py \
        --corpus ../shared/datasets/msmarco-dev/corpus.jsonl [--limit N] [--precision fp32 int8]

Needs the dev extra (torch, transformers). Each passage is embedded as `title\\ntext`,
as ingestion sees a titled document. Prints min/mean/percentiles per precision and the
number of passages under --floor; exits 1 when any precision has one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from knowledge_api.embeddings.local import LocalEmbedder  # noqa: E402
from tests.torch_reference import TorchEmbedder  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "msmarco-dev" / "corpus.jsonl"


def passages(path: Path, limit: int) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(f"{row.get('title') or ''}\n{row['text']}".strip())
            if len(texts) == limit:
                break
    return texts


def reference(texts: list[str], cache: Path | None) -> np.ndarray:
    if cache is not None and cache.exists():
        stored: np.ndarray = np.load(cache)
        if stored.shape[0] == len(texts):
            return stored
    torch_embedder = TorchEmbedder()
    torch_embedder.load()
    started = time.perf_counter()
    vectors = torch_embedder.embed_documents(texts)
    print(f"torch fp32: {len(texts) / (time.perf_counter() - started):.0f} passages/s")
    if cache is not None:
        np.save(cache, vectors)
    return vectors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit", type=int, default=0, help="first N passages (0 = all)")
    parser.add_argument("--precision", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--floor", type=float, default=0.995)
    parser.add_argument("--reference-cache", type=Path, help=".npy of the torch vectors")
    args = parser.parse_args()
    texts = passages(args.corpus, args.limit)
    expected = reference(texts, args.reference_cache)
    failed = False
    for precision in args.precision:
        embedder = LocalEmbedder(precision)
        embedder.load()
        cosines = np.sum(embedder.embed_documents(texts) * expected, axis=1)
        below = int(np.sum(cosines < args.floor))
        failed |= below > 0
        p1, p50 = np.percentile(cosines, [1, 50])
        print(
            f"{precision}: {len(texts)} passages, cosine min {cosines.min():.5f} "
            f"mean {cosines.mean():.5f} p1 {p1:.5f} p50 {p50:.5f}, {below} under {args.floor}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
