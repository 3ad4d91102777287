"""A connector reads a service where knowledge lives (a mailbox, a Prometheus server)
and hands back documents: those new or changed since its cursor, and the source ids of
everything it can see, so that what the service no longer has is pruned.

A connector source is kept with the store's sources (`SourceInfo.connector`) as the
JSON of `models.ConnectorSource`: its kind, URL, settings, the names of the environment
variables holding its secrets (never their values), its cursor and its last error.

The contract every kind keeps (usecases/connector_run.py runs it):

- Built as `Kind.from_settings(source, collection, runtime)`: `runtime` (a `Runtime`)
  holds what the service gives every connector, such as the retry policy of its HTTP
  calls (KNOWLEDGE_SYNC_RETRIES); a kind calling an HTTP API makes its client with
  `runtime.http(...)`, so that 429 and 503 honour `Retry-After`, other failures back off,
  and 401/403/404/410 stop the run with the reason.
- Dates: each Document carries its item's own `created_at` and `updated_at` (the
  ticket's, the page's, the message's), as `validation.utc_text` writes them, wherever
  the service has them; "" leaves them to the store (created when first stored, updated
  when written). Filters, recency and listings use them, and the run keeps, of an item
  read twice in one window, the copy updated last.
- `changed(since)`: the items updated at or after `since` ("" for every item), as a
  `Window` whose documents come as the service's pages are read (a generator). The run
  passes the last cursor moved back by KNOWLEDGE_SYNC_OVERLAP when it is an ISO 8601
  instant, so an item a service's search returned late (its index lags) is read by the
  next run; a cursor of another form (a mailbox's UIDs) is the kind's own, handed back
  as it was left. `Window.cursor` "" stands for the instant the read began, which is
  what a kind searching by update time should leave. The run writes the documents in
  batches as they come and stores the cursor only once every one of them is: a run
  that stops midway leaves the cursor where it was, and the next run reads the window
  again (what was written already is unchanged, neither embedded nor written again).
- `visible()`: the source id of every item, asked only when the run prunes (`sources
  sync --full`, or a source's last prune older than KNOWLEDGE_PRUNE_EVERY); a kind
  that learns them anyway while reading (it reads the service whole) sets `Window.seen`
  and is pruned at every run. A stored document whose source id is seen, or is
  `ID/NAME` of an id seen (an attachment), stays; the others go, under the mass-delete
  guard (KNOWLEDGE_PRUNE_MAX_FRACTION).
- Permissions (connectors/access.py): a kind that maps its service's permissions gives
  each document its access list and has `members(groups)`, the user ids of each of its
  groups now (and the problems met, for `Window.problems`); the run gives users those
  groups and takes back those that lapsed.
- Failures: raise `errors.ConnectorFailed` with a message naming no secret; the run
  stops, deletes nothing, keeps its cursor and shows the message as the source's
  `last_error`. An item that cannot be read goes to `Window.problems` instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

import httpx

from knowledge_api.connectors.http import Retries, SourceHTTP
from knowledge_api.errors import ConfigurationError, InvalidRequest
from knowledge_api.models import ConnectorSource, Document


@dataclass
class Window:
    """What one run reads: the documents new or changed since the cursor it started
    from, and the cursor the next run starts from once they are stored ("": the instant
    the read began).

    `documents` is read once, as the run writes them: a kind hands a generator that
    reads its service page by page, so no run holds a whole project. What a kind learns
    only by reading (its cursor, `problems`, `seen`) it sets on the window as the
    generator ends; the run reads them then."""

    documents: Iterable[Document] = ()
    cursor: str = ""
    problems: list[str] = field(default_factory=list)
    """Items left out (unreadable), each with its reason: the run goes on without them."""
    seen: set[str] | None = None
    """The source id of every item the service has, when the read learned them anyway:
    the run prunes with them, without asking `visible`."""
    members: dict[str, set[str]] | None = None
    """The groups the service's permissions make (connectors/access.py) and the user ids
    in each; None for a kind that does not map them."""
    scopes: dict[str, tuple[str, ...]] | None = None
    """Source-id prefix -> the access list of every item under it now (a repository's
    `OWNER/NAME#`, a channel's `ID/`), so that a change of it (a repository made
    private) reaches the items the run did not read."""


@dataclass(frozen=True)
class Runtime:
    """What the service hands every connector it builds."""

    retries: Retries = field(default_factory=Retries)
    """How often a call is tried again (KNOWLEDGE_SYNC_RETRIES) and how long between."""
    overlap: float = 0.0
    """Seconds a window starts before its cursor (KNOWLEDGE_SYNC_OVERLAP), for the kinds
    whose cursor is their own (one instant per repository, say): the run moves back only
    a cursor that is one ISO 8601 instant."""

    def http(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | tuple[str, str] | None = None,
        timeout: float = 30.0,
    ) -> SourceHTTP:
        """A client of the connector's service with the service's retry policy."""
        return SourceHTTP(base_url, headers, auth, self.retries, timeout)


class Connector(Protocol):
    """One kind of connector, built for a source from its record."""

    kind: ClassVar[str]

    def changed(self, since: str) -> Window:
        """The documents updated since `since` (everything when it is empty)."""
        ...

    def visible(self) -> set[str]:
        """The source ids of every document the service still has, for pruning."""
        ...

    def close(self) -> None: ...


class Kind:
    """What the kinds' classes share: built by the registry (`from_settings`) for a
    source, into a collection, with the service's runtime, then set up from the
    source's settings (`setup`: the kind's own, which it checks); a kind calling an
    HTTP API opens its client (`connect`) when first needed (`client`), and closing
    the connector closes it."""

    kind: ClassVar[str]
    http: SourceHTTP | None = None

    def __init__(
        self, source: ConnectorSource, collection: str, runtime: Runtime | None = None
    ) -> None:
        self.source = source
        self.collection = collection
        self.runtime = runtime or Runtime()
        self.setup(source)

    def setup(self, source: ConnectorSource) -> None:
        """Check the source's settings (InvalidRequest naming the field the kind
        refuses) and keep what the kind reads of them."""

    @classmethod
    def from_settings(cls, source: ConnectorSource, collection: str, runtime: Runtime) -> Self:
        return cls(source, collection, runtime)

    def connect(self) -> SourceHTTP:
        """The client of the kind's service (its URL, credentials, timeout)."""
        raise NotImplementedError(f"{self.kind} calls no HTTP API")

    def client(self) -> SourceHTTP:
        if self.http is None:
            self.http = self.connect()
        return self.http

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None


