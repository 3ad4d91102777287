"""What a chat UI's user reads: a key with the `delegate` scope asking for them
(`X-Knowledge-User`), over the documents listing of the HTTP API, so that the groups
the service keeps for them (those a connector filled) decide."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import replace

from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.settings import Settings
from tests.test_access import bearer, make_key


def readable(
    settings: Settings, collection: str, source: str, users: Iterable[str]
) -> dict[str, set[str]]:
    """User -> the source ids of the source's documents they may read."""
    token = asyncio.run(make_key(settings, f"chat-{uuid.uuid4().hex[:8]}", ["read", "delegate"]))
    seen: dict[str, set[str]] = {}
    app = create_app(replace(settings, allowed_hosts="testserver"))
    with TestClient(app) as client:
        for user in users:
            headers = {**bearer(token), "X-Knowledge-User": user}
            params = {"collection": collection, "source": source, "limit": 500}
            answer = client.get("/v1/knowledge/documents", params=params, headers=headers)
            if answer.status_code == 404:  # every document hidden: as missing
                seen[user] = set()
                continue
            assert answer.status_code == 200, answer.text
            assert answer.json()["next_cursor"] is None
            seen[user] = {doc["source_id"] for doc in answer.json()["documents"]}
    return seen
