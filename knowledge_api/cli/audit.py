"""`audit`: the trail of writes, paged as GET /v1/knowledge/audit pages it."""

from __future__ import annotations

import argparse

import orjson

from knowledge_api.cli.running import with_storage
from knowledge_api.ledger import audit_query, cursor_of
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def run_audit(settings: Settings, args: argparse.Namespace) -> int:
    """The trail as GET /v1/knowledge/audit pages it: an entry per line, then the
    cursor of the next page (`next_cursor: ...`) when the page was full."""
    asked = {
        name: getattr(args, name)
        for name in ("limit", "cursor", "key", "collection", "since", "until")
        if getattr(args, name) is not None
    }
    query = audit_query(asked)

    async def show(service: KnowledgeService) -> int:
        entries = await service.audit_page(query)
        for entry in entries:
            print(orjson.dumps(entry.view()).decode())
        if entries and len(entries) == query.limit:
            print(f"next_cursor: {cursor_of(entries[-1].id)}")
        return 0

    return with_storage(settings, show)
