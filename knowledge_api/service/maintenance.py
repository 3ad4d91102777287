"""Carrying a collection out of the store and back in (`knowledge-api export` and
`import`), or from one store into another (`migrate-store`): the service does the work
and writes its audit entries, so the command line goes through the service as the
HTTP doors do."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest import transfer
from knowledge_api.ingest.migrate import migrate
from knowledge_api.ingest.transfer import Transferred
from knowledge_api.ledger import Actor, AuditEntry, changes
from knowledge_api.models import EmbedderIdentity, IndexSummary, Progress
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Engine
from knowledge_api.service.trail import Trail
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore


class Maintenance:
    """Export and import, over the engine's store, each with its audit entry."""

    def __init__(self, engine: Engine, catalog: Catalog, trail: Trail) -> None:
        self.engine = engine
        self.catalog = catalog
        self.trail = trail

    async def export(
        self, collection: str, output: Path, progress: Progress | None = None
    ) -> Transferred:
        """Write every document of `collection`, with its vectors, to `output`."""
        if collection not in await self.catalog.collections():
            raise InvalidRequest("--collection", f"no collection {collection!r} in the store")
        engine = self.engine
        return await transfer.export_collection(
            engine.store, engine.identity, collection, output, progress
        )

    def embeds_again(self, vectors: EmbedderIdentity) -> bool:
        """Whether a file of `vectors` must be embedded again to be imported (another
        embedder's vectors): the model must be loaded first."""
        return vectors != self.engine.identity

    async def import_file(
        self,
        file: Path,
        collection: str | None,
        vectors: EmbedderIdentity,
        actor: Actor,
        progress: Progress | None = None,
    ) -> Transferred:
        """Read a file `export` wrote (checked already: its `vectors`) into the store,
        embedding the documents again when they are another embedder's, and audit it
        as `actor`'s import."""
        engine = self.engine
        embed = self.catalog.embed_documents if self.embeds_again(vectors) else None
        done = await transfer.import_file(
            engine.store, engine.identity, file, collection, embed, progress, checked=vectors
        )
        # every document of the file now stored, this run's or found unchanged: a rerun
        # after an import killed midway audits what the killed run committed unaudited
        imported = {
            "ids": done.ids,
            "documents": done.documents + done.skipped,
            "indexed": done.documents,
            "unchanged": done.skipped,
            "chunks": done.chunks,
            "embedded": done.embedded,
        }
        await self.trail.audit(actor, "cli import", collection, imported)
        return done


async def migrate_store(
    settings: Settings,
    source: KnowledgeStore,
    target: KnowledgeStore,
    identity: EmbedderIdentity,
    collections: Sequence[str],
    actor: Actor,
    action: str,
    progress: Progress | None = None,
) -> dict[str, IndexSummary]:
    """Copy `collections` (every one when empty) from the open `source` into the open
    `target`, and audit each collection that received documents as `actor`'s
    `action`, in the target's trail: the target is the store that was written, and no
    service is running over it."""
    copied = await migrate(source, target, identity, collections, progress)
    trail = target.audit_log(settings.db_path)
    await trail.open()
    try:
        for name, summary in copied.items():
            if summary.documents:
                counts = changes(None, summary)
                await trail.append(AuditEntry(actor.name, action, name, counts, actor.request_id))
    finally:
        await trail.close()
    return copied
