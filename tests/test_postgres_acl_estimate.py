"""How many passages a reader's principals allow, as the postgres store estimates it
from the planner's statistics (migration 026): close to the truth, and the search it
steers still finds every readable passage a narrow set allows."""

from __future__ import annotations

import asyncpg
import pytest

from knowledge_api.models import SEARCH_MODES, Document, SearchFilters
from knowledge_api.principals import scoped
from knowledge_api.stores.base import SearchRequest
from knowledge_api.stores.postgres.acl_estimate import AclEstimate, AclStatistics
from knowledge_api.stores.postgres.store import PostgresStore
from tests.pg_store import store_fixtures
from tests.test_store_conformance import index, vector

settings, store, db = store_fixtures("postgres")

STATISTICS = AclStatistics(
    passages=1000,
    principals={"public": 0.6, "group:hr": 0.3, "group:eng": 0.2},
    other_principal=0.01,
    collections={"default": 0.75, "hr": 0.2},
    other_collection=0.05,
)


@pytest.mark.parametrize(
    ("readers", "searched", "allowed"),
    [
        ({"group:hr"}, {"default"}, 1000 * 0.3 * 0.75),
        ({"group:hr", "group:eng", "user:ann"}, {"default"}, 1000 * 0.51 * 0.75),
        ({"user:ann"}, {"elsewhere"}, 1000 * 0.01 * 0.05),
        ({"public", "group:hr", "group:eng"}, {"default", "hr", "x"}, 1000.0),
        (set(), {"default"}, 0.0),
    ],
)
def test_the_principals_shares_add_up_to_at_most_every_passage(
    readers: set[str], searched: set[str], allowed: float
) -> None:
    assert STATISTICS.allowed(readers, searched) == pytest.approx(allowed)


async def test_the_statistics_are_read_once_until_they_are_old() -> None:
    reads: list[int] = []

    async def read() -> list[dict[str, object]]:
        reads.append(1)
        return []

    estimate = AclEstimate()
    assert await estimate.allowed(read, {"public"}, {"default"}) is None
    assert await estimate.allowed(read, {"group:hr"}, {"default"}) is None
    assert len(reads) == 1


def documents(n: int) -> list[Document]:
    """`n` documents of one passage: every hundredth readable by group:few, the other
    odd ones by group:half, the even ones by group:rest; a fifth in collection `small`
    (as many of group:half as of group:rest)."""
    return [
        Document(
            "jira",
            f"D-{i}",
            f"Upload queue release note {i}.",
            f"D-{i}",
            collection="small" if i % 10 in (3, 4) else "default",
            acl=("group:few",) if i % 100 == 7 else ("group:half",) if i % 2 else ("group:rest",),
        )
        for i in range(n)
    ]


async def test_without_statistics_the_planner_is_asked(store: PostgresStore) -> None:
    """A table never analyzed (a few passages written) has no statistics of its access
    lists: the store gives no estimate, and the search functions ask the planner."""
    await index(store, documents(3))
    filters = scoped(SearchFilters(), frozenset({"group:half"}))
    assert (await store.search_arguments(filters))["filter_acl_rows"] is None


async def test_the_estimate_follows_the_analyzed_access_lists(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    """Once the table is analyzed, the estimate is near the passages each set may read
    (every row is sampled at this size: each share as it is)."""
    await index(store, documents(1000))
    await db.execute("ANALYZE siam_vectors")
    for readers, collection, readable in [
        ({"group:few"}, "default", 10),
        ({"group:half"}, "default", 390),
        ({"group:half", "group:rest"}, "default", 790),
        ({"group:half"}, "small", 100),
        ({"user:nobody"}, "default", 0),
    ]:
        filters = scoped(SearchFilters(collection=collection), frozenset(readers))
        estimated = (await store.search_arguments(filters))["filter_acl_rows"]
        assert abs(estimated - readable) <= 20, (readers, collection, estimated)


async def test_a_narrow_set_estimated_from_the_statistics_fills_the_limit(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    """Ten readable passages in a thousand, the table analyzed: a search for ten finds
    all ten in every mode, and a wide set as many as asked."""
    await index(store, documents(1000))
    await db.execute("ANALYZE siam_vectors")
    few = scoped(SearchFilters(), frozenset({"group:few"}))
    assert (await store.search_arguments(few))["filter_acl_rows"] is not None
    query = "upload queue release note"
    for mode in SEARCH_MODES:
        hits = await store.search(SearchRequest(query, vector(query), 10, few, 0.0, mode))
        assert sorted(h.source_id for h in hits) == sorted(f"D-{i}" for i in range(7, 1000, 100))
        wide = scoped(SearchFilters(), frozenset({"group:half"}))
        hits = await store.search(SearchRequest(query, vector(query), 10, wide, 0.0, mode))
        assert len(hits) == 10 and all(int(h.source_id[2:]) % 2 for h in hits), mode


async def test_the_wide_readers_test_is_the_overlap_of_the_lists(db: asyncpg.Connection) -> None:
    """knowledge_acl_allows, the test a wide reader's search makes on each row, passes
    exactly the rows whose list shares a principal with the reader's (empty lists,
    the principal first, later or absent)."""
    differing = await db.fetchval(
        """WITH lists AS (
               SELECT array(SELECT 'p' || (random() * 8)::int
                            FROM generate_series(1, (random() * 3)::int)) AS acl,
                      array(SELECT 'p' || (random() * 8)::int
                            FROM generate_series(1, (random() * 12)::int)) AS readers
               FROM generate_series(1, 5000))
           SELECT count(*) FROM lists
           WHERE (knowledge_acl_allows(acl, readers) IS TRUE) <> (acl && readers)"""
    )
    assert differing == 0


async def test_a_wide_set_finds_only_and_enough_of_its_passages(
    store: PostgresStore, db: asyncpg.Connection
) -> None:
    """Two thirds of a thousand passages readable (more than sqrt(6 k N) = 548 for a
    search's 50 candidates: the graph walked, each row met tested), half of them
    through their list's second principal, a third through none: every mode fills
    the limit with readable passages, some of them readable through the second."""
    docs = documents(1000)
    for i, doc in enumerate(docs):
        doc.acl = (("user:x", "group:many"), ("group:many",), ())[i % 3]
        doc.collection = "default"
    await index(store, docs)
    await db.execute("ANALYZE siam_vectors")
    wide = scoped(SearchFilters(), frozenset({"group:many"}))
    assert (await store.search_arguments(wide))["filter_acl_rows"] > 600
    query = "Upload queue release note"
    found: set[int] = set()
    for mode in SEARCH_MODES:
        hits = await store.search(SearchRequest(query, vector(query), 10, wide, 0.0, mode))
        found |= {int(h.source_id[2:]) for h in hits}
        assert len(hits) == 10 and all(int(h.source_id[2:]) % 3 != 2 for h in hits), mode
    assert any(i % 3 == 0 for i in found)  # readable through its list's second principal
