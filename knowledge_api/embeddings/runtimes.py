"""The runtimes that run the local encoder's ONNX graph, and the choice between them.

OpenVINO runs fp32 everywhere and bf16 where the CPU computes bf16 in its matrix units
(AMX `amx_bf16`, or the `avx512_bf16` dot products): there a forward pass costs about
half of fp32's CPU time (avx512_bf16 on a Zen 4; a third with AMX), within 0.99997
cosine of it. Batches (ingestion, an answer's sentences) run on a model compiled with
as many inference streams as the embedder may use cores, one thread each, a batch on
each stream; queries on a second compilation, of one stream of one thread, run in the
calling thread (`compile_for_queries`). ONNX Runtime runs only the dynamic int8 model
(its quantised attention operator is its own), from the `int8` extra. Where the CPU
has no VNNI unit (`avx512_vnni`, `avx_vnni`: an AVX2-only CPU), ONNX Runtime
multiplies u8 by s8 with instructions whose 16-bit sums saturate, which full 8-bit
weights overflow: there the int8 model is built with 7-bit weights (`int8-7bit`, ONNX
Runtime's `reduce_range`), which cannot (the 872 bundled paragraphs: lowest cosine to
fp32 0.99376 with 8-bit weights on an AVX2 EPYC, 0.99650 with 7-bit ones).

The choice is made once, at load, and /health shows it with its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from knowledge_api.heap import release_freed_memory, release_mapped_file
from knowledge_api.registry import import_extra

Feed = dict[str, np.ndarray]
BF16_UNITS = ("amx_bf16", "avx512_bf16")
"""The CPU flags (Linux /proc/cpuinfo names) of units that multiply bf16 matrices."""
VNNI_UNITS = ("avx512_vnni", "avx_vnni")
"""The CPU flags of units that sum u8 x s8 products in 32 bits (no saturation)."""
PRECISIONS = ("auto", "fp32", "bf16", "int8")


@dataclass(frozen=True)
class Choice:
    runtime: str
    precision: str
    reason: str
    build: str = "openvino"
    """The built model it runs (onnx_model.BUILDS)."""


def choose(requested: str, units: Iterable[str]) -> Choice:
    """The runtime and precision for KNOWLEDGE_EMBEDDING_PRECISION=`requested` on a CPU
    whose bf16 and VNNI units are `units` (empty where it has none)."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {requested!r}")
    units = set(units)
    found = [unit for unit in BF16_UNITS if unit in units]
    if requested == "int8":
        why = "int8 as configured (dynamic int8 attention"
        if any(unit in units for unit in VNNI_UNITS):
            return Choice("onnxruntime", "int8", f"{why})", "int8")
        return Choice(
            "onnxruntime", "int8", f"{why}, 7-bit weights: the CPU has no VNNI)", "int8-7bit"
        )
    if requested == "fp32":
        return Choice("openvino", "fp32", "fp32 as configured")
    if found:
        why = "as configured" if requested == "bf16" else "auto"
        return Choice("openvino", "bf16", f"bf16 {why}: the CPU has {', '.join(found)}")
    why = "bf16 was configured, but" if requested == "bf16" else "auto:"
    return Choice("openvino", "fp32", f"{why} the CPU has no bf16 units (amx_bf16, avx512_bf16)")


def cpu_flags() -> set[str]:
    try:
        return set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return set()


def cpu_bf16_units() -> list[str]:
    """The bf16 units this CPU has, as the kernel names them and OpenVINO agrees."""
    flags = cpu_flags()
    try:
        import openvino

        capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:
        return []
    return [unit for unit in BF16_UNITS if unit in flags and "BF16" in capabilities]


def cpu_units() -> list[str]:
    """What `choose` reads of this CPU: its bf16 units and its VNNI units."""
    return [*cpu_bf16_units(), *(unit for unit in VNNI_UNITS if unit in cpu_flags())]


class Encoder(Protocol):
    runtime: str
    precision: str
    pad_to: int
    """Rows of a batch are padded to a multiple of this many tokens."""

    def run(self, feed: Feed) -> np.ndarray:
        """The embeddings of one batch, now, on one thread."""
        ...

    def run_all(self, feeds: Iterable[Feed], done: Callable[[int, np.ndarray], None]) -> None:
        """Every batch, as many at once as there are streams; `done(i, vectors)` for
        the i-th as it finishes. The next feed is made while the others run."""
        ...

    def release(self) -> None:
        """Hand back the memory a run used and no longer needs."""
        ...


