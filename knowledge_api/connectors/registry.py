"""Connector kinds, chosen by a source's `--kind`."""

from __future__ import annotations

from knowledge_api.connectors.base import Connector, Window
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import ConnectorSource
from knowledge_api.registry import Registry

connectors: Registry[Connector] = Registry("connector kind", "--kind")
connectors.register("confluence", "knowledge_api.connectors.confluence:ConfluenceConnector")
connectors.register("imap", "knowledge_api.connectors.imap:IMAPConnector")
connectors.register("jira", "knowledge_api.connectors.jira:JiraConnector")
connectors.register("prometheus", "knowledge_api.connectors.prometheus:PrometheusConnector")


def connector_for(source: ConnectorSource, collection: str) -> Connector:
    """The connector of a source's kind, reading it into `collection`; 400 naming the
    field for a kind, URL or setting it refuses."""
    if source.kind not in connectors.names():
        raise InvalidRequest("kind", f"must be one of: {', '.join(connectors.names())}")
    return connectors.create(source.kind, source, collection)


def read(source: ConnectorSource, collection: str, full: bool) -> tuple[Window, set[str]]:
    """The window since the source's cursor (everything when `full`) and every source id
    its service still has. Blocking (a connector's client): run it in a thread."""
    connector = connector_for(source, collection)
    try:
        return connector.changed("" if full else source.cursor), connector.visible()
    finally:
        connector.close()
