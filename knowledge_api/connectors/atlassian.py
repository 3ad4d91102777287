"""What the Jira and Confluence connectors share: Cloud or Server/Data Center, the
credentials (an account's e-mail and API token by basic auth, or a personal access
token as a bearer), the HTTP client, and the time windows of incremental runs.

A run's cursor is the time it started (UTC, ISO 8601). The next run asks for what was
updated since that time less KNOWLEDGE_SYNC_OVERLAP (the run moves the cursor back), so
an item whose change the vendor's search index had not yet taken in when the previous
run asked is picked up by the next; what the overlap returns again unchanged is neither
embedded nor written again.
"""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from knowledge_api.connectors.base import secret
from knowledge_api.connectors.http import Retries, SourceHTTP
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import ConnectorSource

SETTINGS = ("deployment", "user", "timeout")
SECRETS = ("token", "email")
DEPLOYMENTS = ("cloud", "server")
CLOUD_HOSTS = (".atlassian.net", ".jira.com", ".jira-dev.com")


def check(source: ConnectorSource, product: str) -> None:
    """InvalidRequest naming the field of a URL, deployment or credentials this
    connector cannot use."""
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequest("url", f"must be the {product} site: https://HOST[/PATH]")
    deployment = source.settings.get("deployment")
    if deployment is not None and deployment not in DEPLOYMENTS:
        raise InvalidRequest("settings.deployment", "must be cloud or server")
    if "token" not in source.secrets:
        raise InvalidRequest(
            "secrets.token",
            f"a {product} source needs --secret token=ENV_VAR: an API token (with "
            "--set user=EMAIL or --secret email=ENV_VAR) or a personal access token",
        )
    if "user" in source.settings and "email" in source.secrets:
        raise InvalidRequest("secrets.email", "takes the place of settings.user: give one")
    timeout = source.settings.get("timeout", "30")
    try:
        if float(timeout) <= 0:
            raise ValueError
    except ValueError as e:
        raise InvalidRequest("settings.timeout", "must be a number of seconds above 0") from e


def is_cloud(source: ConnectorSource) -> bool:
    """The `deployment` setting, else Cloud for Atlassian's own hosts."""
    deployment = source.settings.get("deployment")
    if deployment is not None:
        return deployment == "cloud"
    host = urllib.parse.urlsplit(source.url).hostname or ""
    return host.endswith(CLOUD_HOSTS)


def client(
    source: ConnectorSource, retries: Retries | None = None, base_url: str = ""
) -> SourceHTTP:
    """The source's HTTP client (at `base_url`, else the source's URL): basic auth with
    the account's e-mail and API token, or the token alone as a bearer (a personal
    access token)."""
    token = secret(source, "token")
    user = source.settings.get("user") or secret(source, "email")
    headers = {"Accept": "application/json"}
    auth: tuple[str, str] | None = None
    if user:
        auth = (user, token)
    else:
        headers["Authorization"] = f"Bearer {token}"
    return SourceHTTP(
        base_url or source.url,
        headers=headers,
        auth=auth,
        retries=retries,
        timeout=float(source.settings.get("timeout", "30")),
    )


def now() -> datetime:
    return datetime.now(UTC)


def cursor_of(started: datetime) -> str:
    return started.astimezone(UTC).isoformat(timespec="seconds")


def since(cursor: str) -> datetime | None:
    """Where a run's window starts: the instant it is given (the previous run's start,
    moved back by the overlap), None from the beginning."""
    if not cursor:
        return None
    try:
        started = datetime.fromisoformat(cursor)
    except ValueError:
        return None  # a cursor of another kind's making: read everything once
    return started if started.tzinfo else started.replace(tzinfo=UTC)


def query_time(moment: datetime, zone: str) -> str:
    """`moment` as JQL and CQL take a date, `yyyy-MM-dd HH:mm` in the time zone of the
    account asking (they read it so), rounded down to the minute."""
    try:
        where = ZoneInfo(zone) if zone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        where = UTC
    return moment.astimezone(where).strftime("%Y-%m-%d %H:%M")


def iso(value: object) -> str:
    """A date the Atlassian APIs answer (`2026-11-02T10:15:30.123+0000`) as ISO 8601
    in UTC; '' when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return ""
    text = value.strip()
    if len(text) > 5 and text[-5] in "+-" and text[-4:].isdigit():
        text = text[:-2] + ":" + text[-2:]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return ""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")
