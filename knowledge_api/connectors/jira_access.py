"""Jira's permissions as principals: an issue is for the group `jira:<PROJECT>`, whose
members are the accounts its project's permission scheme lets browse it (`GET
/rest/api/{3,2}/project/{key}/permissionscheme?expand=permissions`, the grants of
`BROWSE_PROJECTS`): accounts named, members of the groups named (`/group/member`),
and the users and groups of the project roles named (`/project/{key}/role/{id}`). A
project any logged-in user (`applicationRole`) or anyone may browse makes its issues
`public`. Grants to an issue's reporter, assignee or a user field are not followed
(those readers see what the project's other grants give them), and an issue under an
issue security level is closed (admin keys only): its level's readers are not mapped.

Reading a permission scheme takes an account with "Administer Jira" or "Administer
projects" on the project; a user's e-mail address is shown as their profile's privacy
settings allow (Cloud), so an account hiding it gets no access and is counted.
"""

from __future__ import annotations

from typing import Any, Protocol

from knowledge_api.connectors import access
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.models import ConnectorSource


class Jira(Protocol):
    """What the mapping reads through (connectors/jira.py)."""

    source: ConnectorSource
    cloud: bool
    api: str

    def client(self) -> SourceHTTP: ...


PREFIX = "jira:"
BROWSE = "BROWSE_PROJECTS"
EVERYONE = {"anyone", "applicationRole"}
MEMBERS_PAGE = 50


class ProjectAccess:
    """The grants of one run's projects, each asked once."""

    def __init__(self, connector: Jira) -> None:
        self.jira = connector
        self.cloud = connector.cloud
        self.grants: dict[str, list[dict[str, Any]] | None] = {}
        self.directory = access.Directory(self.email)

    def acl(self, project: str, fields: dict[str, Any]) -> tuple[str, ...]:
        """Who may read an issue of `project` with these fields."""
        if not access.follows(self.jira.source):
            return (access.PUBLIC,)
        if fields.get("security"):
            return ()
        holders = self.holders(project) or []
        if any(holder.get("type") in EVERYONE for holder in holders):
            return (access.PUBLIC,)
        return (access.principal(PREFIX + project),)

    def members(self, groups: set[str]) -> tuple[access.Members, list[str]]:
        found: access.Members = {}
        for group in sorted(g for g in groups if g.startswith(PREFIX)):
            project = group[len(PREFIX) :]
            holders = self.holders(project)
            if holders is None:
                continue  # the project is gone: so is its group
            found[group] = set()
            for holder in holders:
                found[group] |= self.holder_users(project, holder)
        return found, self.directory.problems("Jira")

    def holders(self, project: str) -> list[dict[str, Any]] | None:
        """The holders of BROWSE_PROJECTS in the project's scheme; None for a project
        gone."""
        if project not in self.grants:
            path = f"{self.jira.api}/project/{project}/permissionscheme"
            body = self.answer(path, {"expand": "permissions"}, "permission scheme")
            grants = body.get("permissions") if isinstance(body, dict) else None
            self.grants[project] = (
                None
                if body is None
                else [
                    grant.get("holder") or {}
                    for grant in grants or []
                    if isinstance(grant, dict) and grant.get("permission") == BROWSE
                ]
            )
        return self.grants[project]

    def holder_users(self, project: str, holder: dict[str, Any]) -> set[str]:
        kind, parameter = holder.get("type"), str(holder.get("parameter") or "")
        if kind == "user":
            return self.directory.users([(parameter, None)])
        if kind == "group":
            return self.group_users(str(holder.get("value") or ""), parameter)
        if kind == "projectRole":
            path = f"{self.jira.api}/project/{project}/role/{parameter}"
            role = self.answer(path, None, "project role") or {}
            users: set[str] = set()
            for actor in role.get("actors") or []:
                if actor.get("type") == "atlassian-group-role-actor":
                    group = actor.get("actorGroup") or {}
                    name = str(group.get("name") or actor.get("name") or "")
                    users |= self.group_users(str(group.get("groupId") or ""), name)
                elif actor.get("type") == "atlassian-user-role-actor":
                    user = actor.get("actorUser") or {}
                    account = user.get("accountId") if self.cloud else actor.get("name")
                    users |= self.directory.users([(str(account or ""), None)])
            return users
        return set()

    def group_users(self, group_id: str, name: str) -> set[str]:
        """The active members of a group (by its id on Cloud, else its name)."""
        params: dict[str, Any] = {"groupId": group_id} if group_id else {"groupname": name}
        users: set[str] = set()
        start = 0
        while True:
            page = {**params, "startAt": start, "maxResults": MEMBERS_PAGE}
            body = self.answer(f"{self.jira.api}/group/member", page, "group members") or {}
            values = [v for v in body.get("values") or [] if isinstance(v, dict)]
            users |= self.directory.users(
                (account_of(v, self.cloud), v.get("emailAddress"))
                for v in values
                if v.get("active", True)
            )
            start += len(values)
            if not values or body.get("isLast", True):
                return users

    def email(self, account: str) -> str:
        """An account's e-mail address ('' when its privacy settings hide it)."""
        params = {"accountId": account} if self.cloud else {"username": account}
        found = self.answer(f"{self.jira.api}/user", params, "user") or {}
        return access.user_id(found.get("emailAddress"))

    def answer(self, path: str, params: dict[str, Any] | None, what: str) -> Any:
        """The decoded answer; None for something gone (404)."""
        needs = f"reading the {what} takes an account with Administer Jira or Administer projects"
        return access.fetch(self.jira.client(), path, params, needs)


def account_of(user: dict[str, Any], cloud: bool) -> str:
    return str((user.get("accountId") if cloud else user.get("name")) or "")
