"""Connector kinds, chosen by a source's `--kind`, and one run's read of a source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from itertools import islice
from types import TracebackType

from knowledge_api.connectors import access
from knowledge_api.connectors.base import Connector, Runtime, Window
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import ConnectorSource, Document
from knowledge_api.registry import Registry

connectors: Registry[Connector] = Registry("connector kind", "--kind")
connectors.register("confluence", "knowledge_api.connectors.confluence:ConfluenceConnector")
connectors.register("imap", "knowledge_api.connectors.imap:IMAPConnector")
connectors.register("kb", "knowledge_api.connectors.kb:KBConnector")
connectors.register("jira", "knowledge_api.connectors.jira:JiraConnector")
connectors.register("prometheus", "knowledge_api.connectors.prometheus:PrometheusConnector")
connectors.register("github", "knowledge_api.connectors.github:GitHubConnector")
connectors.register("slack", "knowledge_api.connectors.slack:SlackConnector")
connectors.register("web", "knowledge_api.connectors.web:WebConnector")

READ_BATCH = 256
"""Documents a run takes from its connector at a time (the pipeline's batch): what a
sync holds of a window is this many documents and the one batch read ahead."""


def connector_for(
    source: ConnectorSource, collection: str, runtime: Runtime | None = None
) -> Connector:
    """The connector of a source's kind, reading it into `collection` with what the
    service gives every connector (`runtime`: its retries); 400 naming the field for a
    kind, URL or setting it refuses."""
    if source.kind not in connectors.names():
        raise InvalidRequest("kind", f"must be one of: {', '.join(connectors.names())}")
    return connectors.create(source.kind, source, collection, runtime or Runtime())


class Reading:
    """One run's read of a source: the documents of its window in batches, as the
    connector's pages come (each read on a worker thread, the next one while the run
    writes the last), then the window's cursor and what the service still has. Used as
    `async with`: the connector is closed at its end."""

    def __init__(
        self, source: ConnectorSource, collection: str, since: str, runtime: Runtime
    ) -> None:
        self.connector = connector_for(source, collection, runtime)
        self.source = source
        self.since = since
        self.permissions = access.maps(self.connector, source)
        """The documents carry their service's permissions as their access lists."""
        self.named: set[str] = set()
        """The groups the access lists of the documents read so far name."""
        self.window: Window | None = None
        self.documents: Iterator[Document] = iter(())
        self.ahead: asyncio.Future[list[Document]] | None = None

    async def __aenter__(self) -> Reading:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.ahead is not None:  # a read still on its thread: let it end first
            await asyncio.gather(self.ahead, return_exceptions=True)
        await asyncio.to_thread(self.connector.close)

    async def batches(self) -> AsyncIterator[list[Document]]:
        """The window's documents, READ_BATCH at a time, the next batch read while the
        caller handles this one."""
        self.ahead = asyncio.ensure_future(asyncio.to_thread(self.batch))
        while batch := await self.ahead:
            self.ahead = asyncio.ensure_future(asyncio.to_thread(self.batch))
            yield batch
        self.ahead = None

    def batch(self) -> list[Document]:
        """The next documents of the window ([] once all are read). Blocking."""
        if self.window is None:
            self.window = self.connector.changed(self.since)
            self.documents = iter(self.window.documents)
        batch = list(islice(self.documents, READ_BATCH))
        self.named |= access.groups_named((doc.acl for doc in batch), "")
        return batch

    @property
    def read(self) -> Window:
        """The window, once its documents are read: its cursor and problems."""
        assert self.window is not None, "the window is read first"
        return self.window

    async def seen(self, prune: bool) -> set[str] | None:
        """Once the documents are read: every source id the service still has, when the
        run prunes (the cheap listing, `visible`) or the read learned them anyway;
        None otherwise."""
        if self.read.seen is not None:
            return self.read.seen
        return await asyncio.to_thread(self.connector.visible) if prune else None

    async def members(self) -> None:
        """Once the documents are read, for a kind that maps its service's permissions:
        who is in each group the window's documents and scopes name or the source
        granted before (`Window.members`), the problems met with the window's."""
        await asyncio.to_thread(
            access.read_members, self.connector, self.source, self.read, self.named
        )
