"""The SQLite store reads the feedback round's seed vectors by row id, without building
hits for them: the same vectors as the path every store shares (hydrate the seeds, then
read the vectors of their texts), one per distinct text, none for a deleted seed."""

from __future__ import annotations

import numpy as np

from knowledge_api.models import SearchFilters
from knowledge_api.service import KnowledgeService
from knowledge_api.stores.hybrid import Asked, HybridSearch
from knowledge_api.stores.sqlite.store import SQLiteStore


def as_set(vectors: list[np.ndarray]) -> set[bytes]:
    return {np.asarray(v, dtype=np.float32).tobytes() for v in vectors}


async def test_the_seed_vectors_are_those_of_the_shared_path(loaded: KnowledgeService) -> None:
    store = loaded.store
    assert isinstance(store, SQLiteStore)
    vector = loaded.embedder.embed_query("How do I reset my password?")
    asked = Asked("password reset", vector, 10, SearchFilters(), "hybrid", store.tuning)
    fused, similarity = await store.fused_candidates(asked)
    seeds = fused[:3]
    shared = await HybridSearch.seed_vectors(store, seeds, similarity)
    read = await store.seed_vectors(seeds, similarity)
    assert len(read) == len(shared) == 3
    assert as_set(read) == as_set(shared)
    # a seed named twice (or two chunks of one text) gives its vector once
    twice = await store.seed_vectors([seeds[0], seeds[0]], similarity)
    assert len(twice) == 1
    assert as_set(twice) == as_set(await HybridSearch.seed_vectors(store, seeds[:1], similarity))
    # a seed deleted since it was ranked gives none
    first = await store.hydrate(seeds[:1], similarity)
    await store.delete(first[0].document_id)
    assert len(await store.seed_vectors(seeds[:1], similarity)) == 0
