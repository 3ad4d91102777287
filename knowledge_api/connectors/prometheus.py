"""A running Prometheus: its alerting and recording rules (GET /api/v1/rules), one
document per rule as rule files make them, with an alert's current state.

The server says nothing of when a rule changed, so every run reads every rule; a rule
whose text (its state included) did not change is neither embedded nor written again.
A rule the server no longer has is pruned by the run.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, ClassVar

from knowledge_api.connectors.base import Kind, Window, check_settings, secret
from knowledge_api.connectors.http import SourceHTTP, bearer
from knowledge_api.errors import ConnectorFailed, InvalidRequest
from knowledge_api.ingest.metrics import SOURCE_TYPE, mapping, rule_part
from knowledge_api.models import ConnectorSource, Document

RULES_PATH = "/api/v1/rules"
SETTINGS = ("timeout",)
SECRETS = ("token",)


class PrometheusConnector(Kind):
    kind: ClassVar[str] = "prometheus"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.base_url = source.url.rstrip("/")
        self.timeout = float(source.settings.get("timeout", "30"))
        self.documents: list[Document] | None = None

    def changed(self, since: str) -> Window:
        """Every rule (the server keeps no change time): the window holds them all, so
        every run prunes what the server no longer has."""
        self.documents = [self.document(group, rule) for group, rule in self.rules()]
        return Window(self.documents, seen={doc.source_id for doc in self.documents})

    def visible(self) -> set[str]:
        documents = self.documents if self.documents is not None else self.changed("").documents
        return {doc.source_id for doc in documents}

    def close(self) -> None:
        super().close()
        self.documents = None

    def rules(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        body = self.get(RULES_PATH)
        data = body.get("data") if isinstance(body, dict) else None
        groups = data.get("groups") if isinstance(data, dict) else None
        if body.get("status") != "success" or not isinstance(groups, list):
            raise ConnectorFailed(f"{self.base_url}{RULES_PATH} answered without data.groups")
        return [
            (group, rule)
            for group in groups
            if isinstance(group, dict)
            for rule in group.get("rules") or []
            if isinstance(rule, dict) and rule.get("name")
        ]

    def document(self, group: dict[str, Any], rule: dict[str, Any]) -> Document:
        """A rule as a rule file writes it, read by the rule files' reader, with the
        alert's state and its active alerts after it."""
        alerting = rule.get("type") == "alerting"
        written: dict[str, Any] = {
            "alert" if alerting else "record": rule["name"],
            "expr": rule.get("query", ""),
            "labels": rule.get("labels") or {},
            "annotations": rule.get("annotations") or {},
        }
        if rule.get("duration"):
            written["for"] = duration(float(rule["duration"]))
        name = str(group.get("name", ""))
        part = rule_part(name, written)
        metadata = {**part.extracted.metadata, "path": str(group.get("file", ""))}
        content = part.extracted.content
        if alerting:
            state = str(rule.get("state") or "inactive")
            metadata["state"] = state
            content += "\n\n" + alert_state(state, rule.get("alerts") or [])
        if rule.get("health") not in (None, "ok"):
            metadata["health"] = str(rule["health"])
        return Document(
            source_type=SOURCE_TYPE,
            source_id=f"{self.base_url}/{metadata['path'].lstrip('/')}#{part.key}",
            content=content,
            title=part.extracted.title,
            metadata={**metadata, "server": self.base_url},
            collection=self.collection,
        )

    def connect(self) -> SourceHTTP:
        headers = bearer(secret(self.source, "token"))
        return self.runtime.http(self.base_url, headers, timeout=self.timeout)

    def get(self, path: str) -> dict[str, Any]:
        found = self.client().get_json(path)
        if not isinstance(found, dict):
            raise ConnectorFailed(f"{self.base_url}{path} did not answer a JSON object")
        return found


def alert_state(state: str, alerts: list[Any]) -> str:
    """The alert's state now, and each active alert's labels and since when."""
    lines = [f"State: {state}."]
    for alert in alerts:
        if isinstance(alert, dict):
            labels = ", ".join(f"{k}={v}" for k, v in mapping(alert.get("labels")).items())
            since = alert.get("activeAt", "")
            lines.append(f"- {alert.get('state', state)} since {since}: {labels}")
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """Seconds as Prometheus writes a duration: 300 -> 5m, 5400 -> 1h30m."""
    left, text = int(seconds), ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            text += f"{left // size}{unit}"
            left %= size
    return text or "0s"


def check(source: ConnectorSource) -> None:
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequest("url", "must be http://HOST:PORT or https://HOST[:PORT]")
    check_settings(source, SETTINGS, SECRETS)
