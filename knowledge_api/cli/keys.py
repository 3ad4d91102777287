"""`keys create | list | revoke`: API keys, kept in the store (only a token's hash)."""

from __future__ import annotations

import argparse
import sys

from knowledge_api.cli.running import split, with_storage
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def run_keys_create(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def create(service: KnowledgeService) -> int:
        key, token = await keys.create(
            service, args.name, split(args.scopes), split(args.collections)
        )
        reach = ", ".join(key.collections) if key.collections else "every collection"
        print(f"created key {key.name!r}: scopes {', '.join(key.scopes)}; {reach}")
        print("the token below is shown once; only its hash is kept:")
        print(token)
        return 0

    return with_storage(settings, create)


def run_keys_list(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def show(service: KnowledgeService) -> int:
        for key in await keys.listed(service):
            reach = ",".join(key.collections) if key.collections else "*"
            print(
                f"{key.name}\tscopes={','.join(key.scopes)}\tcollections={reach}\t{key.created_at}"
            )
        return 0

    return with_storage(settings, show)


def run_keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def revoke(service: KnowledgeService) -> int:
        if not await keys.revoke(service, args.name):
            print(f"error: no key named {args.name!r}", file=sys.stderr)
            return 1
        print(f"revoked key {args.name!r}")
        return 0

    return with_storage(settings, revoke)
