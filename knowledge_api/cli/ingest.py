"""`ingest`, `ingest-git`, `sources` and `sync`: mirroring a source into the index
(added, updated and, with --prune, deleted), and the record of the sources."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from knowledge_api import validation
from knowledge_api.cli.progress import progress
from knowledge_api.cli.running import with_service, with_storage
from knowledge_api.connectors import pages
from knowledge_api.errors import InvalidRequest
from knowledge_api.ingest import ocr
from knowledge_api.ingest.git_source import GitOptions
from knowledge_api.ingest.loaders import LoadOptions, Skipped
from knowledge_api.ledger import MAX_AUDITED_IDS, changes, local_user
from knowledge_api.models import Document, IndexSummary
from knowledge_api.principals import acl_text
from knowledge_api.service import KnowledgeService
from knowledge_api.service.catalog import Catalog
from knowledge_api.settings import Settings, column_roles


def run_ingest(settings: Settings, args: argparse.Namespace) -> int:
    """Files are read and parsed before the model loads, so a wrong path costs nothing.
    Each PATH is a source, mirrored on its own. Exit 1 when some files were skipped,
    after indexing the rest (a skipped file keeps its stored document, even with --prune)."""
    options = LoadOptions(
        source_type=args.source_type,
        collection=validation.collection_name(args.collection, "--collection"),
        metadata=parse_meta(args.meta),
        base_url=args.base_url,
        max_file_mb=settings.max_file_mb,
        kpi_columns=column_roles(settings.kpi_columns) or {},
        max_chars=settings.max_file_chars,
    )
    if args.name and len(args.paths) > 1:
        raise InvalidRequest("--name", "names one source: give a single PATH with it")
    loaded = [(path, Catalog.read_files(path, options)) for path in args.paths]
    status, skipped = 0, []
    for path, found in loaded:
        for file in found.skipped:
            detail = f" ({file.detail})" if file.detail else ""
            print(f"skipped {file.path}: {file.reason}{detail}", file=sys.stderr)
        name, kept, root = source_of(path, found.skipped, options)
        status |= index_documents(
            settings,
            found.documents,
            args.name or name,
            options.collection,
            args,
            kept=kept,
            root=root,
        )
        skipped += found.skipped
    if skipped:
        print(skipped_summary(skipped))
        if any(file.reason == ocr.OFF for file in skipped):
            print(f"OCR is {ocr.state()[1]}")
        return 1
    return status


def source_of(
    path: str, skipped: list[Skipped], options: LoadOptions
) -> tuple[str, Callable[[str], bool], str]:
    """The source PATH is mirrored as: its name, the stored documents a prune keeps
    (those of files this run could not read) and the root of its files. A web page's
    source is its URL, and no folder holds it."""
    if pages.is_url(path):
        return path, lambda source_id: bool(skipped), ""
    files = Path(path)
    return str(files.resolve()), unread_files(files, skipped), files_root(files, options)


def files_root(path: Path, options: LoadOptions) -> str:
    """Where the source of PATH reads its files: the base URL their source ids are under,
    else the resolved folder they are relative to."""
    if options.base_url:
        return options.base_url.rstrip("/")
    return (path if path.is_dir() else path.parent).resolve().as_posix()


def parse_meta(pairs: list[str]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest("--meta", f"takes KEY=VALUE, got {pair!r}")
        meta[key] = value
    return validation.scalar_mapping({"--meta": meta}, "--meta")


def unread_files(path: Path, skipped: list[Skipped]) -> Callable[[str], bool]:
    """Whether a stored document's source id is that of a file this run could not read
    (its source id ends with the file's path, relative or under --base-url)."""
    root = path if path.is_dir() else path.parent
    unread = tuple(Path(file.path).relative_to(root).as_posix() for file in skipped)
    return lambda source_id: bool(unread) and source_id.endswith(unread)


def skipped_summary(skipped: list[Skipped], shown: int = 10) -> str:
    """`3 files skipped: x.png (binary), ...`: the first few by name, the rest counted."""
    names = ", ".join(str(s) for s in skipped[:shown])
    more = f", and {len(skipped) - shown} more" if len(skipped) > shown else ""
    files = "file" if len(skipped) == 1 else "files"
    return f"{len(skipped)} {files} skipped: {names}{more}"


def run_ingest_git(settings: Settings, args: argparse.Namespace) -> int:
    """The commits are listed before the model loads: a bad repository, branch or option
    is an error without loading the model."""
    if args.prune and args.since:
        raise InvalidRequest("--prune", "reads the whole history: it cannot go with --since")
    options = GitOptions(
        since=args.since,
        branch=args.branch,
        base_url=args.base_url,
        collection=validation.collection_name(args.collection, "--collection"),
    )
    source = args.name or str(args.repo.resolve())
    return index_documents(
        settings,
        Catalog.read_git(args.repo, options),
        source,
        options.collection,
        args,
        command="cli ingest-git",
    )


def index_documents(
    settings: Settings,
    documents: list[Document],
    source: str,
    collection: str,
    args: argparse.Namespace,
    kept: Callable[[str], bool] = lambda source_id: False,
    command: str = "cli ingest",
    root: str = "",
) -> int:
    """Mirror `documents` as `source` and print the summary line on stdout. What to do is
    asked of the store alone, so a run with nothing new never loads the model."""
    from knowledge_api.usecases import sources

    started = time.perf_counter()
    name = validation.source_name(source, "--name")

    async def run(service: KnowledgeService) -> int:
        acl = None if args.acl is None else acl_text(args.acl)
        plan = await sources.plan_mirror(
            service, documents, name, collection, args.prune, kept, root, acl
        )
        refused = plan.refusal(settings.prune_max_fraction, args.allow_mass_delete)
        if args.dry_run:
            print("\n".join(plan.lines() or ["nothing to change"]))
            if refused is not None:  # exit as the real run would
                print(f"error: the real run would be refused: {refused.message}", file=sys.stderr)
                return 1
            return 0
        if refused is not None:
            raise refused
        indexing = started
        if plan.changed:
            await service.load_embedder()
            indexing = time.perf_counter()  # the model loaded: chunks/s is the indexing rate
        with progress(total=len(plan.changed), unit="document", desc="indexing") as update:
            report = await sources.mirror(service, plan, update)
        if plan.changed or report.deleted:
            removed = list(plan.deleted)[:MAX_AUDITED_IDS]
            written = changes(plan.changed, report.indexed, removed=report.deleted)
            await service.audit(
                local_user(), command, collection, {**written, "removed_ids": removed}
            )
        deleted = f", {report.deleted} deleted" if args.prune else ""
        print(ingest_summary(report.indexed, report.unchanged, indexing) + deleted)
        return 0

    return with_storage(settings, run)


def ingest_summary(summary: IndexSummary, unchanged: int, started: float) -> str:
    seconds = time.perf_counter() - started
    return (
        f"{summary.documents} documents indexed ({summary.chunks} chunks, "
        f"{summary.embedded} embedded), {summary.skipped + unchanged} unchanged skipped, "
        f"in {seconds:.1f}s ({summary.chunks / max(seconds, 1e-9):.0f} chunks/s)"
    )


def run_sync(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import kb_sync

    settings = settings.replace(kb_sync_url=args.source)
    return with_service(
        settings,
        lambda service: kb_sync.sync_command(
            service,
            args.full,
            args.allow_mass_delete,
            None if args.acl is None else acl_text(args.acl),
        ),
    )
