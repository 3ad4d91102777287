"""`export`, `import`, `migrate-store`, `backfill-offsets` and `migrate`: a store's
contents carried to a file or to another store, the offsets of chunks stored before
chunks had them, and the Postgres schema applied, or adopted in a database other
pipelines fill."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

from knowledge_api import compose, validation
from knowledge_api.cli.progress import progress
from knowledge_api.cli.running import with_storage
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import AuditEntry, changes, local_user
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores import stores


def run_export(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.ingest import transfer

    collection = validation.collection_name(args.collection, "--collection")
    transfer.check_writable(args.output)

    async def write(service: KnowledgeService) -> int:
        with progress(total=None, unit="document", desc="exporting") as update:
            done = await service.maintenance.export(collection, args.output, update)
        written = f"{done.documents} documents ({done.chunks} chunks) of {collection}"
        print(f"{written} written to {args.output}")
        return 0

    return with_storage(settings, write)


def run_import(settings: Settings, args: argparse.Namespace) -> int:
    """Vectors of the configured embedder are stored as they are; others are embedded
    again, which loads the model (and says so)."""
    from knowledge_api.ingest import transfer

    collection = args.collection and validation.collection_name(args.collection, "--collection")
    if not args.file.is_file():
        raise InvalidRequest(str(args.file), "no such file")
    # every line checked before a model loads or a store opens
    vectors = transfer.check_file(args.file, collection or None)

    async def read(service: KnowledgeService) -> int:
        embed = service.maintenance.embeds_again(vectors)
        if embed:
            print(
                f"the file's vectors are of {vectors.name} ({vectors.dimension}-d), the "
                f"store's embedder is {service.identity.name} ({service.identity.dimension}-d): "
                "embedding the documents again",
                file=sys.stderr,
            )
            await service.load_embedder()
        with progress(total=None, unit="document", desc="importing") as update:
            done = await service.maintenance.import_file(
                args.file, collection or None, vectors, local_user(), update
            )
        again = f", {done.embedded} passages embedded again" if embed else ", nothing embedded"
        print(
            f"{done.documents} documents imported ({done.chunks} chunks{again}), "
            f"{done.skipped} unchanged skipped"
        )
        return 0

    return with_storage(settings, read)


def run_migrate_store(settings: Settings, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from knowledge_api.ingest.migrate import migrate

    target_settings = settings
    if args.to_path is not None:
        if args.target not in PATH_SETTINGS:
            raise InvalidRequest("--to-path", "names a file or folder: sqlite, chroma or qdrant")
        place = PATH_SETTINGS[args.target]
        own = getattr(settings, place)
        target_settings = settings.replace(**{place: type(own)(args.to_path)})
        if args.source == args.target and Path(own).resolve() == args.to_path.resolve():
            raise InvalidRequest("--to-path", "must name another place than the store's own")
    elif args.source == args.target:
        raise InvalidRequest(
            "--to", "must name another store than --from (or give --to-path for a backup)"
        )
    collections = [validation.collection_name(name, "--collection") for name in args.collection]
    identity = compose.embedder_identity(compose.build_embedder(settings))

    async def run() -> int:
        async with contextlib.AsyncExitStack() as stack:
            source = compose.build_store(settings, identity, args.source)
            target = compose.build_store(target_settings, identity, args.target)
            for store in (source, target):
                await store.open()
                stack.push_async_callback(store.close)
            with tqdm(unit="doc", file=sys.stderr, disable=None) as bar:
                copied = await migrate(source, target, identity, collections, bar.update)
            trail = target.audit_log(settings.db_path)  # the target's trail: it was written
            await trail.open()
            stack.push_async_callback(trail.close)
            for name, summary in copied.items():
                if summary.documents:
                    action = f"cli migrate-store --from {args.source}"
                    counts = changes(None, summary)
                    await trail.append(AuditEntry(local_user().name, action, name, counts))
        for name, summary in copied.items():
            print(
                f"{name}: {summary.documents} documents copied ({summary.chunks} chunks), "
                f"{summary.skipped} unchanged skipped"
            )
        return 0

    return asyncio.run(run())


def run_backfill_offsets(settings: Settings, args: argparse.Namespace) -> int:
    """Chunks stored without offsets get them from their document's stored text; no
    model loads (nothing is embedded)."""
    from knowledge_api.ingest.backfill import backfill

    chosen = [validation.collection_name(name, "--collection") for name in args.collection]

    async def run(service: KnowledgeService) -> int:
        collections = chosen or sorted(await service.collections())
        with progress(total=None, unit="document", desc="backfilling") as update:
            done = await backfill(service.store, collections, update)
        print(
            f"{done.documents} documents written again: {done.chunks} chunks given offsets, "
            f"{done.unplaced} whose text reads nowhere in their document left without"
        )
        return 0

    return with_storage(settings, run)


PATH_SETTINGS = {"sqlite": "db_path", "chroma": "chroma_path", "qdrant": "qdrant_path"}
"""The setting naming each file-backed store's place, for `migrate-store --to-path`."""


