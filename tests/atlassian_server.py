"""Jira and Confluence for the connectors' tests: a real HTTP server on a loopback port
(a thread), answering the REST calls the connectors make with payloads shaped as
Atlassian documents them, from state the test changes between syncs.

Jira Cloud (`cloud=True`) answers `/rest/api/3/search/jql` paged by `nextPageToken`,
rich text in Atlassian Document Format, and 410 on the retired `/rest/api/{2,3}/search`;
Jira Server answers `/rest/api/2/search` paged by `startAt`, wiki markup. A search
reads the JQL the connector writes (`project = X`, `project in (...)`, `updated >=` and
`created >=` dates in the account's time zone, `ORDER BY key`) and returns the first
comments of an issue only. `lagging` keeps an edit out of searches (an index that has
not caught up); `faults` answers the next matching requests with an error.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from tests import loopback
from tests.atlassian_permissions import ConfluencePermissions, JiraPermissions

EMAIL, TOKEN = "ada@example.com", "api-token-s3cret"
PAT = "pat-s3cret-0123456789"
ZONE = "America/New_York"
SEARCH_COMMENTS = 2
"""Comments a search returns of an issue (Jira returns the first ones only)."""


@dataclass
class Comment:
    author: str
    created: datetime
    body: str


@dataclass
class Issue:
    key: str
    summary: str
    description: str
    created: datetime
    updated: datetime
    issuetype: str = "Bug"
    status: str = "Open"
    priority: str = "High"
    labels: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    assignee: str | None = "Grace Hopper"
    reporter: str = "Ada Lovelace"
    resolution: str | None = None
    parent: str | None = None
    security: str | None = None
    """The issue's security level, when it has one."""
    comments: list[Comment] = field(default_factory=list)
    indexed: datetime | None = None
    """The `updated` the search index holds, when it lags behind (None: caught up)."""


@dataclass
class Fault:
    path: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1
    when: Callable[[dict[str, str]], bool] = lambda params: True


@dataclass
class Call:
    at: float
    method: str
    path: str
    params: dict[str, str]
    status: int = 200


