"""The composition root: the one place that builds the seams from settings.

Entry points (the app, the CLI, the in-process sidecar API) get their service, and
any store they need beside it, from here; every store learns which embedder writes
its vectors from the embedder built here, never by building one of its own, and the
llm reranker ranks through the service's own synthesis chain.
"""

from __future__ import annotations

from knowledge_api.embeddings import embedders
from knowledge_api.embeddings.base import Embedder
from knowledge_api.models import EmbedderIdentity
from knowledge_api.rerankers import rerankers
from knowledge_api.rerankers.base import Reranker
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores import stores
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.stores.existing.store import existing_tables
from knowledge_api.synthesis.chain import SynthesisChain
from knowledge_api.synthesis.extractive import ExtractiveSynthesizer


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedder, not loaded yet (its identity needs no model)."""
    return embedders.create(settings.embedder, settings)


def build_store(
    settings: Settings, embedder: EmbedderIdentity, backend: str | None = None
) -> KnowledgeStore:
    """The store of `backend` (default KNOWLEDGE_STORE) for vectors of `embedder`; on a
    database other pipelines fill (KNOWLEDGE_SCHEMA_MODE), the store of its tables."""
    store = stores.create(backend or settings.store, settings, embedder)
    if settings.schema_mode == "own":
        return store
    return existing_tables(store, settings)


def build_reranker(settings: Settings, chain: SynthesisChain) -> Reranker:
    """The configured reranker (KNOWLEDGE_RERANKER), not opened yet; the llm reranker
    ranks through `chain`, the chain the service answers with."""
    return rerankers.create(settings.reranker, settings, chain)


def embedder_identity(embedder: Embedder) -> EmbedderIdentity:
    return EmbedderIdentity(embedder.name, embedder.dimension)


def build_service(
    settings: Settings, service: type[KnowledgeService] = KnowledgeService
) -> KnowledgeService:
    """The service (or a subclass of it) over the configured seams; the offline answer
    chooses its sentences with the service's embedder."""
    embedder = build_embedder(settings)
    store = build_store(settings, embedder_identity(embedder))
    chain = SynthesisChain.from_settings(settings)
    built = service(settings, store, embedder, chain, build_reranker(settings, chain))
    for link in chain.links:
        if isinstance(link, ExtractiveSynthesizer):
            link.use_embedder(built.embed_sentences)
    return built