def run_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """The schema of the postgres and supabase stores: vector columns sized for the
    configured embedder, SQL functions, indexes. Applied migrations are skipped."""
    if args.adopt or args.undo or args.wiki_vectors:
        return run_adoption(settings, args)
    if args.dry_run:
        raise InvalidRequest("--dry-run", "goes with --adopt, --wiki-vectors or --undo")
    identity = compose.embedder_identity(compose.build_embedder(settings))
    store = stores.create("postgres", settings, identity)
    database, applied = asyncio.run(store.migrate_schema())  # type: ignore[attr-defined]
    if applied:
        print(f"{database}: applied {', '.join(applied)}")
    else:
        print(f"{database}: the schema is up to date")
    return 0


def run_adoption(settings: Settings, args: argparse.Namespace) -> int:
    """`migrate --adopt | --wiki-vectors | --undo` on a database other pipelines fill:
    the plan first, then (without --dry-run) the steps, each printed as it starts."""
    from knowledge_api.stores.existing import adopt
    from knowledge_api.stores.existing import wiki_vectors as conversion

    if args.undo and (args.adopt or args.wiki_vectors):
        raise InvalidRequest("--undo", "cannot be combined with --adopt or --wiki-vectors")
    if not settings.database_url:
        raise InvalidRequest(
            "KNOWLEDGE_DATABASE_URL", "must name the existing database (a direct connection)"
        )
    embedder = compose.build_embedder(settings)
    store = stores.create("postgres", settings, compose.embedder_identity(embedder))

    def report(step: str) -> None:
        print(f"applying {step}" if not args.undo else f"undoing {step}", flush=True)

    async def run() -> int:
        async with store.administered() as conn:  # type: ignore[attr-defined]
            if args.undo:
                steps = [adopt.Step(name, sql, "") for name, sql in await adopt.undo_plan(conn)]
                print_plan("undo", steps)
                if not args.dry_run:
                    await adopt.undo(conn, report)
                return 0
            if args.adopt:
                steps = await adopt.adoption_plan(conn)
                print_plan("adopt", steps)
                if not args.dry_run:
                    await adopt.apply(conn, steps, report)
            if args.wiki_vectors:
                await wiki_vectors(conn)
        return 0

    async def wiki_vectors(conn: Any) -> None:
        pages = await conversion.remaining_wiki_pages(conn)
        print(
            f"wiki vectors: {pages} pages to convert in batches of {args.batch_size} "
            f"(TEXT embeddings parsed; empty or malformed ones embedded by {embedder.name})"
        )
        if args.dry_run:
            return
        await asyncio.to_thread(embedder.load)
        done = await conversion.convert_wiki_vectors(
            conn,
            embedder.embed_documents,
            embedder.dimension,
            args.batch_size,
            report,
            lambda total: print(f"  {total.converted + total.embedded} pages", flush=True),
        )
        print(f"wiki vectors: {done.converted} converted, {done.embedded} embedded anew")

    return asyncio.run(run())


def print_plan(action: str, steps: list[Any]) -> None:
    if not steps:
        print(f"{action}: nothing to do")
    for step in steps:
        print(f"-- {action}: {step.name}\n{step.sql.strip()};")
