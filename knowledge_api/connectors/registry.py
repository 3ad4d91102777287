"""Connector kinds, chosen by a source's `--kind`."""

from __future__ import annotations

from knowledge_api.connectors import access
from knowledge_api.connectors.base import Connector, Runtime, Window
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import ConnectorSource
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


def connector_for(
    source: ConnectorSource, collection: str, runtime: Runtime | None = None
) -> Connector:
    """The connector of a source's kind, reading it into `collection` with what the
    service gives every connector (`runtime`: its retries); 400 naming the field for a
    kind, URL or setting it refuses."""
    if source.kind not in connectors.names():
        raise InvalidRequest("kind", f"must be one of: {', '.join(connectors.names())}")
    return connectors.create(source.kind, source, collection, runtime or Runtime())


def read(
    source: ConnectorSource, collection: str, since: str, prune: bool, runtime: Runtime
) -> tuple[Window, set[str] | None]:
    """The window of the items updated since `since` (all of them when empty), and when
    the run prunes (or the read learned them anyway) every source id its service still
    has; None otherwise. A kind that maps its service's permissions also says who is in
    each group the window's documents name or the source granted before (`members`).
    Blocking (a connector's client): run it in a thread."""
    connector = connector_for(source, collection, runtime)
    try:
        window = connector.changed(since)
        access.read_members(connector, source, window)
        if window.seen is not None:
            return window, window.seen
        return window, connector.visible() if prune else None
    finally:
        connector.close()
