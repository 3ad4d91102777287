"""Confluence's permissions as principals. A page is readable by those who may view
its space and pass the view restrictions of the page and of every ancestor that has
some (Confluence's restrictions are inherited: a child of a restricted page is no more
open than it). So:

- a page with no restriction on itself or an ancestor is for the group
  `confluence:<SPACE>`: the space's readers (`GET /rest/api/space/{key}?expand=
  permissions`, its `read` grants to users and groups); `public` when the space lets
  anonymous users read it;
- a page under restrictions is for the group `confluence:<SPACE>:<ID>`, ID the deepest
  restricted page of its line (itself or an ancestor): the space's readers who are in
  the `read` restrictions (`restrictions.read.restrictions.{user,group}`) of every
  restricted page of the line.

Groups are expanded to their members (`/rest/api/group/member`); users are known by
their e-mail addresses on Cloud (as their profiles' privacy allows) and by their user
names on Server and Data Center, whose REST API shows no address.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from knowledge_api.connectors import access
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.errors import ConnectorFailed
from knowledge_api.models import ConnectorSource


class Wiki(Protocol):
    """What the mapping reads through (connectors/confluence.py)."""

    source: ConnectorSource
    cloud: bool

    def client(self) -> SourceHTTP: ...

    def listing(
        self, path: str, params: dict[str, Any], key: str = "id"
    ) -> Iterator[dict[str, Any]]: ...


PREFIX = "confluence:"
READ = "restrictions.read.restrictions.user,restrictions.read.restrictions.group"
EXPAND = f"{READ},ancestors.{READ.replace(',', ',ancestors.')}"
"""What a page is read with for its line's restrictions (in the search's expansion)."""
LINE = f"space,ancestors,{EXPAND}"
NEEDS = "reading who may view a space takes an account that may administer it"


class SpaceAccess:
    """The readers of one run's spaces and restricted pages, each asked once."""

    def __init__(self, connector: Wiki) -> None:
        self.wiki = connector
        self.spaces: dict[str, tuple[bool, set[str]]] = {}
        self.groups: dict[str, set[str]] = {}
        lookup = self.email if connector.cloud else str.lower
        self.directory = access.Directory(lookup)

    def acl(self, page: dict[str, Any]) -> tuple[str, ...]:
        if not access.follows(self.wiki.source):
            return (access.PUBLIC,)
        space = str((page.get("space") or {}).get("key") or "")
        line = restricted(page)
        if line:
            return (access.principal(f"{PREFIX}{space}:{line[-1][0]}"),)
        if self.space(space)[0]:
            return (access.PUBLIC,)
        return (access.principal(PREFIX + space),)

    def members(self, groups: set[str]) -> tuple[access.Members, list[str]]:
        found: access.Members = {}
        for group in sorted(g for g in groups if g.startswith(PREFIX)):
            space, _, page_id = group[len(PREFIX) :].partition(":")
            readers = self.page_readers(space, page_id) if page_id else self.space(space)[1]
            if readers is not None:  # None: the page is gone, and so is its group
                found[group] = readers
        return found, self.directory.problems("Confluence")

    def space(self, key: str) -> tuple[bool, set[str]]:
        """Whether anonymous users may read the space, and its readers."""
        if key not in self.spaces:
            body = self.answer(f"/rest/api/space/{key}", {"expand": "permissions"}) or {}
            anonymous, readers = False, set()
            for grant in body.get("permissions") or []:
                if (grant.get("operation") or {}).get("operation") != "read":
                    continue
                anonymous = anonymous or bool(grant.get("anonymousAccess"))
                readers |= self.subjects(grant.get("subjects") or {})
            self.spaces[key] = (anonymous, readers)
        return self.spaces[key]

    def page_readers(self, space: str, page_id: str) -> set[str] | None:
        """The space's readers who pass the restrictions of the page and its ancestors
        (None for a page gone)."""
        page = self.answer(f"/rest/api/content/{page_id}", {"expand": LINE})
        if page is None:
            return None
        anonymous, readers = self.space(space)
        allowed: set[str] | None = None if anonymous else set(readers)
        for _, subjects in restricted(page):
            passing = self.subjects(subjects)
            allowed = passing if allowed is None else allowed & passing
        return allowed or set()

    def subjects(self, subjects: dict[str, Any]) -> set[str]:
        """The users named and the members of the groups named."""
        users = self.directory.users(
            (account_of(u), u.get("email")) for u in results(subjects, "user")
        )
        for group in results(subjects, "group"):
            users |= self.group_members(group)
        return users

    def group_members(self, group: dict[str, Any]) -> set[str]:
        name, group_id = str(group.get("name") or ""), str(group.get("id") or "")
        if name not in self.groups:
            if self.wiki.cloud and group_id:
                path, params = "/rest/api/group/member", {"groupId": group_id, "limit": 200}
            else:
                path, params = f"/rest/api/group/{name}/member", {"limit": 200}
            try:
                members = list(self.wiki.listing(path, params, "type"))
            except ConnectorFailed as e:
                if e.details.get("status") != 404:
                    raise
                members = []  # a group deleted since it was named: nobody in it
            self.groups[name] = self.directory.users(
                (account_of(u), u.get("email")) for u in members
            )
        return self.groups[name]

    def email(self, account: str) -> str:
        found = self.answer("/rest/api/user", {"accountId": account}) or {}
        return access.user_id(found.get("email"))

    def answer(self, path: str, params: dict[str, Any]) -> Any:
        return access.fetch(self.wiki.client(), path, params, NEEDS)


def restricted(page: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The pages of a page's line (its ancestors, root first, then itself) that carry
    view restrictions: (id, the restrictions' subjects)."""
    line = [a for a in page.get("ancestors") or [] if isinstance(a, dict)] + [page]
    found = []
    for each in line:
        subjects = (((each.get("restrictions") or {}).get("read") or {}).get("restrictions")) or {}
        if results(subjects, "user") or results(subjects, "group"):
            found.append((str(each.get("id")), subjects))
    return found


def results(subjects: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    listed = (subjects.get(kind) or {}).get("results") or []
    return [item for item in listed if isinstance(item, dict)]


def account_of(user: dict[str, Any]) -> str:
    return str(user.get("accountId") or user.get("username") or "")