class OpenVinoEncoder:
    runtime = "openvino"
    pad_to = 16
    """OpenVINO keeps what it prepared for every input shape it met (about half a
    megabyte each): sentences of every length, embedded for offline answers, took a
    served model from 193 to 359 MB; padded to 16 tokens, to 244, each query as fast or
    faster (a shape met before skips that preparation), vectors within 1e-5 of cosine of
    the unpadded ones (the mask keeps padding out of the mean). The model's 256-token
    window is a multiple."""

    def __init__(self, path: Path, precision: str, streams: int) -> None:
        """Compiled at each start (a fifth of a second of CPU a compilation here). At
        bf16 with several streams, queries have a compilation of their own
        (`compile_for_queries`), compiled now, and batches theirs, compiled at the first
        batch (`run_all`): a start is ready after one compilation, and a process that
        only answers queries holds one. fp32 keeps one compilation for both, a query on
        one of its streams: each compilation packs the weights, 56 MB more at fp32 (the
        ingest command peaked at 364 MB against 308), 12 at bf16 (304 against 292).
        OpenVINO's cache of compiled models is left off: processes starting together
        (replicas, a PM2 reload) would read and write the same blobs, which it does not
        guard."""
        import openvino

        self._ov = openvino
        self._core = openvino.Core()
        self.path = path
        self.streams = max(1, streams)
        self.config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
            "PERFORMANCE_HINT": "THROUGHPUT",
            "NUM_STREAMS": self.streams,
            "INFERENCE_NUM_THREADS": self.streams,
        }
        own = self.streams > 1 and precision == "bf16"
        self.query_model = (
            compile_for_queries(self._core, path, self.config)
            if own
            else self._core.compile_model(str(path), "CPU", self.config)
        )
        self.batch_model: Any = None if own else self.query_model
        self.weights = path.with_suffix(".bin")
        self.shapes: set[tuple[int, ...]] = set()
        """The input shapes run on the query model so far."""
        hint = self.query_model.get_property("INFERENCE_PRECISION_HINT")
        self.precision = "bf16" if hint.get_type_name() == "bf16" else "fp32"
        """What the compiled model computes in, whatever was asked."""
        self._request = self.query_model.create_infer_request()
        self._queue: Any = None
        self.release()  # compiling read the weights fp32's kernels pack (openvino_ir.py)

    def run(self, feed: Feed) -> np.ndarray:
        outputs = self._request.infer(feed, share_inputs=False)
        vectors = np.array(outputs[0], dtype=np.float32)
        shape = feed["input_ids"].shape
        if shape not in self.shapes:  # prepared once: a shape met before reads nothing more
            self.shapes.add(shape)
            self.release()
        return vectors

    def release(self) -> None:
        """The heap's free pages, and the pages of the weights file. OpenVINO maps the
        file and reads its weights to prepare them for each new input shape (repacked
        into memory of its own, at bf16 here): the pages read stayed resident, 28 MB
        after the first queries, 40 once answers had embedded their sentences."""
        release_freed_memory()
        release_mapped_file(self.weights)

    def run_all(self, feeds: Iterable[Feed], done: Callable[[int, np.ndarray], None]) -> None:
        if self.batch_model is None:
            self.batch_model = self._core.compile_model(str(self.path), "CPU", self.config)
            self.release()
        if self._queue is None:
            self._queue = self._ov.AsyncInferQueue(self.batch_model, self.streams)
        queue = self._queue
        failures: list[BaseException] = []

        def finished(request: Any, index: int) -> None:
            try:
                done(index, np.array(request.get_output_tensor(0).data, dtype=np.float32))
            except BaseException as e:  # raised again on the caller's thread
                failures.append(e)

        queue.set_callback(finished)
        try:
            for index, feed in enumerate(feeds):
                queue.start_async(feed, index)
        finally:
            queue.wait_all()
        if failures:
            raise failures[0]


def compile_for_queries(core: Any, path: Path, config: dict[str, Any]) -> Any:
    """The model queries run on at bf16: one stream of one thread, which OpenVINO runs
    in the thread that calls it, where a stream of the batch model runs on a thread of
    its own, woken for each query and waited for. Side by side with queries on a stream
    of the batch model, a server's sequential cold queries took a median 0.90x the
    embedding time over 21 alternated runs (0.72-1.29x, load average 4-7), about 0.97x
    the CPU per request. Not pinned: OpenVINO would pin the calling thread to one core
    for the run, and wait for that core while another process holds it (in process, 4.9
    ms for 2.7 ms of CPU a query, against 2.6 ms unpinned)."""
    one = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": 1}
    return core.compile_model(str(path), "CPU", {**config, **one, "ENABLE_CPU_PINNING": False})


class OnnxRuntimeEncoder:
    runtime = "onnxruntime"
    pad_to = 1
    """Not padded: ONNX Runtime prepares nothing per shape, and its int8 model scales
    each activation tensor by its range, padded positions included."""

    def __init__(self, path: Path, precision: str, threads: int) -> None:
        self.path = path
        self.threads = max(1, threads)
        self.precision = precision
        self._query = open_session(path, 1)
        self._batch: Any = None

    def run(self, feed: Feed) -> np.ndarray:
        return run_session(self._query, feed)

    def release(self) -> None:
        release_freed_memory()

    def run_all(self, feeds: Iterable[Feed], done: Callable[[int, np.ndarray], None]) -> None:
        if self._batch is None:
            self._batch = open_session(self.path, self.threads)
        for index, feed in enumerate(feeds):
            done(index, run_session(self._batch, feed))


ENCODERS: dict[str, Callable[[Path, str, int], Encoder]] = {
    "openvino": OpenVinoEncoder,
    "onnxruntime": OnnxRuntimeEncoder,
}
"""Runtime name (Choice.runtime) -> encoder: (model file, precision, cores)."""


def open_session(path: Path, threads: int) -> Any:
    ort = import_extra("onnxruntime", "int8")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # idle workers sleep instead of spinning on the cores the server needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_session(session: Any, feed: Feed) -> np.ndarray:
    (vectors,) = session.run(["embeddings"], feed)
    return np.asarray(vectors, dtype=np.float32)
