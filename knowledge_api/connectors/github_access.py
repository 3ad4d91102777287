"""GitHub's permissions as principals: the issues and pull requests of a public
repository are `public`; those of a private or internal repository are for the group
`github:<OWNER/NAME>`, whose members are the repository's collaborators (`GET
/repos/{owner}/{repo}/collaborators`, direct, through teams and as organisation owners),
each known by the public e-mail address of the account (`GET /users/{login}`), or by
its login with `--set identity=login` (for a chat UI that names GitHub users so).

Listing collaborators takes a token that may push to the repository (classic: `repo`;
fine-grained: Metadata read and, for organisation repositories, Members read). An
internal repository's readers beyond its collaborators (every member of the
enterprise) are not listed: they do not read it here, which errs on the closed side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from knowledge_api.connectors import access
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import ConnectorSource


class GitHub(Protocol):
    """What the mapping reads through (connectors/github.py)."""

    source: ConnectorSource

    def client(self) -> SourceHTTP: ...

    def listing(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]: ...


PREFIX = "github:"
IDENTITIES = ("email", "login")
SETTINGS = (access.SETTING, "identity")


def check(source: ConnectorSource) -> None:
    access.check(source)
    if source.settings.get("identity", "email") not in IDENTITIES:
        raise InvalidRequest("settings.identity", "must be email or login")


def acl(connector: GitHub, repo: str) -> tuple[str, ...]:
    """Who may read a repository's items: everyone for a public one, else its group."""
    if not access.follows(connector.source):
        return (access.PUBLIC,)
    found = connector.client().get_json(f"/repos/{repo}")
    found = found if isinstance(found, dict) else {}
    # `visibility` where the server says it (an older Enterprise Server says `private`)
    visibility = found.get("visibility") or ("private" if found.get("private", True) else "public")
    public = visibility == "public"
    return (access.PUBLIC,) if public else (access.principal(PREFIX + repo),)


def members(connector: GitHub, groups: set[str]) -> tuple[access.Members, list[str]]:
    """The collaborators of each repository's group among `groups` (a repository gone
    is left out: its group lapses)."""
    by_login = connector.source.settings.get("identity", "email") == "login"
    directory = access.Directory(
        lambda login: login.lower() if by_login else email(connector, login)
    )
    found: access.Members = {}
    for group in sorted(g for g in groups if g.startswith(PREFIX)):
        repo = group[len(PREFIX) :]
        gone = connector.client().request("GET", f"/repos/{repo}", answers=(404,))
        if gone.status_code == 404:
            continue  # the repository is gone: so is its group
        with access.needing(f"listing the collaborators of {repo} takes a token that may push"):
            people = list(connector.listing(f"/repos/{repo}/collaborators", {"affiliation": "all"}))
        found[group] = directory.users((login(person), None) for person in people)
    return found, directory.problems("GitHub")


def login(person: dict[str, Any]) -> str:
    return str(person.get("login") or "") if person.get("type", "User") == "User" else ""


def email(connector: GitHub, name: str) -> str:
    """The public e-mail address of an account ('' when it shows none)."""
    found = connector.client().get_json(f"/users/{name}")
    return access.user_id(found.get("email")) if isinstance(found, dict) else ""
