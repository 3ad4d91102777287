"""Permissions benchmark: what narrowing a hybrid query to a reader's principals costs,
beside the unfiltered query and a 1 % equality filter, on the synthetic corpus of
bench_stores.py.

    .venv/bin/python scripts/bench_acl.py --stores sqlite --sizes 200000

Each chunk's document is readable by one group of 100 (`group:g<i mod 100>`) and holds
`bucket` (its number modulo 100) in its metadata. The rows: the unfiltered query (an
admin key), a principal set of 50 groups (50 % of the passages readable), the same
share with each query its own set of 50 (readers of other groups in turn), one of a
single group (1 %, query i asking as group i mod 100, so no query repeats the set of
the one before) and the equality filter `{"bucket": b}` over the same 1 %. Each query
is asked by every row in turn (each query starting with the next row), so that a
shared host's load moves every row alike. Per store and size it prints the p50/p95 ms
of hybrid queries (10 results), each p50 as a multiple of the unfiltered one, and the
fewest results a query returned (10 whenever 10 are readable, which they all are). It
asserts nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_stores import Corpus, Timed, filled_store, percentiles, print_rows, row_args, timed_row

from knowledge_api.filters import parse
from knowledge_api.models import Document, SearchFilters
from knowledge_api.principals import scoped
from knowledge_api.stores.base import SearchRequest

GROUPS = 100
HALF = frozenset(f"group:g{g}" for g in range(GROUPS // 2))

ROWS: dict[str, Callable[[int], SearchFilters]] = {
    "unfiltered": lambda b: SearchFilters(),
    "principals 50 %": lambda b: scoped(SearchFilters(), HALF),
    "principals 50 %, each query its own set": lambda b: scoped(
        SearchFilters(), frozenset(f"group:g{(b + g) % GROUPS}" for g in range(GROUPS // 2))
    ),
    "principals 1 %": lambda b: scoped(SearchFilters(), frozenset({f"group:g{b}"})),
    "equality 1 %": lambda b: SearchFilters(where=parse({"bucket": b})),
}


class AclCorpus(Corpus):
    def document(self, i: int) -> Document:
        doc = super().document(i)
        doc.metadata = {"bucket": i % GROUPS}
        doc.acl = (f"group:g{i % GROUPS}",)
        return doc


async def time_rows(store: Any, queries: list[tuple[str, np.ndarray]]) -> dict[str, Timed]:
    """Each row's p50 and p95 ms and fewest results, query i asked by every row in turn
    as the readers of group i mod 100."""
    latencies: dict[str, list[float]] = {label: [] for label in ROWS}
    fewest = dict.fromkeys(ROWS, 10)
    labels = list(ROWS)
    for i, (text, vector) in enumerate(queries):
        for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
            start = time.perf_counter()
            hits = await store.search(
                SearchRequest(text, vector, 10, ROWS[label](i % GROUPS), 0.0, "hybrid")
            )
            latencies[label].append((time.perf_counter() - start) * 1000)
            fewest[label] = min(fewest[label], len(hits))
    return {label: (*percentiles(latencies[label]), fewest[label]) for label in ROWS}


async def bench(name: str, corpus: Corpus, n_queries: int, folder: Path) -> list[str]:
    queries = corpus.queries(n_queries)
    async with filled_store(name, corpus, folder) as store:
        await time_rows(store, queries[:20])  # a first pass warms every plan and page
        rows = await time_rows(store, queries)
    unfiltered = rows["unfiltered"][0]
    return [
        timed_row(name, corpus, f"{label:39}", timed, f"{timed[0] / unfiltered:5.2f}x")
        for label, timed in rows.items()
    ]


async def main() -> None:
    args = row_args(__doc__.split("\n")[0], "sqlite")
    header = f"store    |  chunks | {'readers':39} | hybrid p50/p95 ms | p50 / unfiltered | fewest"
    await print_rows(args, header, lambda size: AclCorpus(size, "topics"), bench)


if __name__ == "__main__":
    asyncio.run(main())
