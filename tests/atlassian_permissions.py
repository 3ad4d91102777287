"""Who may read what in the fake Jira and Confluence (tests/atlassian_server.py): the
site's accounts and groups, Jira's permission schemes and project roles, Confluence's
space permissions and page restrictions, answered in the shapes Atlassian documents
(`/project/{key}/permissionscheme?expand=permissions`, `/project/{key}/role/{id}`,
`/group/member`, `/user`; `/space/{key}?expand=permissions`, a page's
`restrictions.read.restrictions.{user,group}`, `/rest/api/group/member`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

Answer = tuple[int, dict[str, str], Any]


@dataclass
class Site:
    """The accounts (account id -> e-mail address, None when hidden) and groups (name
    -> account ids) of the site, which both products share."""

    accounts: dict[str, str | None] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)

    def account(self, account: str, cloud: bool, email_key: str) -> dict[str, Any]:
        found: dict[str, Any] = {"displayName": account.title(), "active": True}
        found |= {"accountId": account, "accountType": "atlassian"} if cloud else {"name": account}
        if self.accounts.get(account):
            found[email_key] = self.accounts[account]
        return found

    def members(self, name: str, params: dict[str, str], cloud: bool, key: str) -> Answer:
        """A page of a group's members, as `/group/member` pages (`values`, `isLast`)."""
        if name not in self.groups:
            return 404, {}, {"errorMessages": [f"no group {name}"]}
        start, size = int(params.get("startAt", "0")), int(params.get("maxResults", "50"))
        everyone = self.groups[name]
        values = [self.account(a, cloud, key) for a in everyone[start : start + size]]
        last = start + size >= len(everyone)
        return 200, {}, {"startAt": start, "maxResults": size, "total": len(everyone),
                         "isLast": last, "values": values}  # fmt: skip


def group_id(name: str) -> str:
    return f"gid-{name}"


def group_name(params: dict[str, str]) -> str:
    return params.get("groupname") or params.get("groupId", "").removeprefix("gid-")


@dataclass
class JiraPermissions:
    """Each project's grants of BROWSE_PROJECTS (holders as the scheme lists them;
    any logged-in user unless the test says otherwise) and its roles' actors."""

    cloud: bool
    site: Site = field(default_factory=Site)
    browse: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    roles: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)

    def holders(self, project: str) -> list[dict[str, Any]]:
        return self.browse.get(project, [{"type": "applicationRole"}])

    def answer(
        self, path: str, params: dict[str, str], api: str, projects: set[str]
    ) -> Answer | None:
        found = re.fullmatch(rf"{api}/project/([A-Z]+)/(permissionscheme|role/(\d+))", path)
        if found is not None:
            project, _, role = found.groups()
            if project not in projects:
                return (
                    404,
                    {},
                    {"errorMessages": [f"No project could be found with key '{project}'."]},
                )
            if role is None:
                return 200, {}, self.scheme(project)
            return 200, {}, self.role(project, role)
        if path == f"{api}/group/member":
            return self.site.members(group_name(params), params, self.cloud, "emailAddress")
        if path == f"{api}/user":
            account = params.get("accountId") or params.get("username", "")
            if account not in self.site.accounts:
                return 404, {}, {"errorMessages": ["no user"]}
            return 200, {}, self.site.account(account, self.cloud, "emailAddress")
        return None

    def scheme(self, project: str) -> dict[str, Any]:
        grants = [
            {"id": 10000 + n, "holder": holder, "permission": "BROWSE_PROJECTS"}
            for n, holder in enumerate(self.holders(project))
        ]
        grants.append({"id": 1, "holder": {"type": "group", "parameter": "site-admins"},
                       "permission": "ADMINISTER_PROJECTS"})  # fmt: skip
        return {"id": 10000, "name": f"{project} scheme", "permissions": grants}

    def role(self, project: str, role: str) -> dict[str, Any]:
        actors = []
        for n, actor in enumerate(self.roles.get((project, role), [])):
            if "group" in actor:
                name = actor["group"]
                actors.append({"id": n, "type": "atlassian-group-role-actor", "name": name,
                               "actorGroup": {"name": name, "displayName": name,
                                              "groupId": group_id(name)}})  # fmt: skip
            else:
                user = actor["user"]
                shape = {"actorUser": {"accountId": user}} if self.cloud else {"name": user}
                actors.append({"id": n, "type": "atlassian-user-role-actor",
                               "displayName": user.title(), **shape})  # fmt: skip
        return {"id": int(role), "name": "Developers", "actors": actors}


@dataclass
class ConfluencePermissions:
    """Each space's `read` grants (users, groups, anonymous access; the group
    `confluence-users` unless the test says otherwise) and each page's view
    restrictions (users and groups)."""

    cloud: bool
    site: Site = field(default_factory=Site)
    readers: dict[str, dict[str, Any]] = field(default_factory=dict)
    restricted: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Page id -> {"user": [...], "group": [...]}: who may view it."""

    def subjects(self, users: list[str], groups: list[str]) -> dict[str, Any]:
        return {
            "user": {"results": [self.site.account(u, self.cloud, "email") | {"type": "known"}
                                 for u in users], "size": len(users)},
            "group": {"results": [{"type": "group", "name": g, "id": group_id(g)}
                                  for g in groups], "size": len(groups)},
        }  # fmt: skip

    def restrictions(self, page_id: str) -> dict[str, Any]:
        """A page's `restrictions` as the content API expands them."""
        named = self.restricted.get(page_id, {})
        subjects = self.subjects(named.get("user", []), named.get("group", []))
        return {
            "read": {"operation": "read", "restrictions": subjects},
            "update": {"operation": "update", "restrictions": self.subjects([], [])},
        }

    def space(self, key: str) -> dict[str, Any]:
        given = self.readers.get(key, {"groups": ["confluence-users"]})
        grants = [
            {"id": 1, "subjects": self.subjects(given.get("users", []), given.get("groups", [])),
             "operation": {"operation": "read", "targetType": "space"},
             "anonymousAccess": False, "unlicensedAccess": False},
            {"id": 2, "subjects": self.subjects([], ["site-admins"]),
             "operation": {"operation": "administer", "targetType": "space"},
             "anonymousAccess": False, "unlicensedAccess": False},
        ]  # fmt: skip
        if given.get("anonymous"):
            grants.append({"id": 3, "operation": {"operation": "read", "targetType": "space"},
                           "anonymousAccess": True, "unlicensedAccess": False})  # fmt: skip
        return {"id": 1, "key": key, "name": key, "type": "global", "permissions": grants}

    def answer(self, path: str, params: dict[str, str], spaces: set[str]) -> Answer | None:
        found = re.fullmatch(r"/rest/api/space/(\w+)", path)
        if found is not None:
            if found.group(1) not in spaces:
                return 404, {}, {"statusCode": 404, "message": "No space"}
            return 200, {}, self.space(found.group(1))
        found = re.fullmatch(r"/rest/api/group/(?:([^/]+)/)?member", path)
        if found is not None:
            name = found.group(1) or group_name(params)
            status, headers, body = self.site.members(name, {}, self.cloud, "email")
            if status != 200:
                return status, headers, body
            results = [v | {"type": "known"} for v in body["values"]]
            return 200, {}, {"results": results, "start": 0, "limit": 200, "size": len(results),
                             "_links": {}}  # fmt: skip
        if path == "/rest/api/user":
            account = params.get("accountId", "")
            if account not in self.site.accounts:
                return 404, {}, {"statusCode": 404, "message": "No user"}
            return 200, {}, self.site.account(account, self.cloud, "email") | {"type": "known"}
        return None
