"""`sources`: the sources with their documents and runs, and the connector sources
(`sources add`, `sources sync`, `sources remove`)."""

from __future__ import annotations

import argparse

from knowledge_api import validation
from knowledge_api.cli.running import print_json, with_storage
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import changes, local_user
from knowledge_api.models import ConnectorSource
from knowledge_api.principals import acl_text
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import catalog as use
from knowledge_api.usecases import connectors


def run_sources(settings: Settings, args: argparse.Namespace) -> int:
    """The sources, one line each: collection, name, documents and last run, and for a
    connector source its kind, cursor, next run and last error (`--json`: the API's
    listing)."""
    collection = args.collection and validation.collection_name(args.collection, "--collection")

    async def show(service: KnowledgeService) -> int:
        found = await use.sources(service, collection or None)
        if args.json:
            print_json(
                {
                    "sources": [
                        connectors.source_view(info, settings.sync_interval) for info in found
                    ]
                }
            )
            return 0
        for info in found:
            line = f"{info.collection}\t{info.name}\t{info.documents} documents"
            line += f"\tlast run {info.last_run}"
            if info.connector:
                body = connectors.source_view(info, settings.sync_interval)
                line += f"\tkind {body['kind']}\tcursor {body['cursor'] or '-'}"
                line += f"\tnext run {body['next_run'] or '-'}"
                line += f"\tlast error {body['last_error'] or '-'}"
                if body["warning"]:
                    line += f"\twarning {body['warning']}"
            print(line)
        if not found:
            print("no sources")
        return 0

    return with_storage(settings, show)


def run_add(settings: Settings, args: argparse.Namespace) -> int:
    collection = validation.collection_name(args.collection, "--collection")
    name = validation.source_name(args.name, "NAME")
    source = ConnectorSource(
        kind=args.kind,
        url=args.url,
        settings=pairs(args.set, "--set"),
        secrets=pairs(args.secret, "--secret"),
    )

    acl = acl_text(args.acl or "")

    async def add(service: KnowledgeService) -> int:
        await connectors.add_source(service, collection, name, source, acl)
        print(
            f"added {source.kind} source {name!r} to {collection!r}; run: knowledge-api "
            f"sources sync {name}"
        )
        return 0

    return with_storage(settings, add)


def run_sync(settings: Settings, args: argparse.Namespace) -> int:
    """One source, or every one with --all; exit 1 when a run stopped on an error."""
    if bool(args.name) == bool(args.all):
        raise InvalidRequest("NAME", "name one source, or give --all (not both)")
    collection = args.collection and validation.collection_name(args.collection, "--collection")

    async def sync(service: KnowledgeService) -> int:
        if args.all:
            found = await connectors.connector_sources(service, collection or None)
        else:
            found = [await connectors.find_source(service, args.name, collection or None)]
        results = []
        for info, source in found:
            result = await connectors.sync_source(
                service,
                info,
                source,
                local_user(),
                args.full,
                args.dry_run,
                args.allow_mass_delete,
            )
            if args.dry_run and result.plan is not None:
                for line in result.plan.lines():
                    print(line)
            print(result.line(), flush=True)
            results.append(result)
        if not found:
            print("no connector sources")
        return 1 if any(result.error is not None for result in results) else 0

    return with_storage(settings, sync)  # the model loads when a run has work for it


def run_remove(settings: Settings, args: argparse.Namespace) -> int:
    collection = args.collection and validation.collection_name(args.collection, "--collection")

    async def remove(service: KnowledgeService) -> int:
        info, _ = await connectors.find_source(service, args.name, collection or None)
        deleted = await use.delete_source(service, info.collection, info.name, lambda _: True)
        ids = deleted or []
        action = f"sources remove {info.name}"
        await service.audit(local_user(), action, info.collection, changes(ids=ids))
        print(f"removed {info.name!r} from {info.collection!r} with its {len(ids)} documents")
        return 0

    return with_storage(settings, remove)


def pairs(values: list[str], option: str) -> dict[str, str]:
    found = {}
    for pair in values:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest(option, f"takes KEY=VALUE, got {pair!r}")
        found[key.strip()] = value.strip()
    return found
