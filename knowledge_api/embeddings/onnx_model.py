"""Built ONNX models of the local encoder, cached on disk.

A model is built once from the safetensors weights (and, for int8, quantised) and
kept in a folder named after the weights' hash, the builder version and the build
(BUILDS), so new weights, a changed graph or another build never reuse a stale
model. The folder holds OpenVINO's IR of the graph (`model.xml`, `model.bin`, see
save_ir), run at fp32 or bf16, or for ONNX Runtime the graph (`model.onnx`) and its
weights beside it (`model.onnx.data`); the runtimes map the weights into memory
instead of copying: the pages are the file's, shared by every process and session
using it, and a row of the word-embedding table is read only when a token needs it.
It is built under a temporary name and renamed, so a reader never sees half a model,
and never changed in place (a process has it mapped); one that does not load is built
anew.

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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

BUILDER_VERSION = 3
"""Raise when the graph (onnx_graph.py) or OpenVINO's rewrite of it (openvino_ir.py)
changes: it is part of the cache key. It is
kept here, not there, because loading a built model needs no `onnx` package, whose
import costs a start more than the model's load does."""
WEIGHTS = "model.safetensors"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
IR_FILE = "model.xml"
"""OpenVINO's model: its IR (model.xml, its weights in model.bin), see save_ir."""
DIGESTS = "weights.json"
BUILDS = ("openvino", "onnx", "int8", "int8-7bit")
"""The models built: OpenVINO's (fp32 or bf16, one file), the fp32 ONNX graph (ONNX
Runtime's, measured against the others by the benchmarks), and ONNX Runtime's int8,
with 7-bit weights for CPUs without VNNI (runtimes.py)."""
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


def cache_path(model_dir: Path, build: str, cache_dir: Path, model: str) -> Path:
    """The model file (its folder holds its weights too) of `build` (one of BUILDS)."""
    if build not in BUILDS:
        raise ValueError(f"the build must be one of {', '.join(BUILDS)}, not {build!r}")
    key = f"{model}-{weights_digest(model_dir, cache_dir)}-b{BUILDER_VERSION}-{build}"
    return cache_dir / key / (IR_FILE if build == "openvino" else MODEL_FILE)


def build(model_dir: Path, name: str, target: Path) -> None:
    """Write the encoder's build `name` to `target` and its weights beside it: the
    folder `target.parent` appears whole, or not at all. Each step's output is written
    to disk and its memory let go before the next reads it (a build's peak is the
    largest step's, not their sum)."""
    import onnx

    from knowledge_api.embeddings.onnx_graph import build_model

    config = json.loads((model_dir / "config.json").read_text())
    folder = target.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as scratch:
        built = Path(scratch) / "model"
        built.mkdir()
        fp32 = (built if name == "onnx" else Path(scratch)) / MODEL_FILE
        onnx.save_model(
            build_model(LazyWeights(model_dir / WEIGHTS), config),
            str(fp32),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=DATA_FILE,
        )
        onnx.checker.check_model(str(fp32))
        if name == "openvino":
            save_ir(fp32, built / target.name)
        elif name.startswith("int8"):
            quantize(fp32, built / target.name, name == "int8-7bit")
        try:
            os.replace(built, folder)
        except OSError:  # the folder exists: another process built it meanwhile (keep
            if target.exists():  # theirs, which it may have loaded), or it lost its model
                return
            remove(folder)
            os.replace(built, folder)


class LazyWeights(Mapping[str, Any]):
    """The tensors of a safetensors file, each read when asked for: the graph holds a
    copy of every weight, so reading them all first held them twice (a build peaked at
    580 MB, 250 with this)."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self._file = safe_open(str(path), framework="numpy")
        self._names: list[str] = list(self._file.keys())  # type: ignore[no-untyped-call]

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._file.get_tensor(name)  # type: ignore[no-untyped-call]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def remove(folder: Path) -> None:
    """Drop a model folder; a process that has its files mapped keeps its pages."""
    shutil.rmtree(folder, ignore_errors=True)


def save_ir(source: Path, target: Path) -> None:
    """The fp32 graph `source` as OpenVINO's IR: the weights of its products stored as
    fp32 (openvino_ir.dense_products), every other weight as fp16.

    bf16 inference rounds the weights to bf16 whatever the file holds, so fp16 ones
    (finer than bf16) leave the vectors where they were (0.99997 cosine to fp32 on the
    dev passages either way); fp32 inference computes with them as they are, within
    0.999999 cosine of the fp32 weights' vectors on the bundled paragraphs (PyTorch's:
    0.9999992 at the lowest). The word-embedding table (half the weights) stays fp16:
    a query reads a few of its rows, mapped, where its fp32 copy would be a file twice
    the size to page through. The weights are rounded to fp16 first (saved, read
    back), so a product's fp32 weights are the fp16 values the vectors were measured
    with."""
    import openvino

    from knowledge_api.embeddings.openvino_ir import dense_products

    core = openvino.Core()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fp16-") as scratch:
        halved = Path(scratch) / IR_FILE
        openvino.save_model(core.read_model(str(source)), str(halved), compress_to_fp16=True)
        model = core.read_model(str(halved))
        dense_products(model)
        openvino.save_model(model, str(target), compress_to_fp16=False)


def quantize(source: Path, target: Path, seven_bits: bool = False) -> None:
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
        use_external_data_format=True,  # written beside it as DATA_FILE
    )


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
