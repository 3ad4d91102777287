"""Filter benchmark: the latency a selective filter adds to a hybrid query, per store and
size, on the synthetic corpus of bench_stores.py.

    .venv/bin/python scripts/bench_filters.py --stores sqlite,postgres --sizes 5000,200000

Each chunk's metadata holds `bucket` (its number modulo 100) and `day` (a date, one of
100), so each filter below keeps about 1 % of the passages: an equality
(`{"bucket": 7}`), a range of numbers (`{"bucket": {"$gte": 7, "$lt": 8}}`), a range of
dates and a `$or` of two conditions with a `$not`, each query its own bucket. Per
store, size and filter it prints the p50/p95 ms of hybrid queries (10 results) beside
the unfiltered query's, the p50 added, and the fewest results a filtered query
returned (10 whenever 10 match, which they all do). Two rows more count facets over
two fields (`bucket`, `source_type`) beside the search, as the service does, over
every passage and over the equality's 1 %; their p50 added is to the same query
without facets. It asserts nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench_stores import Corpus, Filters, print_rows, row_args, timed_filters, timed_row

from knowledge_api.filters import parse
from knowledge_api.models import Document, SearchFilters

BUCKETS = 100
FIRST_DAY = date(2026, 1, 1)


def day(number: int) -> str:
    """The date of day `number` (bucket b holds day b; day 100 follows day 99)."""
    return (FIRST_DAY + timedelta(days=number)).isoformat()


FILTERS: dict[str, Callable[[int], dict[str, Any] | None]] = {
    "none": lambda b: None,
    "equality": lambda b: {"bucket": b},
    "number range": lambda b: {"bucket": {"$gte": b, "$lt": b + 1}},
    "date range": lambda b: {"day": {"$gte": day(b), "$lt": day(b + 1)}},
    "$or/$not": lambda b: {
        "$or": [{"bucket": b}, {"bucket": (b + 1) % BUCKETS, "$not": {"day": {"$exists": True}}}]
    },
}
"""Each filter of one bucket (1 % of the passages); query i asks for bucket i mod 100,
so no query repeats the filter of the one before (a store may keep what its last
filter allowed: the cost of a new filter is the one measured)."""
FACETS = ("bucket", "source_type")
FACETED = {"facets, none": "none", "facets, equality": "equality"}
"""Rows of the same query with facets over two fields, and the row each adds to."""


class FilteredCorpus(Corpus):
    def document(self, i: int) -> Document:
        doc = super().document(i)
        day = FIRST_DAY + timedelta(days=i % BUCKETS)
        doc.metadata = {"bucket": i % BUCKETS, "day": day.isoformat()}
        return doc


async def bench(name: str, corpus: Corpus, n_queries: int, folder: Path) -> list[str]:
    """Query i filtered to bucket i mod 100; a faceted row's p50 added is to the row it
    adds to, the others' to the unfiltered query's."""
    bucketed = {label: of_bucket(where) for label, where in FILTERS.items()}
    rows = {label: (filters, ()) for label, filters in bucketed.items()}
    rows |= {label: (bucketed[of], FACETS) for label, of in FACETED.items()}
    times = await timed_filters(name, corpus, n_queries, folder, rows)
    added = {label: timed[0] - times[added_to(label)][0] for label, timed in times.items()}
    return [
        timed_row(name, corpus, f"{label:16}", timed, f"{added[label]:+7.2f}")
        for label, timed in times.items()
    ]


def of_bucket(where: Callable[[int], dict[str, Any] | None]) -> Filters:
    return lambda i: SearchFilters(where=parse(where(i % BUCKETS)))


def added_to(label: str) -> str:
    """The row whose p50 the row `label` adds to."""
    return FACETED.get(label, "none")


async def main() -> None:
    args = row_args(__doc__.split("\n")[0], "sqlite,postgres")
    header = "store    |  chunks | filter           | hybrid p50/p95 ms | +p50 ms | fewest"
    await print_rows(args, header, lambda size: FilteredCorpus(size, "topics"), bench)


if __name__ == "__main__":
    asyncio.run(main())
