"""Carrying a collection out of the store and back in (`knowledge-api export` and
`import`), from one store into another (`migrate-store`), giving old chunks their
offsets (`backfill-offsets`) and adopting a database other pipelines fill (`migrate
--adopt`): the service does the work and writes its audit entries, so the command line
goes through the service as the HTTP doors do."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_api.embeddings.base import Embedder
from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest import transfer
from knowledge_api.ingest.backfill import Backfilled, backfill
from knowledge_api.ingest.migrate import migrate
from knowledge_api.ingest.transfer import Transferred
from knowledge_api.ledger import Actor, AuditEntry, changes
from knowledge_api.models import EmbedderIdentity, IndexSummary, Progress
from knowledge_api.service.catalog import Catalog
from knowledge_api.service.engine import Engine
from knowledge_api.service.trail import Trail
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.stores.existing import adopt, wiki_vectors


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

    async def backfill_offsets(
        self, collections: Sequence[str], progress: Progress | None = None
    ) -> Backfilled:
        """Give the chunks of `collections` (every one when empty) stored without
        offsets theirs, from their document's stored text; nothing is embedded."""
        chosen = list(collections) or sorted(await self.catalog.collections())
        return await backfill(self.engine.store, chosen, progress)

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
    trail = target.side_tables(settings.db_path).audit
    await trail.open()
    try:
        for name, summary in copied.items():
            if summary.documents:
                counts = changes(None, summary)
                await trail.append(AuditEntry(actor.name, action, name, counts, actor.request_id))
    finally:
        await trail.close()
    return copied


@dataclass(frozen=True, slots=True)
class Adoption:
    """What `migrate --adopt | --wiki-vectors | --undo` asks of a database other
    pipelines fill (existing-database.md)."""

    adopt: bool = False
    wiki_vectors: bool = False
    undo: bool = False
    dry_run: bool = False
    batch_size: int = 200


async def adopt_database(
    store: Any, embedder: Embedder, asked: Adoption, show: Callable[[str], None]
) -> None:
    """Run `asked` on the Postgres `store`'s database through its administered
    connection: each plan shown first, then (without dry_run) its steps, each shown as
    it starts; the wiki pages' vectors converted in batches, `embedder` embedding the
    pages whose text vector is missing or malformed."""

    def report(step: str) -> None:
        show(f"undoing {step}" if asked.undo else f"applying {step}")

    async with store.administered() as conn:
        if asked.undo:
            steps = [adopt.Step(name, sql, "") for name, sql in await adopt.undo_plan(conn)]
            show_plan("undo", steps, show)
            if not asked.dry_run:
                await adopt.undo(conn, report)
            return
        if asked.adopt:
            steps = await adopt.adoption_plan(conn)
            show_plan("adopt", steps, show)
            if not asked.dry_run:
                await adopt.apply(conn, steps, report)
        if asked.wiki_vectors:
            await convert_wiki_vectors(conn, embedder, asked, show, report)


async def convert_wiki_vectors(
    conn: Any,
    embedder: Embedder,
    asked: Adoption,
    show: Callable[[str], None],
    report: Callable[[str], None],
) -> None:
    pages = await wiki_vectors.remaining_wiki_pages(conn)
    show(
        f"wiki vectors: {pages} pages to convert in batches of {asked.batch_size} "
        f"(TEXT embeddings parsed; empty or malformed ones embedded by {embedder.name})"
    )
    if asked.dry_run:
        return
    await asyncio.to_thread(embedder.load)
    done = await wiki_vectors.convert_wiki_vectors(
        conn,
        embedder.embed_documents,
        embedder.dimension,
        asked.batch_size,
        report,
        lambda total: show(f"  {total.converted + total.embedded} pages"),
    )
    show(f"wiki vectors: {done.converted} converted, {done.embedded} embedded anew")


def show_plan(action: str, steps: list[adopt.Step], show: Callable[[str], None]) -> None:
    if not steps:
        show(f"{action}: nothing to do")
    for step in steps:
        show(f"-- {action}: {step.name}\n{step.sql.strip()};")
