"""Built ONNX models of the local encoder, cached on disk.

A model is built once from the safetensors weights (and, for int8, quantised) and
kept in a folder named after the weights' hash, the builder version and the
precision, so new weights, a changed graph or another precision never reuse a stale
model. The folder holds the graph (`model.onnx`) and its weights beside it
(`model.onnx.data`), or for bf16 OpenVINO's IR of the same graph (`model.xml`,
`model.bin`, see save_ir); the runtimes map the weights into memory instead of copying: the
pages are the file's, shared by every process and session using it, and a row of
the word-embedding table is read only when a token needs it. It is built under a
temporary name and renamed, so a reader never sees half a model, and never changed
in place (a process has it mapped); one that does not load is built anew.

Hashing the weights (90 MB) takes longer than loading the model, so the hash is kept
in `weights.json` beside the models, valid while the weights' size and time of
change stay the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILDER_VERSION = 1
"""Raise when the graph (onnx_graph.py) changes: it is part of the cache key. It is
kept here, not there, because loading a built model needs no `onnx` package, whose
import costs a start more than the model's load does."""
WEIGHTS = "model.safetensors"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
IR_FILE = "model.xml"
"""The bf16 model: OpenVINO's IR (model.xml, its weights in model.bin), see save_ir."""
DIGESTS = "weights.json"
BUILDS = ("fp32", "int8", "int8-7bit", "bf16")
"""The models built: a precision, and int8 with 7-bit weights for CPUs without VNNI."""
FEED_FORWARD = re.compile(r"\.(intermediate|(?<!attention\.)output)\.dense$")
"""MatMul names (onnx_graph.linear) of the feed-forward block of each layer."""


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "knowledge-api" / "models"


def weights_digest(model_dir: Path, cache_dir: Path) -> str:
    """The hash of the weights and the model's config (see DIGESTS)."""
    weights = (model_dir / WEIGHTS).resolve()
    digest = hashlib.sha256(remembered_hash(weights, cache_dir).encode())
    digest.update((model_dir / "config.json").read_bytes())
    return digest.hexdigest()[:16]


def remembered_hash(path: Path, cache_dir: Path) -> str:
    """sha256 of `path`, read from DIGESTS while the file's size and mtime match."""
    stat = path.stat()
    seen = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    memo_file = cache_dir / DIGESTS
    try:
        memo = json.loads(memo_file.read_text())
        entry = memo[str(path)]
        if isinstance(entry, dict) and {k: entry.get(k) for k in seen} == seen:
            return str(entry["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        memo = {}
    sha = file_hash(path)
    memo = memo if isinstance(memo, dict) else {}
    memo[str(path)] = {**seen, "sha256": sha}
    write_atomically(memo_file, json.dumps(memo, indent=1).encode())
    return sha


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Best effort: the memo only saves time, so a cache folder that cannot be
    written costs a hash per start, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as f:
            f.write(data)
        os.replace(f.name, path)
    except OSError:
        pass


def cache_path(model_dir: Path, precision: str, cache_dir: Path, model: str) -> Path:
    """The model file (its folder holds its weights too) of `precision` (one of BUILDS)."""
    if precision not in BUILDS:
        raise ValueError(f"precision must be one of {', '.join(BUILDS)}, not {precision!r}")
    key = f"{model}-{weights_digest(model_dir, cache_dir)}-b{BUILDER_VERSION}-{precision}"
    return cache_dir / key / (IR_FILE if precision == "bf16" else MODEL_FILE)


def build(model_dir: Path, precision: str, target: Path) -> None:
    """Write the encoder at `precision` to `target` and its weights beside it: the
    folder `target.parent` appears whole, or not at all."""
    import onnx
    from safetensors.numpy import load_file

    from knowledge_api.embeddings.onnx_graph import build_model

    config = json.loads((model_dir / "config.json").read_text())
    model = build_model(load_file(str(model_dir / WEIGHTS)), config)
    folder = target.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as scratch:
        fp32 = Path(scratch) / "fp32.onnx"
        fp32.write_bytes(model.SerializeToString())
        if precision.startswith("int8"):
            int8 = quantize(fp32, Path(scratch) / "int8.onnx", precision == "int8-7bit")
            model = onnx.load(str(int8))
        built = Path(scratch) / "model"
        built.mkdir()
        if precision == "bf16":
            save_ir(fp32, built / target.name)
        else:
            onnx.save_model(
                model,
                str(built / target.name),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=DATA_FILE,
            )
        try:
            os.replace(built, folder)
        except OSError:  # the folder exists: another process built it meanwhile (keep
            if target.exists():  # theirs, which it may have loaded), or it lost its model
                return
            remove(folder)
            os.replace(built, folder)


def remove(folder: Path) -> None:
    """Drop a model folder; a process that has its files mapped keeps its pages."""
    shutil.rmtree(folder, ignore_errors=True)


def save_ir(source: Path, target: Path) -> None:
    """The fp32 graph `source` as OpenVINO's IR, its weights stored as fp16.

    bf16 inference rounds the weights to bf16 whatever the file holds, so fp16 ones
    (finer than bf16) leave the vectors where they were (0.99997 cosine to fp32 on the
    dev passages either way), and the process maps and keeps 45 MB of weights instead
    of 90: measured here, 165 MB resident after the compile instead of 250."""
    import openvino

    model = openvino.Core().read_model(str(source))
    openvino.save_model(model, str(target), compress_to_fp16=True)


def quantize(source: Path, target: Path, seven_bits: bool = False) -> Path:
    """Dynamic int8 of the attention blocks (Attention and its output projection):
    weights stored as int8 per output channel, activations quantised per call;
    `seven_bits` keeps the weights within 7 bits, for CPUs without VNNI (runtimes.py).

    The feed-forward blocks stay fp32: quantising their second projection, whose input
    (GELU's output) has a few large outliers per row, brought single passages down
    to 0.988 cosine of the fp32 vectors; without it they stay above 0.995."""
    import onnx

    from knowledge_api.registry import import_extra

    quantization = import_extra("onnxruntime.quantization", "int8")
    names = [node.name for node in onnx.load(str(source), load_external_data=False).graph.node]
    quantization.quantize_dynamic(
        source,
        target,
        op_types_to_quantize=["MatMul", "Attention"],
        nodes_to_exclude=[name for name in names if FEED_FORWARD.search(name)],
        per_channel=True,
        reduce_range=seven_bits,
        weight_type=quantization.QuantType.QInt8,
        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return target


def load_or_build(
    path: Path, build_to: Callable[[Path], None], open_model: Callable[[Path], Any]
) -> Any:
    """`open_model(path)`, building the model first when it is missing, and again
    when it exists but cannot be opened (a truncated or damaged cache file)."""
    if not path.exists():
        build_to(path)
        return open_model(path)
    try:
        return open_model(path)
    except Exception:
        remove(path.parent)
        build_to(path)
        return open_model(path)
