"""Jira issues: one document per issue, its description then every comment as a
section of its own (author and date), as a reader finds a ticket by its key.

Jira Cloud is searched through `/rest/api/3/search/jql` (paged by `nextPageToken`; the
old `/rest/api/3/search` answers 410 there), Jira Server and Data Center through
`/rest/api/2/search` (paged by `startAt`). Cloud writes rich text in Atlassian Document
Format, Server in wiki markup; both become Markdown (markup.py). A search returns an
issue's first comments only: the others are read from the issue's comment list.

An incremental run asks for the issues `updated` since its window's start (JQL reads
that date in the account's time zone: the connector asks which it is). Pruning lists
the key of every issue the JQL finds; an issue moved to another project has a new key,
so the old one goes and the new one comes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any, ClassVar

from knowledge_api.connectors import access, atlassian
from knowledge_api.connectors.base import Kind, Window, check_settings
from knowledge_api.connectors.http import SourceHTTP, shrinking
from knowledge_api.connectors.jira_access import ProjectAccess
from knowledge_api.connectors.markup import adf_text, wiki_text
from knowledge_api.errors import ConnectorFailed
from knowledge_api.models import ConnectorSource, Document

log = logging.getLogger("knowledge_api.connectors")
SOURCE_TYPE = "jira"
SETTINGS = (*atlassian.SETTINGS, "jql", access.SETTING)
PAGE = 100
"""Issues a search page asks for (Cloud's most with fields)."""
IDS_PAGE = 1000
"""Issues a page of keys asks for (the service may answer fewer)."""
COMMENTS_PAGE = 100
FIELDS = (
    "summary",
    "description",
    "comment",
    "project",
    "issuetype",
    "status",
    "priority",
    "labels",
    "components",
    "assignee",
    "reporter",
    "resolution",
    "parent",
    "security",
    "created",
    "updated",
)
EVERYTHING = 'created >= "1970-01-01"'
"""The bound of a search with no JQL: Jira Cloud refuses an unbounded one (400)."""
_ORDER = re.compile(r"\s+order\s+by\s+.*$", re.IGNORECASE | re.DOTALL)


class JiraConnector(Kind):
    kind: ClassVar[str] = "jira"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.base_url = source.url.rstrip("/")
        self.cloud = atlassian.is_cloud(source)
        self.api = "/rest/api/3" if self.cloud else "/rest/api/2"
        self.jql = _ORDER.sub("", source.settings.get("jql", "")).strip()
        self.access = ProjectAccess(self)

    # -- the connector --------------------------------------------------------------

    def changed(self, cursor: str) -> Window:
        started = atlassian.now()
        since = atlassian.since(cursor)
        bound = None
        if since is not None:
            bound = f'updated >= "{atlassian.query_time(since, self.time_zone())}"'
        documents = (self.document(issue) for issue in self.search(bound, FIELDS))
        return Window(documents, atlassian.cursor_of(started))

    def visible(self) -> set[str]:
        return {str(issue["key"]) for issue in self.search(None, ("updated",), IDS_PAGE)}

    def members(self, groups: set[str]) -> tuple[dict[str, set[str]], list[str]]:
        return self.access.members(groups)

    # -- reading ----------------------------------------------------------------------

    def connect(self) -> SourceHTTP:
        return atlassian.client(self.source, self.runtime.retries)

    def time_zone(self) -> str:
        """The account's time zone, in which Jira reads a JQL date."""
        me = self.get(f"{self.api}/myself")
        return str(me.get("timeZone") or "") if isinstance(me, dict) else ""

    def query(self, bound: str | None) -> str:
        clauses = [f"({self.jql})"] if self.jql else []
        if bound:
            clauses.append(bound)
        return " AND ".join(clauses or [EVERYTHING]) + " ORDER BY key ASC"

    def search(
        self, bound: str | None, fields: tuple[str, ...], size: int = PAGE
    ) -> Iterator[dict[str, Any]]:
        """The issues the JQL finds, page after page (one page in memory at a time). A
        page that keeps failing with 5xx is asked again with half as many issues (a
        large page can time the server out), down to 10."""
        path = f"{self.api}/search/jql" if self.cloud else f"{self.api}/search"
        params: dict[str, Any] = {"jql": self.query(bound), "fields": ",".join(fields)}
        position: dict[str, Any] = {} if self.cloud else {"startAt": 0}
        while True:
            body, size = shrinking(self.get, path, {**params, **position}, "maxResults", size)
            if not isinstance(body, dict):
                raise ConnectorFailed(f"GET {path} did not answer a JSON object")
            issues = [i for i in body.get("issues") or [] if isinstance(i, dict) and i.get("key")]
            yield from issues
            if self.cloud:
                token = body.get("nextPageToken")
                if not token or body.get("isLast") is True:
                    return
                position = {"nextPageToken": token}
            else:
                start = int(position["startAt"]) + len(issues)
                if not issues or start >= int(body.get("total") or 0):
                    return
                position = {"startAt": start}

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        try:
            return self.client().get_json(path, params)
        except ConnectorFailed as e:
            if e.details.get("status") == 410 and not self.cloud:
                raise ConnectorFailed(
                    f"{e.message}; Jira Cloud searches through /rest/api/3/search/jql: "
                    "--set deployment=cloud",
                    **e.details,
                ) from e
            raise

    def comments(self, key: str, found: Any) -> list[dict[str, Any]]:
        """Every comment of an issue: those the search returned, and the rest from the
        issue's comment list when it returned only the first ones."""
        listed = found if isinstance(found, dict) else {}
        comments = [c for c in listed.get("comments") or [] if isinstance(c, dict)]
        total = int(listed.get("total") or len(comments))
        if total <= len(comments):
            return comments
        comments = []
        while len(comments) < total:
            path = f"{self.api}/issue/{key}/comment"
            page = self.get(path, {"startAt": len(comments), "maxResults": COMMENTS_PAGE})
            more = [c for c in page.get("comments") or [] if isinstance(c, dict)]
            if not more:
                break
            comments.extend(more)
            total = int(page.get("total") or total)
        return comments

    # -- one issue --------------------------------------------------------------------

    def document(self, issue: dict[str, Any]) -> Document:
        key = str(issue["key"])
        fields = issue.get("fields") or {}
        text = adf_text if self.cloud else wiki_text
        summary = " ".join(str(fields.get("summary") or "").split())
        comments = self.comments(key, fields.get("comment"))
        parts = [text(fields.get("description"))]
        for comment in comments:
            author = name(comment.get("author")) or "someone"
            when = atlassian.iso(comment.get("created"))
            heading = f"## Comment by {author}" + (f", {when}" if when else "")
            parts.append(f"{heading}\n\n{text(comment.get('body'))}".rstrip())
        project = str((fields.get("project") or {}).get("key") or key.rpartition("-")[0])
        metadata: dict[str, Any] = {
            "key": key,
            "project": project,
            "issuetype": name(fields.get("issuetype")),
            "status": name(fields.get("status")),
            "priority": name(fields.get("priority")),
            "labels": [str(label) for label in fields.get("labels") or []],
            "components": [name(c) for c in fields.get("components") or [] if name(c)],
            "assignee": name(fields.get("assignee")),
            "reporter": name(fields.get("reporter")),
            "resolution": name(fields.get("resolution")),
            "parent": str((fields.get("parent") or {}).get("key") or ""),
            "comments": len(comments),
            "url": f"{self.base_url}/browse/{key}",
        }
        return Document(
            source_type=SOURCE_TYPE,
            source_id=key,
            content="\n\n".join(part for part in parts if part.strip()),
            title=f"{key} {summary}".strip(),
            metadata={k: v for k, v in metadata.items() if v not in ("", None)},
            collection=self.collection,
            created_at=atlassian.iso(fields.get("created")),
            updated_at=atlassian.iso(fields.get("updated")),
            acl=self.access.acl(project, fields),
        )


def name(value: Any) -> str:
    """The name Jira shows of a user, status, type or component."""
    if not isinstance(value, dict):
        return ""
    for field in ("displayName", "name", "value", "key"):
        if value.get(field):
            return str(value[field])
    return ""


def check(source: ConnectorSource) -> None:
    check_settings(source, SETTINGS, atlassian.SECRETS)
    atlassian.check(source, "Jira")
    access.check(source)
