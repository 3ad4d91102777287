"""Sources: the cost of mirroring a source that did not change, and of a listing page.

    .venv/bin/python scripts/bench_sources.py [--documents 10000] [--runs 3]
    .venv/bin/python scripts/bench_sources.py --listing --passages 200000 [--store postgres]

Prune: a folder of `--documents` Markdown files is ingested once, then `knowledge-api
ingest FOLDER --prune` runs again on it unchanged, `--runs` times, each as the whole
command (a new process: Python's start, reading and chunking every file, asking the
store what changed and what the source no longer has). Nothing changed, so no model
loads: the figure is the same whichever embedder made the vectors (the fake one here,
so that setting up 10,000 files takes seconds).

Listing: a store of `--passages` passages (one per document) is filled with vectors
of the fake embedder, then GET /v1/knowledge/documents pages of 100 are asked for
through the app in process, each page by the cursor of the one before; p50 and p95.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def environment(folder: Path, store: str) -> dict[str, str]:
    env = {
        **os.environ,
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_SEED_ON_EMPTY": "false",
        "KNOWLEDGE_DB_PATH": str(folder / "knowledge.db"),
        "KNOWLEDGE_STORE": store,
        "PYTHONPATH": str(ROOT),
    }
    return env


def command(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system) and the output of one command. On a
    shared host the wall time waits for the CPU; the CPU time is what the command costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_api", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip()


def write_files(folder: Path, count: int) -> None:
    for n in range(count):
        part = folder / f"part-{n // 1000:02}"
        part.mkdir(exist_ok=True)
        (part / f"page-{n:05}.md").write_text(
            f"# Page {n}\n\n## Purpose\n\nPage {n} describes service {n % 97} and its "
            f"owner team {n % 13}.\n\n## Operations\n\nRestart it with step {n % 7}.\n"
        )


def bench_prune(documents: int, runs: int, store: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        docs = folder / "docs"
        docs.mkdir()
        write_files(docs, documents)
        env = environment(folder, store)
        seconds, _, line = command(env, "ingest", str(docs))
        print(f"first ingest of {documents} files: {seconds:.1f} s ({line})")
        walls, cpus = [], []
        for _ in range(runs):
            wall, cpu, line = command(env, "ingest", str(docs), "--prune")
            walls.append(wall)
            cpus.append(cpu)
        print(f"ingest --prune, unchanged: {line}")
        print(
            f"whole command over {runs} runs: wall median {statistics.median(walls):.2f} s "
            f"(best {min(walls):.2f}), CPU median {statistics.median(cpus):.2f} s "
            f"(best {min(cpus):.2f}); target <= 3 s; load average {os.getloadavg()[0]:.1f}"
        )


def bench_listing(passages: int, store: str, pages: int, folder: Path | None) -> None:
    from starlette.testclient import TestClient

    from knowledge_api.app import create_app
    from knowledge_api.compose import build_store, embedder_identity
    from knowledge_api.embeddings.fake import FakeEmbedder
    from knowledge_api.models import Chunk, Document, DocumentPage, chunk_id
    from knowledge_api.settings import Settings

    with tempfile.TemporaryDirectory() as scratch:
        tmp = folder or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        settings = Settings.from_env(env_file=None).replace(
            store=store,
            embedder="fake",
            seed_on_empty=False,
            db_path=Path(tmp) / "knowledge.db",
            postgres_data_dir=Path(tmp) / "pg",
        )
        embedder = FakeEmbedder()

        def batches() -> Iterator[list[Document]]:
            for start in range(0, passages, 1000):
                docs = []
                for n in range(start, min(start + 1000, passages)):
                    doc = Document("wiki", f"page-{n:06}.md", f"Page {n} text.", f"Page {n}")
                    doc.source = "/bench"
                    doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, doc.content, doc.title)]
                    docs.append(doc)
                vectors = embedder.embed_documents([d.content for d in docs])
                for doc, vector in zip(docs, vectors, strict=True):
                    doc.chunks[0].embedding = np.asarray(vector)
                yield docs

        async def fill() -> None:
            target = build_store(settings, embedder_identity(embedder))
            await target.open()
            await target.check_embedder(embedder.name, embedder.dimension)
            if await target.count() >= passages:  # kept from a run before (--path)
                await target.close()
                return

            async def stream():  # type: ignore[no-untyped-def]
                for batch in batches():
                    yield batch

            await target.index_batches(stream(), passages)
            await target.close()

        started = time.perf_counter()
        asyncio.run(fill())
        print(f"{passages} passages stored in {time.perf_counter() - started:.0f} s ({store})")
        with TestClient(create_app(settings)) as client:
            times, cursor = [], None
            for _ in range(pages):
                params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
                started = time.perf_counter()
                body = client.get("/v1/knowledge/documents", params=params).json()
                times.append((time.perf_counter() - started) * 1000)
                cursor = body["next_cursor"] or None
        print(
            f"listing page of 100 ({pages} pages), through the app in process (the test "
            f"client's thread hops included): {quantiles(times)} (target p50 <= 20 ms)"
        )

        async def store_pages() -> list[float]:
            """The store's own call, as the route makes it, page after page."""
            source = build_store(settings, embedder_identity(embedder))
            await source.open()
            spent, after = [], ""
            for _ in range(pages):
                started = time.perf_counter()
                found = await source.list_documents(DocumentPage("default", 101, after))
                spent.append((time.perf_counter() - started) * 1000)
                after = found[99].id if len(found) > 100 else ""
            await source.close()
            return spent

        print(f"the store's own listing call: {quantiles(asyncio.run(store_pages()))}")


def quantiles(times: list[float]) -> str:
    ordered = sorted(times)
    p50, p95 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.95)]
    return f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, load average {os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--listing", action="store_true", help="the listing instead")
    parser.add_argument("--passages", type=int, default=200000)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument(
        "--path", type=Path, help="keep the listing's store here (filled once, reused)"
    )
    args = parser.parse_args()
    if args.listing:
        bench_listing(args.passages, args.store, args.pages, args.path)
    else:
        bench_prune(args.documents, args.runs, args.store)


if __name__ == "__main__":
    main()
