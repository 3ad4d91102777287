"""`keys create | list | revoke`: API keys, kept in the store (only a token's hash);
`groups set | get`: the groups the service knows for a user id; `acl set`: who may
read a document or a source's documents."""

from __future__ import annotations

import argparse
import sys

from knowledge_api import validation
from knowledge_api.cli.running import on_storage, split, with_storage
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


@on_storage
async def run_keys_create(service: KnowledgeService, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    key, token = await keys.create(
        service,
        args.name,
        split(args.scopes),
        split(args.collections),
        user=args.user,
        groups=split(args.groups),
    )
    reach = ", ".join(key.collections) if key.collections else "every collection"
    reader = f"; reads as user {key.user!r}" if key.user else ""
    held = f"; groups {', '.join(key.groups)}" if key.groups else ""
    print(f"created key {key.name!r}: scopes {', '.join(key.scopes)}; {reach}{reader}{held}")
    print("the token below is shown once; only its hash is kept:")
    print(token)
    return 0


@on_storage
async def run_keys_list(service: KnowledgeService, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    for key in await keys.listed(service):
        reach = ",".join(key.collections) if key.collections else "*"
        reader = f"\tuser={key.user}" if key.user else ""
        held = f"\tgroups={','.join(key.groups)}" if key.groups else ""
        print(
            f"{key.name}\tscopes={','.join(key.scopes)}\tcollections={reach}\t"
            f"{key.created_at}{reader}{held}"
        )
    return 0


@on_storage
async def run_keys_revoke(service: KnowledgeService, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    if not await keys.revoke(service, args.name):
        print(f"error: no key named {args.name!r}", file=sys.stderr)
        return 1
    print(f"revoked key {args.name!r}")
    return 0


@on_storage
async def run_groups_set(service: KnowledgeService, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import permissions

    found = await permissions.set_groups(service, args.id, split(args.groups))
    print(f"user {args.id!r}: groups {', '.join(found) or 'none'}")
    return 0


@on_storage
async def run_groups_get(service: KnowledgeService, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import permissions

    print(",".join(await permissions.groups(service, args.id)))
    return 0


def run_acl_set(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.principals import acl_text
    from knowledge_api.usecases import permissions

    acl = acl_text(args.acl, "ACL")
    collection = validation.collection_name(args.collection, "--collection")

    async def change(service: KnowledgeService) -> int:
        target: Document | permissions.Source
        if args.source is not None:
            target = permissions.Source(collection, args.source)
        else:
            doc = await service.document(args.document)
            if doc is None or doc.collection != collection:
                print(f"error: no document {args.document!r} in {collection!r}", file=sys.stderr)
                return 1
            target = doc
        said = await permissions.set_acl(service, target, acl, "acl set")
        shown = ", ".join(acl) or "closed (admin keys only)"
        print(f"acl of {said['documents']} documents: {shown}; embedded 0")
        return 0

    return with_storage(settings, change)
