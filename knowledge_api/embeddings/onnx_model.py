"""Built ONNX models of the local encoder, cached on disk.

A model is built once from the safetensors weights (and, for int8, quantised) and
kept under a name made of the weights' hash, the builder version and the precision,
so new weights, a changed graph or another precision never reuse a stale file.
Files are written to a temporary name and renamed, so a reader never sees half a
model; one that does not load anyway is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knowledge_api.embeddings.onnx_graph import BUILDER_VERSION

WEIGHTS = "model.safetensors"
PRECISIONS = ("fp32", "int8")
FEED_FORWARD = re.compile(r"\.(intermediate|(?<!attention\.)output)\.dense$")
"""MatMul names (onnx_graph.linear) of the feed-forward block of each layer."""


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "knowledge-api" / "models"


def weights_digest(model_dir: Path) -> str:
    digest = hashlib.sha256()
    with (model_dir / WEIGHTS).open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    digest.update((model_dir / "config.json").read_bytes())
    return digest.hexdigest()[:16]


def cache_path(model_dir: Path, precision: str, cache_dir: Path, model: str) -> Path:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    key = f"{model}-{weights_digest(model_dir)}-b{BUILDER_VERSION}-{precision}.onnx"
    return cache_dir / key


def build(model_dir: Path, precision: str, target: Path) -> None:
    """Write the encoder at `precision` to `target`, atomically."""
    from safetensors.numpy import load_file

    from knowledge_api.embeddings.onnx_graph import build_model

    config = json.loads((model_dir / "config.json").read_text())
    model = build_model(load_file(str(model_dir / WEIGHTS)), config)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        fp32 = Path(scratch) / "fp32.onnx"
        fp32.write_bytes(model.SerializeToString())
        built = fp32 if precision == "fp32" else quantize(fp32, Path(scratch) / "int8.onnx")
        os.replace(built, target)


def quantize(source: Path, target: Path) -> Path:
    """Dynamic int8 of the attention blocks (Attention and its output projection):
    weights stored as int8 per output channel, activations quantised per call.

    The feed-forward blocks stay fp32: quantising their second projection, whose input
    (GELU's output) has a few large outliers per row, brought single passages down
    to 0.988 cosine of the fp32 vectors; without it they stay above 0.995."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    names = [node.name for node in onnx.load(str(source), load_external_data=False).graph.node]
    quantize_dynamic(
        source,
        target,
        op_types_to_quantize=["MatMul", "Attention"],
        nodes_to_exclude=[name for name in names if FEED_FORWARD.search(name)],
        per_channel=True,
        weight_type=QuantType.QInt8,
        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return target


def load_or_build(
    path: Path, build_to: Callable[[Path], None], open_model: Callable[[Path], Any]
) -> Any:
    """`open_model(path)`, building the file first when it is missing, and again
    when it exists but cannot be opened (a truncated or damaged cache file)."""
    if not path.exists():
        build_to(path)
        return open_model(path)
    try:
        return open_model(path)
    except Exception:
        path.unlink(missing_ok=True)
        build_to(path)
        return open_model(path)