class Atlassian:
    """The state both products answer from, and what was asked of them."""

    def __init__(self, cloud: bool = True) -> None:
        self.cloud = cloud
        self.issues: dict[str, Issue] = {}
        self.faults: list[Fault] = []
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.url = ""
        self.page_cap = 100
        self.empty_projects: set[str] = set()
        """Projects with no issue (any other key the JQL names is refused, as Jira does)."""
        self.frozen = False
        """The issues no longer change (a benchmark's): each JQL's matches are kept."""
        self.matches: dict[str, list[Issue]] = {}
        """The most issues a search page holds, whatever it asked (Jira may answer fewer)."""
        self.confluence: Any = None
        """A Confluence's state (tests/confluence fake), when it answers too."""
        self.permissions = JiraPermissions(cloud)
        """Who may browse each project (tests/atlassian_permissions.py)."""

    # -- the test's side ------------------------------------------------------------

    def fail(self, path: str, status: int, times: int = 1, **kwargs: Any) -> None:
        self.faults.append(Fault(path, status, times=times, **kwargs))

    def projects(self) -> set[str]:
        return {key.rpartition("-")[0] for key in self.issues} | self.empty_projects

    def searches(self) -> list[Call]:
        return [c for c in self.calls if "/search" in c.path]

    # -- answering ------------------------------------------------------------------

    def authorized(self, header: str) -> bool:
        if header == f"Bearer {PAT}":
            return True
        if header.startswith("Basic "):
            return base64.b64decode(header[6:]).decode() == f"{EMAIL}:{TOKEN}"
        return False

    def answer(
        self, method: str, path: str, params: dict[str, str], header: str, body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        for fault in self.faults:
            if fault.times > 0 and path.startswith(fault.path) and fault.when(params):
                fault.times -= 1
                return fault.status, fault.headers, {"errorMessages": ["injected"]}
        if not self.authorized(header):
            return (
                401,
                {"WWW-Authenticate": 'Basic realm="atlassian"'},
                {"message": "Client must be authenticated"},
            )
        if self.confluence is not None and self.confluence.handles(path):
            result: tuple[int, dict[str, str], Any] = self.confluence.answer(path, params)
            return result
        api = "/rest/api/3" if self.cloud else "/rest/api/2"
        if path == f"{api}/myself":
            return (
                200,
                {},
                {
                    "accountId": "5b10a2844c20165700ede21g",
                    "emailAddress": EMAIL,
                    "displayName": "Ada Lovelace",
                    "timeZone": ZONE,
                },
            )
        if self.cloud and path in ("/rest/api/3/search", "/rest/api/2/search"):
            return (
                410,
                {},
                {
                    "errorMessages": [
                        "The requested API has been removed. Please migrate to the "
                        "/rest/api/3/search/jql API."
                    ]
                },
            )
        if path == (f"{api}/search/jql" if self.cloud else f"{api}/search"):
            return self.search(params)
        found = re.fullmatch(rf"{api}/issue/([A-Z]+-\d+)/comment", path)
        if found:
            return self.comment_page(found.group(1), params)
        granted = self.permissions.answer(path, params, api, self.projects())
        if granted is not None:
            return granted
        return 404, {}, {"errorMessages": [f"no {path}"]}

    def search(self, params: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        try:
            match = jql_filter(params.get("jql", ""), self.cloud, self.projects())
        except ValueError as e:
            return 400, {}, {"errorMessages": [str(e)], "warningMessages": []}
        fields = set(filter(None, params.get("fields", "").split(",")))
        size = min(int(params.get("maxResults", "50")), self.page_cap)
        with self.lock:
            found = self.matches.get(params.get("jql", "")) if self.frozen else None
            if found is None:
                found = sorted((i for i in self.issues.values() if match(i)), key=issue_order)
            if self.frozen:
                self.matches[params.get("jql", "")] = found
        if self.cloud:
            token = params.get("nextPageToken")
            start = int(base64.b64decode(token).decode()) if token else 0
        else:
            start = int(params.get("startAt", "0"))
        page = found[start : start + size]
        issues = [self.issue(i, fields) for i in page]
        if not self.cloud:
            return (
                200,
                {},
                {
                    "expand": "schema,names",
                    "startAt": start,
                    "maxResults": size,
                    "total": len(found),
                    "issues": issues,
                },
            )
        body: dict[str, Any] = {"issues": issues, "isLast": start + size >= len(found)}
        if not body["isLast"]:
            body["nextPageToken"] = base64.b64encode(str(start + size).encode()).decode()
        return 200, {}, body

    def issue(self, issue: Issue, fields: set[str]) -> dict[str, Any]:
        number = issue.key.rpartition("-")[2]
        everything: dict[str, Any] = {
            "summary": issue.summary,
            "description": self.rich(issue.description),
            "project": {"id": "10000", "key": issue.key.rpartition("-")[0], "name": "Project"},
            "issuetype": {"id": "1", "name": issue.issuetype, "subtask": False},
            "status": {"id": "3", "name": issue.status, "statusCategory": {"key": "indeterminate"}},
            "priority": {"id": "2", "name": issue.priority},
            "labels": issue.labels,
            "components": [{"id": str(n), "name": c} for n, c in enumerate(issue.components)],
            "assignee": self.user(issue.assignee) if issue.assignee else None,
            "reporter": self.user(issue.reporter),
            "resolution": {"id": "1", "name": issue.resolution} if issue.resolution else None,
            "created": jira_date(issue.created),
            "updated": jira_date(issue.updated),
            "comment": {
                "comments": [self.comment(c, n) for n, c in enumerate(issue.comments)][
                    :SEARCH_COMMENTS
                ],
                "maxResults": SEARCH_COMMENTS,
                "total": len(issue.comments),
                "startAt": 0,
            },
        }
        if issue.security:
            everything["security"] = {"id": "10001", "name": issue.security}
        if issue.parent:
            everything["parent"] = {"id": "1", "key": issue.parent, "fields": {"summary": "Parent"}}
        return {
            "expand": "operations,versionedRepresentations,editmeta,changelog,renderedFields",
            "id": str(10000 + int(number)),
            "self": f"{self.url}/rest/api/3/issue/{10000 + int(number)}",
            "key": issue.key,
            "fields": {k: v for k, v in everything.items() if k in fields},
        }

    def comment_page(self, key: str, params: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        issue = self.issues.get(key)
        if issue is None:
            return 404, {}, {"errorMessages": ["Issue does not exist"]}
        start, size = int(params.get("startAt", "0")), min(int(params.get("maxResults", "50")), 5)
        comments = [self.comment(c, n) for n, c in enumerate(issue.comments)]
        return (
            200,
            {},
            {
                "startAt": start,
                "maxResults": size,
                "total": len(comments),
                "comments": comments[start : start + size],
            },
        )

    def comment(self, comment: Comment, number: int) -> dict[str, Any]:
        return {
            "id": str(10000 + number),
            "author": self.user(comment.author),
            "body": self.rich(comment.body),
            "created": jira_date(comment.created),
            "updated": jira_date(comment.created),
        }

    def user(self, name: str) -> dict[str, Any]:
        return {"accountId": f"id-{name.split()[0].lower()}", "displayName": name, "active": True}

    def rich(self, text: str) -> Any:
        """Cloud: the text as an ADF document (a paragraph per blank-line block; a
        block of `- ` lines a bullet list); Server: the wiki markup as it is."""
        if not self.cloud:
            return text
        content: list[dict[str, Any]] = []
        for block in text.split("\n\n"):
            lines = block.split("\n")
            if all(line.startswith("- ") for line in lines):
                content.append(
                    {
                        "type": "bulletList",
                        "content": [
                            {
                                "type": "listItem",
                                "content": [
                                    {
                                        "type": "paragraph",
                                        "content": [{"type": "text", "text": line[2:]}],
                                    }
                                ],
                            }
                            for line in lines
                        ],
                    }
                )
            else:
                content.append({"type": "paragraph", "content": [{"type": "text", "text": block}]})
        return {"type": "doc", "version": 1, "content": content}


def issue_order(issue: Issue) -> tuple[str, int]:
    project, _, number = issue.key.rpartition("-")
    return project, int(number)


def jira_date(moment: datetime) -> str:
    """As Jira writes a date: `2026-11-02T10:15:30.123+0000`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")


_CLAUSE = re.compile(
    r"^(?:\((?P<inner>.*)\)|project\s*=\s*(?P<project>\w+)|project\s+in\s*\((?P<projects>[^)]*)\)"
    r'|(?P<field>updated|created)\s*>=\s*"(?P<date>[^"]+)")$',
    re.IGNORECASE,
)


def jql_filter(jql: str, cloud: bool, projects: set[str]) -> Callable[[Issue], bool]:
    """The issues a JQL of the connector's finds; ValueError (Jira's 400) for JQL this
    fake does not read, a project that does not exist, and on Cloud an unbounded one."""
    text = re.sub(r"\s+ORDER\s+BY\s+key\s+ASC\s*$", "", jql.strip(), flags=re.IGNORECASE)
    if not text:
        if cloud:
            raise ValueError(
                "Unbounded JQL queries are not allowed here. Please add a "
                "search restriction to your query."
            )
        return lambda issue: True
    tests: list[Callable[[Issue], bool]] = []
    for clause in split_and(text):
        found = _CLAUSE.match(clause.strip())
        if found is None:
            raise ValueError(f"Error in the JQL Query: cannot read {clause!r}")
        if found.group("inner") is not None:
            tests.append(jql_filter(found.group("inner"), False, projects))
        elif found.group("project"):
            project = found.group("project")
            if project not in projects:
                raise ValueError(f"The value '{project}' does not exist for the field 'project'.")
            tests.append(lambda i, p=project: i.key.rpartition("-")[0] == p)
        elif found.group("projects") is not None:
            keys = {p.strip() for p in found.group("projects").split(",")}
            for key in sorted(keys - projects):
                raise ValueError(f"The value '{key}' does not exist for the field 'project'.")
            tests.append(lambda i, k=keys: i.key.rpartition("-")[0] in k)
        else:
            moment = datetime.strptime(
                found.group("date"),
                "%Y-%m-%d" if len(found.group("date")) == 10 else "%Y-%m-%d %H:%M",
            ).replace(tzinfo=ZoneInfo(ZONE))
            if found.group("field").lower() == "created":
                tests.append(lambda i, m=moment: i.created >= m)
            else:
                tests.append(lambda i, m=moment: (i.indexed or i.updated) >= m)
    return lambda issue: all(test(issue) for test in tests)


def split_and(text: str) -> list[str]:
    """`a AND (b AND c) AND d` -> a, (b AND c), d."""
    parts, depth, current = [], 0, ""
    for token in re.split(r"(\(|\)|\s+AND\s+)", text, flags=re.IGNORECASE):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if depth == 0 and token.strip().upper() == "AND":
            parts.append(current)
            current = ""
        else:
            current += token
    parts.append(current)
    return [p for p in parts if p.strip()]


class Handler(loopback.Handler):
    state: Atlassian

    def do_GET(self) -> None:
        self.handle_call("GET")

    def do_POST(self) -> None:
        self.handle_call("POST")

    def handle_call(self, method: str) -> None:
        import time

        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        state = self.state
        call = Call(time.monotonic(), method, url.path, params)
        status, headers, payload = state.answer(
            method, url.path, params, self.headers.get("Authorization", ""), body
        )
        call.status = status
        with state.lock:
            state.calls.append(call)
        if isinstance(payload, bytes):
            data, kind = payload, headers.pop("Content-Type", "application/octet-stream")
        else:
            data, kind = json.dumps(payload).encode(), "application/json;charset=UTF-8"
        self.respond(status, data, {"Content-Type": kind} | headers)


@contextmanager
def serving(state: Atlassian) -> Iterator[Atlassian]:
    with loopback.serving(type("Bound", (Handler,), {"state": state})) as url:
        state.url = url
        yield state


# -- Confluence -------------------------------------------------------------------------

SITE_ZONE = "Asia/Kolkata"
"""The site's time zone, in which CQL reads a date (UTC+5:30: a window written in
another zone's clock is off by hours)."""


@dataclass
class Attachment:
    name: str
    media_type: str
    data: bytes
    updated: datetime


@dataclass
class Page:
    id: str
    space: str
    title: str
    body: str
    created: datetime
    updated: datetime
    parent: str | None = None
    labels: list[str] = field(default_factory=list)
    author: str = "Ada Lovelace"
    version: int = 1
    comments: list[Comment] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)


SPACE_NAMES = {"ENG": "Engineering", "OPS": "Operations", "HR": "People"}


class Confluence:
    """Confluence's REST API (`/rest/api/content/...`) under its context path (`/wiki`
    on Cloud), paged by `start` and `limit` with a `next` link."""

    def __init__(self, context: str = "/wiki") -> None:
        self.context = context
        self.pages: dict[str, Page] = {}
        self.url = ""
        self.permissions = ConfluencePermissions(cloud=context == "/wiki")
        """Who may read each space and page (tests/atlassian_permissions.py)."""

    def handles(self, path: str) -> bool:
        return any(
            path.startswith(f"{self.context}{part}")
            for part in ("/rest/api/content", "/download/", "/rest/api/space/",
                         "/rest/api/group/", "/rest/api/user")
        )  # fmt: skip

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        path = path[len(self.context) :]
        spaces = {page.space for page in self.pages.values()}
        granted = self.permissions.answer(path, params, spaces)
        if granted is not None:
            return granted
        if path == "/rest/api/content/search":
            return self.search(params)
        found = re.fullmatch(r"/download/attachments/(\d+)/([^/]+)", path)
        if found:
            page = self.pages.get(found.group(1))
            name = urllib.parse.unquote(found.group(2))
            for attachment in page.attachments if page else []:
                if attachment.name == name:
                    return 200, {"Content-Type": attachment.media_type}, attachment.data
            return 404, {}, {"message": "no such attachment"}
        found = re.fullmatch(r"/rest/api/content/(\d+)(?:/child/(comment|attachment))?", path)
        if not found or found.group(1) not in self.pages:
            return 404, {}, {"statusCode": 404, "message": f"No content found: {path}"}
        page = self.pages[found.group(1)]
        expand = set(params.get("expand", "").split(","))
        if found.group(2) == "comment":
            items = [self.comment(page, n, c) for n, c in enumerate(page.comments)]
        elif found.group(2) == "attachment":
            items = [self.attachment(page, a) for a in page.attachments]
        else:
            return 200, {}, self.page(page, expand)
        return 200, {}, self.paged(items, path, params)

    def paged(self, items: list[Any], path: str, params: dict[str, str]) -> dict[str, Any]:
        start, limit = int(params.get("start", "0")), min(int(params.get("limit", "25")), 2)
        body: dict[str, Any] = {
            "results": items[start : start + limit],
            "start": start,
            "limit": limit,
            "size": len(items[start : start + limit]),
            "_links": {"base": self.url + self.context, "context": self.context},
        }
        if start + limit < len(items):
            query = urllib.parse.urlencode({**params, "start": start + limit, "limit": limit})
            body["_links"]["next"] = f"{path}?{query}"
        return body

    def search(self, params: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        try:
            match = cql_filter(params.get("cql", ""))
        except ValueError as e:
            return 400, {}, {"statusCode": 400, "message": f"Could not parse cql: {e}"}
        expand = set(params.get("expand", "").split(","))
        items: list[tuple[str, Any, datetime, Page]] = []
        for page in sorted(self.pages.values(), key=lambda p: int(p.id)):
            items.append(("page", self.page(page, expand), page.updated, page))
            for n, comment in enumerate(page.comments):
                items.append(("comment", self.comment(page, n, comment), comment.created, page))
            for attachment in page.attachments:
                items.append(
                    ("attachment", self.attachment(page, attachment), attachment.updated, page)
                )
        found = [json for kind, json, modified, page in items if match(kind, modified, page)]
        return 200, {}, self.paged(found, "/rest/api/content/search", params)

    def page(self, page: Page, expand: set[str]) -> dict[str, Any]:
        everything: dict[str, Any] = {
            "space": {
                "id": 1,
                "key": page.space,
                "name": SPACE_NAMES[page.space],
                "type": "global",
            },
            "history": {
                "latest": True,
                "createdBy": user(page.author),
                "createdDate": confluence_date(page.created),
            },
            "version": {
                "by": user(page.author),
                "when": confluence_date(page.updated),
                "number": page.version,
                "minorEdit": False,
            },
            "ancestors": [
                {"id": a.id, "type": "page", "status": "current", "title": a.title}
                | (
                    {"restrictions": self.permissions.restrictions(a.id)}
                    if "ancestors.restrictions.read.restrictions.user" in expand
                    else {}
                )
                for a in self.ancestors(page)
            ],
            "restrictions": self.permissions.restrictions(page.id),
            "body": {"storage": {"value": page.body, "representation": "storage"}},
            "metadata": {
                "labels": {
                    "results": [
                        {"prefix": "global", "name": label, "id": str(n)}
                        for n, label in enumerate(page.labels)
                    ],
                    "start": 0,
                    "limit": 200,
                    "size": len(page.labels),
                }
            },
        }
        shown = {
            key: value
            for key, value in everything.items()
            if any(e == key or e.startswith(key + ".") for e in expand)
        }
        return {
            "id": page.id,
            "type": "page",
            "status": "current",
            "title": page.title,
            **shown,
            "_links": {
                "webui": f"/spaces/{page.space}/pages/{page.id}",
                "self": f"{self.url}{self.context}/rest/api/content/{page.id}",
            },
        }

    def ancestors(self, page: Page) -> list[Page]:
        chain: list[Page] = []
        parent = page.parent
        while parent is not None:
            chain.insert(0, self.pages[parent])
            parent = self.pages[parent].parent
        return chain

    def comment(self, page: Page, number: int, comment: Comment) -> dict[str, Any]:
        return {
            "id": f"{page.id}{number:03}",
            "type": "comment",
            "status": "current",
            "title": f"Re: {page.title}",
            "container": {"id": page.id, "type": "page", "title": page.title},
            "history": {
                "createdBy": user(comment.author),
                "createdDate": confluence_date(comment.created),
            },
            "version": {
                "by": user(comment.author),
                "when": confluence_date(comment.created),
                "number": 1,
            },
            "body": {"storage": {"value": f"<p>{comment.body}</p>", "representation": "storage"}},
        }

    def attachment(self, page: Page, attachment: Attachment) -> dict[str, Any]:
        quoted = urllib.parse.quote(attachment.name)
        return {
            "id": f"att{page.id}{attachment.name}",
            "type": "attachment",
            "status": "current",
            "title": attachment.name,
            "container": {"id": page.id, "type": "page", "title": page.title},
            "version": {
                "by": user("Ada Lovelace"),
                "when": confluence_date(attachment.updated),
                "number": 1,
            },
            "history": {"createdDate": confluence_date(attachment.updated)},
            "extensions": {"mediaType": attachment.media_type, "fileSize": len(attachment.data)},
            "_links": {"download": f"/download/attachments/{page.id}/{quoted}?version=1&api=v2"},
        }


def user(name: str) -> dict[str, Any]:
    return {"type": "known", "accountId": f"id-{name.split()[0].lower()}", "displayName": name}


def confluence_date(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


_CQL = re.compile(
    r'^(?:\((?P<inner>.*)\)|type\s*=\s*(?P<type>\w+)|space\s*=\s*"?(?P<space>\w+)"?'
    r'|space\s+in\s*\((?P<spaces>[^)]*)\)|label\s*=\s*"(?P<label>[^"]+)"'
    r"|id\s+in\s*\((?P<ids>[^)]*)\)"
    r'|lastmodified\s*>=\s*"(?P<date>[^"]+)")$',
    re.IGNORECASE,
)


def cql_filter(cql: str) -> Callable[[str, datetime, Page], bool]:
    """(kind, lastmodified, page) -> found, for the CQL the connector writes."""
    tests: list[Callable[[str, datetime, Page], bool]] = []
    for clause in split_and(cql.strip()):
        found = _CQL.match(clause.strip())
        if found is None:
            raise ValueError(clause)
        if found.group("inner") is not None:
            tests.append(cql_filter(found.group("inner")))
        elif found.group("type"):
            kind = found.group("type")
            tests.append(lambda k, m, p, t=kind: k == t)
        elif found.group("space"):
            space = found.group("space")
            tests.append(lambda k, m, p, s=space: p.space == s)
        elif found.group("spaces") is not None:
            keys = {s.strip().strip('"') for s in found.group("spaces").split(",")}
            tests.append(lambda k, m, p, s=keys: p.space in s)
        elif found.group("ids") is not None:
            ids = {i.strip() for i in found.group("ids").split(",")}
            tests.append(lambda k, m, p, i=ids: k == "page" and p.id in i)
        elif found.group("label"):
            label = found.group("label")
            tests.append(lambda k, m, p, lab=label: lab in p.labels)
        else:
            since = datetime.strptime(found.group("date"), "%Y-%m-%d %H:%M").replace(
                tzinfo=ZoneInfo(SITE_ZONE)
            )
            tests.append(lambda k, m, p, s=since: m >= s)
    return lambda kind, modified, page: all(test(kind, modified, page) for test in tests)


def source_args(
    name: str, kind: str, url: str, token_env: str, server: bool = False, user: str = EMAIL
) -> list[str]:
    """`sources add` of a `kind` source `name` in collection ops, reading the fake at
    `url` as a cloud deployment does (as `user`, with the token in `token_env`) or, with
    `server`, as a server deployment (with `user` "", a personal access token's)."""
    as_user = ["--set", f"user={user}"] if user else []
    return ["sources", "add", name, "--kind", kind, "--url", url, "--collection", "ops",
            "--set", f"deployment={'server' if server else 'cloud'}", *as_user,
            "--secret", f"token={token_env}"]  # fmt: skip
