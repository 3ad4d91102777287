"""A fake GitHub REST API on a loopback port, for the GitHub connector's tests: the
issues (pull requests among them) of a few repositories, their comments and review
comments, shaped as GitHub documents them, paged with `Link` headers, changed by the
test between syncs; faults (429, 503, a spent quota) planned for the next calls."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests import loopback

TOKEN = "ghp_fake_token_for_tests"
PREFIX = "/api/v3"
"""The API root of GitHub Enterprise Server, as `--url` names it."""
EPOCH = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Item:
    repo: str
    number: int
    title: str
    body: str
    author: str
    pull: bool = False
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    assignees: list[str] = field(default_factory=list)
    milestone: str = ""
    merged: bool = False
    created_at: str = ""
    updated_at: str = ""
    comments: list[dict[str, Any]] = field(default_factory=list)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    """Review comments (on a line of the diff)."""
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    """Reviews as submitted (`APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`)."""

    @property
    def source_id(self) -> str:
        return f"{self.repo}#{self.number}"

    def payload(self, base: str) -> dict[str, Any]:
        html = f"https://github.example.com/{self.repo}/{'pull' if self.pull else 'issues'}"
        found: dict[str, Any] = {
            "id": hash(self.source_id) & 0xFFFFFFF,
            "node_id": f"I_{self.number}",
            "url": f"{base}/repos/{self.repo}/issues/{self.number}",
            "html_url": f"{html}/{self.number}",
            "number": self.number,
            "state": self.state,
            "title": self.title,
            "body": self.body,
            "user": {"login": self.author, "id": 1, "type": "User"},
            "labels": [{"id": i, "name": n, "color": "ededed"} for i, n in enumerate(self.labels)],
            "assignee": {"login": self.assignees[0]} if self.assignees else None,
            "assignees": [{"login": a, "id": 2} for a in self.assignees],
            "milestone": {"title": self.milestone, "number": 1} if self.milestone else None,
            "locked": False,
            "comments": len(self.comments),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "closed_at": self.updated_at if self.state == "closed" else None,
            "author_association": "MEMBER",
        }
        if self.pull:
            found["pull_request"] = {
                "url": f"{base}/repos/{self.repo}/pulls/{self.number}",
                "html_url": f"{html}/{self.number}",
                "merged_at": self.updated_at if self.merged else None,
            }
        return found


@dataclass
class Fault:
    path: str
    """The next request of this path gets the fault."""
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


class GitHub:
    """The state the fake serves and the requests it saw."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}
        self.disabled: set[str] = set()
        """Repositories whose issues are turned off (GitHub answers 410)."""
        self.faults: list[Fault] = []
        self.visibility: dict[str, str] = {}
        """Repository -> `public` (unless named), `private` or `internal`."""
        self.collaborators: dict[str, list[str]] = {}
        """Repository -> the logins that may read it (beyond the public, for a public one)."""
        self.emails: dict[str, str | None] = {}
        """Login -> the public e-mail address of the account (None: it shows none)."""
        self.requests: list[str] = []
        self.clock = EPOCH
        self.lock = threading.Lock()
        self.url = ""

    def now(self) -> str:
        """GitHub's clock: a second later at each change."""
        self.clock += timedelta(seconds=1)
        return stamp(self.clock)

    def add(self, repo: str, title: str, body: str, author: str = "alice", **more: Any) -> Item:
        number = 1 + max((i.number for i in self.items.values() if i.repo == repo), default=0)
        when = self.now()
        item = Item(repo, number, title, body, author, created_at=when, updated_at=when, **more)
        self.items[item.source_id] = item
        return item

    def comment(self, source_id: str, body: str, author: str = "bob", review: bool = False) -> None:
        item = self.items[source_id]
        when = self.now()
        comment = {
            "id": len(item.comments) + len(item.reviews) + 1,
            "user": {"login": author},
            "body": body,
            "created_at": when,
            "updated_at": when,
            "html_url": f"https://github.example.com/{item.repo}#c{when}",
        }
        if review:
            comment |= {"path": "src/app.py", "line": 12, "diff_hunk": "@@ -1 +1 @@"}
            item.reviews.append(comment)
        else:
            item.comments.append(comment)
        item.updated_at = when

    def review(self, source_id: str, body: str, state: str, author: str = "dave") -> None:
        item = self.items[source_id]
        when = self.now()
        item.verdicts.append(
            {
                "id": len(item.verdicts) + 1,
                "user": {"login": author},
                "body": body,
                "state": state,
                "submitted_at": when,
                "commit_id": "0" * 40,
            }
        )
        item.updated_at = when

    def edit(self, source_id: str, updated_at: str = "", **changes: Any) -> None:
        item = self.items[source_id]
        for key, value in changes.items():
            setattr(item, key, value)
        item.updated_at = updated_at or self.now()

    def transfer(self, source_id: str, repo: str) -> Item:
        """The issue moves to `repo`, numbered there anew, as GitHub transfers."""
        old = self.items.pop(source_id)
        number = 1 + max((i.number for i in self.items.values() if i.repo == repo), default=0)
        moved = Item(**{**old.__dict__, "repo": repo, "number": number})
        moved.updated_at = self.now()
        self.items[moved.source_id] = moved
        return moved

    def fail(self, path: str, status: int, headers: dict[str, str] | None = None) -> None:
        body = {"message": "Server Error" if status >= 500 else "API rate limit exceeded"}
        self.faults.append(Fault(path, status, headers or {}, body))

    def of(self, repo: str) -> list[Item]:
        return [item for item in self.items.values() if item.repo == repo]

    # -- answering ----------------------------------------------------------------------

    def answer(
        self, path: str, query: dict[str, str], authorization: str
    ) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.requests.append(path + ("?" + urllib.parse.urlencode(query) if query else ""))
            if authorization != f"Bearer {TOKEN}":
                return 401, {}, {"message": "Bad credentials", "status": "401"}
            for fault in self.faults:
                if path == fault.path:
                    self.faults.remove(fault)
                    return fault.status, fault.headers, fault.body
            return self.route(path, query)

    def route(self, path: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        known = {item.repo for item in self.items.values()} | self.disabled | {*self.visibility}
        found = re.fullmatch(r"/repos/([^/]+/[^/]+)(/collaborators)?", path)
        if found is not None:
            repo, listing = found.groups()
            if repo not in known:
                return 404, {}, {"message": "Not Found"}
            if listing:
                rows = [self.person(login) for login in self.collaborators.get(repo, [])]
                return self.page(path, query, rows)
            return 200, {}, self.repository(repo)
        found = re.fullmatch(r"/users/([^/]+)", path)
        if found is not None:
            name = found.group(1)
            return 200, {}, self.person(name) | {"email": self.emails.get(name), "name": name}
        found = re.fullmatch(
            r"/repos/([^/]+/[^/]+)/(issues|pulls)(?:/(\d+)/(comments|reviews))?", path
        )
        if found is None:
            return 404, {}, {"message": "Not Found"}
        repo, what, number, part = found.groups()
        if repo not in known:
            return 404, {}, {"message": "Not Found"}
        if repo in self.disabled:
            return 410, {}, {"message": "Issues are disabled for this repo"}
        if number is None and what == "issues":
            since = query.get("since", "")
            items = sorted(self.of(repo), key=lambda i: (i.updated_at, i.number))
            if query.get("direction") == "desc":
                items.reverse()
            rows = [i.payload(self.url) for i in items if not since or i.updated_at >= since]
            return self.page(path, query, rows)
        item = self.items.get(f"{repo}#{number}")
        if item is None or (what == "pulls" and not item.pull):
            return 404, {}, {"message": "Not Found"}
        if what == "issues":
            return self.page(path, query, item.comments)
        return self.page(path, query, item.verdicts if part == "reviews" else item.reviews)

    def repository(self, repo: str) -> dict[str, Any]:
        visibility = self.visibility.get(repo, "public")
        owner, name = repo.split("/")
        return {
            "id": hash(repo) & 0xFFFFFF,
            "name": name,
            "full_name": repo,
            "owner": self.person(owner) | {"type": "Organization"},
            "private": visibility != "public",
            "visibility": visibility,
            "html_url": f"https://github.example.com/{repo}",
        }

    def person(self, login: str) -> dict[str, Any]:
        return {"login": login, "id": hash(login) & 0xFFFFFF, "type": "User", "site_admin": False}

    def page(
        self, path: str, query: dict[str, str], rows: list[Any]
    ) -> tuple[int, dict[str, str], Any]:
        size = min(int(query.get("per_page", "30")), 100)
        number = int(query.get("page", "1"))
        chunk = rows[(number - 1) * size : number * size]
        headers = {}
        if number * size < len(rows):
            after = urllib.parse.urlencode({**query, "page": str(number + 1)})
            headers["Link"] = f'<{self.url}{path}?{after}>; rel="next"'
        return 200, headers, chunk


class Handler(loopback.Handler):
    github: GitHub

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path.removeprefix(PREFIX)
        status, headers, body = self.github.answer(
            path, query, self.headers.get("Authorization", "")
        )
        quota = {"X-RateLimit-Limit": "5000"}
        if "X-RateLimit-Remaining" not in headers:
            quota["X-RateLimit-Remaining"] = "4999"
            quota["X-RateLimit-Reset"] = str(int(time.time()) + 3600)
        kind = {"Content-Type": "application/json; charset=utf-8"}
        self.respond(status, json.dumps(body).encode(), kind | quota | headers)


@contextmanager
def github() -> Iterator[GitHub]:
    state = GitHub()
    with loopback.serving(type("Bound", (Handler,), {"github": state})) as url:
        state.url = url + PREFIX
        yield state