def secret(source: ConnectorSource, key: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the secret `key` of `source` from its environment variable ('' when
    the source names none); ConfigurationError naming the variable when it is unset."""
    variable = source.secrets.get(key)
    if not variable:
        return ""
    value = (os.environ if environ is None else environ).get(variable, "")
    if not value:
        raise ConfigurationError(
            f"the secret {key!r} of this source is read from ${variable}, which is not "
            f"set: export {variable}=... where the sync runs"
        )
    return value


COMMON_SETTINGS = ("every",)
"""Settings every kind takes: `every`, how often the service syncs the source."""


def check_settings(
    source: ConnectorSource, settings: tuple[str, ...], secrets: tuple[str, ...]
) -> None:
    """InvalidRequest naming the first setting or secret the kind does not take, or an
    `every` that is not a duration."""
    known = settings + COMMON_SETTINGS
    unknown = sorted(source.settings.keys() - set(known))
    if unknown:
        rule = f"is not a setting of {source.kind}: {', '.join(known)}"
        raise InvalidRequest(f"settings.{unknown[0]}", rule)
    stray = sorted(source.secrets.keys() - set(secrets))
    if stray:
        rule = f"is not a secret of {source.kind}: {', '.join(secrets) or 'none'}"
        raise InvalidRequest(f"secrets.{stray[0]}", rule)
    if "every" in source.settings:
        source.every(0.0)


def json_cursor(cursor: str) -> dict[str, Any]:
    """A cursor a kind keeps as a JSON object (a state per repository, channel...);
    empty when there is none or it is of another form (the next run reads all once)."""
    if not cursor:
        return {}
    try:
        state = json.loads(cursor)
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
