"""Document access lists on every backend: a search, its facets and a filter on `acl`
never let a passage through that the caller's principals do not allow, and a narrow
access list still fills the limit when that many passages are readable."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_api import facets
from knowledge_api.filters import parse as parse_filter
from knowledge_api.models import SEARCH_MODES, Document, DocumentPage, ReadableCount, SearchFilters
from knowledge_api.principals import scoped, visible
from knowledge_api.stores.base import KnowledgeStore, SearchRequest
from knowledge_api.stores.hybrid import HybridSearch
from tests import test_permissions as routes
from tests.test_store_conformance import BACKENDS, index, index_source, opened, vector

PRINCIPALS = ("public", "user:ann@example.com", "user:bob", "group:hr", "group:eng", "group:x")
QUERY = "upload queue release note"
ACL = st.lists(st.sampled_from(PRINCIPALS), max_size=3, unique=True)
FIVE = [name for name in BACKENDS if name != "postgres-replica"]
"""The five backends (the replica reads what the postgres store wrote)."""


store = pytest.fixture(params=FIVE, name="store")(opened)


def documents(acls: list[list[str]]) -> list[Document]:
    return [
        Document(
            "jira",
            f"D-{i}",
            f"Upload queue release note {i} about the {'hr' if i % 2 else 'eng'} team.",
            f"D-{i}",
            {"team": "hr" if i % 2 else "eng"},
            acl=tuple(acl),
        )
        for i, acl in enumerate(acls)
    ]


async def test_a_document_keeps_its_access_list(store: KnowledgeStore) -> None:
    docs = documents([["group:hr", "user:bob"], [], ["public"]])
    await index(store, docs)
    for doc in docs:
        found = await store.get_by_id(doc.id)
        assert found is not None and found.acl == doc.acl
    assert await store.set_acl([docs[1].id, "missing"], ["group:eng"]) == 1
    changed = await store.get_by_id(docs[1].id)
    assert changed is not None and changed.acl == ("group:eng",)
    hits = await store.search(
        SearchRequest(
            QUERY, vector(QUERY), 10, scoped(SearchFilters(), frozenset({"group:eng"})), 0.0
        )
    )
    assert {h.source_id for h in hits} == {"D-1"}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    acls=st.lists(ACL, min_size=1, max_size=12),
    held=st.frozensets(st.sampled_from(PRINCIPALS), min_size=1),
    narrowing=st.sampled_from([None, "group:hr", "public"]),
    seed=st.integers(0, 1000),
)
async def test_nothing_outside_the_principals_is_found(
    store: KnowledgeStore,
    acls: list[list[str]],
    held: frozenset[str],
    narrowing: str | None,
    seed: int,
) -> None:
    """Random documents with random access lists, random principal sets: every mode
    finds exactly the readable passages (narrowed by a filter on `acl` when one is
    given), and the facets count only them."""
    docs = documents(acls)
    await store.delete_documents([f"{d.id}" for d in documents([[]] * 12)])
    await index(store, docs)
    allowed = {d.source_id for d in docs if visible(d.acl, held)}
    if narrowing is not None:
        allowed &= {d.source_id for d in docs if narrowing in d.acl}
    where = parse_filter({"acl": narrowing}) if narrowing else None
    filters = scoped(SearchFilters(where=where), held)
    mode = random.Random(seed).choice(SEARCH_MODES)
    hits = await store.search(SearchRequest(QUERY, vector(QUERY), 20, filters, 0.0, mode))
    assert {h.source_id for h in hits} == allowed, (mode, held, narrowing)
    passages = [{"team": d.metadata["team"]} for d in docs if d.source_id in allowed]
    assert await store.facet_counts(filters, ("team",)) == facets.count(("team",), passages)


async def test_a_narrow_access_list_still_fills_the_limit(store: KnowledgeStore) -> None:
    """Five readable passages in five hundred (1 %): a search for five finds all five,
    in every mode, ranked among the readable ones only."""
    acls = [["group:few"] if i % 100 == 7 else ["group:many"] for i in range(500)]
    await index(store, documents(acls))
    filters = scoped(SearchFilters(), frozenset({"group:few"}))
    for mode in SEARCH_MODES:
        hits = await store.search(SearchRequest(QUERY, vector(QUERY), 5, filters, 0.0, mode))
        assert sorted(h.source_id for h in hits) == [f"D-{i}" for i in (107, 207, 307, 407, 7)]


async def test_counts_and_listings_keep_to_the_principals(store: KnowledgeStore) -> None:
    """Each backend counts the documents a reader may read by collection and source as
    the reference does (reading every page, testing each document's access list), and
    a page listed for a reader holds the first readable documents (all of the page on
    the backends that list by an index of access lists)."""
    acls = [["group:hr"], [], ["public", "group:eng"], ["user:bob"], ["group:eng"]] * 4
    docs = documents(acls)
    for i, doc in enumerate(docs):
        doc.collection, doc.source = ("hr", "") if i % 3 else ("eng", f"s{i % 2}")
    for source in ("", "s0", "s1"):
        await index_source(store, [d for d in docs if d.source == source], source)
    chunks = {d.id: len((await store.get_by_id(d.id)).chunks) for d in docs}  # type: ignore[union-attr]
    for held in (frozenset({"group:eng"}), frozenset({"public", "user:bob"}), frozenset()):
        expected: dict[tuple[str, str], tuple[int, int]] = {}
        for doc in (d for d in docs if visible(d.acl, held)):
            count, passages = expected.get((doc.collection, doc.source), (0, 0))
            expected[doc.collection, doc.source] = (count + 1, passages + chunks[doc.id])
        want = [ReadableCount(c, s, *expected[c, s]) for c, s in sorted(expected)]
        assert await store.readable_counts(held) == want, held
        assert await HybridSearch.readable_counts(store, held) == want, held  # type: ignore[arg-type]
        for collection in ("hr", "eng"):
            page = DocumentPage(collection, 3, readers=held)
            listed = [d.id for d in await store.list_documents(page) if visible(d.acl, held)]
            readable = sorted(
                d.id for d in docs if d.collection == collection and visible(d.acl, held)
            )
            assert listed == readable[: len(listed)], (held, collection)
            if store.name in ("sqlite", "postgres", "supabase"):
                assert len(listed) == min(3, len(readable)), (held, collection)


@pytest.mark.parametrize("name", FIVE)
def test_every_reading_route_keeps_to_the_readers_documents_on_every_backend(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The black-box walk of tests/test_permissions.py on each backend: queries with
    their facets and pages, answers, chats, retrieval, ratings, detail, documents/{id},
    the listing and the collections, for an admin, a key with groups of its own and a
    chat UI delegating for two users; then an access list changed and read at once."""
    settings = BACKENDS[name](request, tmp_path).replace(auth="keys")
    with routes.served(settings) as company:
        routes.test_each_reader_finds_only_what_its_principals_allow(company)
        routes.test_hidden_documents_do_not_exist_on_any_reading_route(company)
        routes.test_answers_chats_retrieval_and_ratings_keep_to_the_readers_documents(company)
        routes.test_access_lists_change_without_embedding_and_take_effect_at_once(company)
