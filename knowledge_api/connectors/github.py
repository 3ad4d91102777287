"""GitHub issues and pull requests over the REST API (github.com or Enterprise Server):
one document per issue or pull request, its body then every comment, every review
(its summary) and every review comment, each a section with its author and date.

Each run lists, per repository, the issues and pull requests updated since that
repository's cursor (`since`, oldest first) and reads the comments of those alone: a
comment or a review comment bumps its item's `updated_at`, so an old item that gained
one comes back. The cursor keeps each repository's latest `updated_at` seen (GitHub's
clock, not ours); a repository added to the settings later is read from the start.
What a repository no longer lists (deleted, transferred to another repository) is
pruned by the run.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar

from knowledge_api.connectors import github_access
from knowledge_api.connectors.base import Kind, Window, check_settings, json_cursor, secret, split
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.errors import ConnectorFailed, InvalidRequest
from knowledge_api.models import ConnectorSource, Document

SOURCE_TYPE = "git"
SETTINGS = ("repos", "timeout", *github_access.SETTINGS)
SECRETS = ("token",)
PER_PAGE = 100
API_VERSION = "2022-11-28"
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class GitHubConnector(Kind):
    kind: ClassVar[str] = "github"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.repos = split(source.settings["repos"])
        self.timeout = float(source.settings.get("timeout", "30"))
        self.listed: set[str] | None = None
        """Every item's source id, when this run read every repository whole."""

    def changed(self, cursor: str) -> Window:
        window = Window()
        window.documents = self.read(read_cursor(cursor), window)
        return window

    def read(self, since: dict[str, str], window: Window) -> Iterator[Document]:
        """Each repository's items updated since its cursor, as the listing's pages
        come; the window's cursor once all are read."""
        state: dict[str, str] = {}
        listed: set[str] = set()
        scopes: dict[str, tuple[str, ...]] = {}
        for repo in self.repos:
            newest = since.get(repo, "")
            acl: tuple[str, ...] = ()
            for issue in self.issues(repo, earlier(newest, self.runtime.overlap)):
                acl = acl or github_access.acl(self, repo)  # the listing first names a 404
                listed.add(item_id(repo, issue))
                yield self.document(repo, issue, acl)
                newest = max(newest, str(issue.get("updated_at") or ""))
            scopes[f"{repo}#"] = acl or github_access.acl(self, repo)
            state[repo] = newest
        if not any(since.get(repo) for repo in self.repos):
            self.listed = listed
        window.cursor = json.dumps(state, sort_keys=True)
        window.scopes = scopes

    def visible(self) -> set[str]:
        if self.listed is not None:
            return self.listed
        return {item_id(repo, issue) for repo in self.repos for issue in self.issues(repo, "")}

    def members(self, groups: set[str]) -> tuple[dict[str, set[str]], list[str]]:
        return github_access.members(self, groups)

    # -- reading ----------------------------------------------------------------------

    def connect(self) -> SourceHTTP:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "knowledge-api",
        }
        token = secret(self.source, "token")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.runtime.http(self.source.url, headers=headers, timeout=self.timeout)

    def listing(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """Each item of a paged listing."""
        for page in self.client().pages(path, {**(params or {}), "per_page": PER_PAGE}):
            if not isinstance(page, list):
                raise ConnectorFailed(f"GET {path}: answered a {type(page).__name__}, not a list")
            yield from (item for item in page if isinstance(item, dict))

    def issues(self, repo: str, since: str) -> Iterator[dict[str, Any]]:
        """The repository's issues and pull requests updated since `since` (all when
        empty), oldest change first."""
        params = {"state": "all", "sort": "updated", "direction": "asc"}
        if since:
            params["since"] = since
        for issue in self.listing(f"/repos/{repo}/issues", params):
            if isinstance(issue.get("number"), int):
                yield issue

    def document(self, repo: str, issue: dict[str, Any], acl: tuple[str, ...]) -> Document:
        number = issue["number"]
        pull = isinstance(issue.get("pull_request"), dict)
        comments = []
        if issue.get("comments"):
            comments = list(self.listing(f"/repos/{repo}/issues/{number}/comments"))
        verdicts, reviews = [], []
        if pull:
            verdicts = [
                review
                for review in self.listing(f"/repos/{repo}/pulls/{number}/reviews")
                if str(review.get("body") or "").strip()
            ]
            reviews = list(self.listing(f"/repos/{repo}/pulls/{number}/comments"))
        sections = [opening(issue, pull)]
        sections += [comment_section(c, "Comment") for c in comments]
        sections += [review_section(r) for r in verdicts]
        sections += [comment_section(c, "Review comment") for c in reviews]
        metadata: dict[str, Any] = {
            "url": str(issue.get("html_url") or ""),
            "kind": "pull" if pull else "issue",
            "repo": repo,
            "number": number,
            "state": str(issue.get("state") or ""),
            "author": login(issue.get("user")),
            "labels": names(issue.get("labels"), "name"),
            "assignees": names(issue.get("assignees"), "login"),
            "milestone": str((issue.get("milestone") or {}).get("title") or ""),
            "comments": len(comments) + len(verdicts) + len(reviews),
        }
        if pull:
            metadata["merged"] = bool(issue["pull_request"].get("merged_at"))
        return Document(
            source_type=SOURCE_TYPE,
            source_id=item_id(repo, issue),
            content="\n\n".join(sections),
            title=f"#{number} {issue.get('title') or ''}".rstrip(),
            metadata=metadata,
            collection=self.collection,
            created_at=str(issue.get("created_at") or ""),
            updated_at=str(issue.get("updated_at") or ""),
            acl=acl,
        )


def item_id(repo: str, issue: dict[str, Any]) -> str:
    return f"{repo}#{issue['number']}"


def opening(issue: dict[str, Any], pull: bool) -> str:
    """Who opened the item and when, its state and labels, then its body."""
    what = "Pull request" if pull else "Issue"
    line = f"{what} opened by @{login(issue.get('user'))} on {day(issue.get('created_at'))}"
    line += f", {issue.get('state') or 'open'}"
    if pull and issue["pull_request"].get("merged_at"):
        line += f", merged on {day(issue['pull_request']['merged_at'])}"
    labels = names(issue.get("labels"), "name")
    if labels:
        line += f"; labels: {', '.join(labels)}"
    body = str(issue.get("body") or "").strip()
    return f"{line}.\n\n{body}" if body else f"{line}."


def comment_section(comment: dict[str, Any], what: str) -> str:
    heading = f"## {what} by @{login(comment.get('user'))}"
    if comment.get("path"):
        line = comment.get("line") or comment.get("original_line")
        heading += f" on {comment['path']}" + (f":{line}" if line else "")
    heading += f", {day(comment.get('created_at'))}"
    return f"{heading}\n\n{str(comment.get('body') or '').strip()}".rstrip()


def review_section(review: dict[str, Any]) -> str:
    """A pull request review's own text (what the reviewer wrote on submitting it)."""
    state = str(review.get("state") or "").lower().replace("_", " ")
    heading = f"## Review by @{login(review.get('user'))}" + (f" ({state})" if state else "")
    heading += f", {day(review.get('submitted_at'))}"
    return f"{heading}\n\n{str(review.get('body') or '').strip()}"


def login(user: Any) -> str:
    return str(user.get("login") or "ghost") if isinstance(user, dict) else "ghost"


def names(items: Any, key: str) -> list[str]:
    """The `key` of each object of a list (a label may also come as a bare name)."""
    found = []
    for item in items if isinstance(items, list) else []:
        name = item.get(key) if isinstance(item, dict) else item
        if isinstance(name, str) and name:
            found.append(name)
    return found


def day(value: Any) -> str:
    """`2026-01-02T10:00:00Z` as `2026-01-02 10:00`."""
    return str(value or "")[:16].replace("T", " ")


def earlier(instant: str, seconds: float) -> str:
    """`instant` (GitHub's `2026-01-02T10:00:00Z`) `seconds` earlier, so that an item
    GitHub's listing returned late is read by the next run; "" stays ""."""
    if not instant or not seconds:
        return instant
    try:
        moment = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    except ValueError:
        return instant
    return (moment - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_cursor(cursor: str) -> dict[str, str]:
    """Repository -> the latest `updated_at` a run saw there."""
    return {str(k): str(v) for k, v in json_cursor(cursor).items()}


def check(source: ConnectorSource) -> None:
    """InvalidRequest naming the field for a source this connector cannot read."""
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequest(
            "url", "must be the API root: https://api.github.com or https://HOST/api/v3"
        )
    check_settings(source, SETTINGS, SECRETS)
    github_access.check(source)
    repos = split(source.settings.get("repos", ""))
    if not repos:
        raise InvalidRequest("settings.repos", "a GitHub source needs --set repos=OWNER/NAME,...")
    for repo in repos:
        if not _REPO.fullmatch(repo):
            raise InvalidRequest("settings.repos", f"{repo!r} is not OWNER/NAME")
    try:
        float(source.settings.get("timeout", "30"))
    except ValueError as e:
        raise InvalidRequest("settings.timeout", "must be a number of seconds") from e
