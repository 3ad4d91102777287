"""Following a service's own permissions: what the kinds that map them share.

A kind that follows its service's permissions gives each document an access list of
principals the service's permissions make, source-qualified (`group:jira:OPS`,
`group:confluence:ENG`, `group:slack:C0123`, `group:github:acme/api`), or `public` for
what the service shows to everyone in the organisation (a public Slack channel, a public
repository). It also answers `members(groups)`: the user ids in each of those groups as
the service says now, leaving out a group whose object is gone (a channel the bot left,
a repository deleted): the run then drops it. The run (usecases/memberships.py) gives
each user the groups a source grants and takes back those it no longer grants, so a
reader named by `X-Knowledge-User` reads what the service lets them read.

A user's id is the e-mail address the service shows for the account, lower-cased; an
account whose address the service does not show (its privacy settings, a bot) gets no
access and is counted in the run's problems. `--set permissions=off` turns the mapping
off: the documents then take the source's access list (closed without one). A source
given its own access list (`--acl`) keeps it: the service's permissions then change no
document's list, and the groups are still filled for other sources to use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from knowledge_api.connectors.base import Window
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.errors import ConnectorFailed, InvalidRequest
from knowledge_api.models import ConnectorSource

SETTING = "permissions"
CHOICES = ("on", "off")
GROUP = "group:"
PUBLIC = "public"

Members = dict[str, set[str]]
"""Group name (without `group:`) -> the user ids in it."""


def follows(source: ConnectorSource) -> bool:
    """Whether the source maps its service's permissions (`permissions`, on by default)."""
    return source.settings.get(SETTING, "on") == "on"


def check(source: ConnectorSource) -> None:
    if source.settings.get(SETTING, "on") not in CHOICES:
        raise InvalidRequest(f"settings.{SETTING}", "must be on or off")


def maps(connector: object, source: ConnectorSource) -> bool:
    """Whether the connector's documents carry its service's permissions as their
    access lists: its kind maps them (it has `members`) and the source follows them."""
    return hasattr(connector, "members") and follows(source)


def read_members(
    connector: object, source: ConnectorSource, window: Window, named: set[str]
) -> None:
    """For a kind that maps its service's permissions (it has `members`): who is in each
    group `named` (by the window's documents) or the window's scopes name or the source
    granted before, on the window; a source whose mapping is off takes back what it
    granted."""
    members = getattr(connector, "members", None)
    if members is None:
        return
    if not follows(source):
        window.members, window.scopes = {}, None
        return
    scoped = groups_named((window.scopes or {}).values(), "")
    window.members, problems = members(named | scoped | source.members.keys())
    window.problems.extend(problems)


def principal(group: str) -> str:
    return GROUP + group


def groups_named(acls: Iterable[Iterable[str]], prefix: str) -> set[str]:
    """The groups (without `group:`) of `prefix` (`jira:`) that these access lists name."""
    return {p[len(GROUP) :] for acl in acls for p in acl if p.startswith(GROUP + prefix)}


def user_id(email: Any) -> str:
    """The id of an account as the service's e-mail address makes it ('' for none)."""
    text = str(email or "").strip().lower()
    return text if "@" in text and " " not in text and "," not in text else ""


@contextmanager
def needing(permission: str) -> Iterator[None]:
    """A call of the mapping the service refuses (403) stops the run saying what it
    takes: `permission`, or turning the mapping off."""
    try:
        yield
    except ConnectorFailed as e:
        if e.details.get("status") != 403:
            raise
        said = f"{e.message}; {permission} (or --set permissions=off)"
        raise ConnectorFailed(said, **e.details) from e


def fetch(http: SourceHTTP, path: str, params: dict[str, Any] | None, permission: str) -> Any:
    """The decoded answer of a call of the mapping; None for something gone (404)."""
    with needing(permission):
        response = http.request("GET", path, answers=(404,), params=params)
    return None if response.status_code == 404 else response.json()


class Directory:
    """Who an account is, asked once per run: account id -> user id ('' when the
    service shows no address; None for no reader, such as a bot); the accounts shown
    without an address are counted for the run's problems."""

    def __init__(self, lookup: Callable[[str], str | None]) -> None:
        self.lookup = lookup
        self.known: dict[str, str | None] = {}

    def user(self, account: str, email: Any = None) -> str | None:
        if account not in self.known:
            self.known[account] = user_id(email) or self.lookup(account)
        return self.known[account]

    def users(self, accounts: Iterable[tuple[str, Any]]) -> set[str]:
        found = {self.user(account, email) for account, email in accounts if account}
        return {user for user in found if user}

    def problems(self, kind: str) -> list[str]:
        """The run's line for accounts given no access, when there are any."""
        hidden = sorted(account for account, user in self.known.items() if user == "")
        if not hidden:
            return []
        shown = ", ".join(hidden[:5]) + (" ..." if len(hidden) > 5 else "")
        return [
            f"{len(hidden)} {kind} account(s) show no e-mail address and were given no "
            f"access: {shown}"
        ]
