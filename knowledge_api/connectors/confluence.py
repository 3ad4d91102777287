"""Confluence pages: one document per page, its storage format (XHTML) as Markdown with
the page's ancestors as the leading section path and its comments as a section; each
attachment of a known format (PDF, Word, PowerPoint, HTML) a document of its own,
read by the extractors `ingest` uses and linked to its page.

Cloud and Server/Data Center answer the same REST API (`/rest/api/content/search`
with CQL, paged by the `next` link each page gives). An incremental run asks for the
pages, comments and attachments modified since its window's start (`lastmodified`);
a page with a new comment or attachment is read again whole. CQL reads that date in
the site's time zone, which the API does not tell: `--set time_zone=Europe/Berlin`
says it, else the window is written as the earliest clock on Earth would show it
(UTC-12), which no time zone reads as later than meant (what it returns again
unchanged is neither embedded nor written again).
"""

from __future__ import annotations

import logging
import tempfile
import urllib.parse
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from knowledge_api.connectors import access, atlassian, confluence_access
from knowledge_api.connectors.base import Kind, Window, check_settings, split
from knowledge_api.connectors.http import SourceHTTP, shrinking
from knowledge_api.connectors.markup import storage_text
from knowledge_api.errors import ConnectorFailed, ExtractionError, InvalidRequest
from knowledge_api.ingest.extract import DOCX, HTML, PDF, PPTX, extractor
from knowledge_api.models import ConnectorSource, Document

log = logging.getLogger("knowledge_api.connectors")
SOURCE_TYPE = "wiki"
SETTINGS = (*atlassian.SETTINGS, "spaces", "cql", "time_zone", access.SETTING)
PAGE = 50
"""Pages a search asks for with their bodies (Cloud's most with `body.storage`)."""
IDS_PAGE = 200
EXPAND = "body.storage,version,space,ancestors,metadata.labels,history," + confluence_access.EXPAND
ATTACHED = (*PDF, *DOCX, *PPTX, *HTML)
EARLIEST_CLOCK = "Etc/GMT+12"
"""UTC-12: a time written so is read as no later than meant in any time zone."""


class ConfluenceConnector(Kind):
    kind: ClassVar[str] = "confluence"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.cloud = atlassian.is_cloud(source)
        url = urllib.parse.urlsplit(source.url.rstrip("/"))
        path = url.path or ("/wiki" if self.cloud else "")
        self.site = urllib.parse.urlunsplit((url.scheme, url.netloc, path, "", ""))
        self.spaces = split(source.settings.get("spaces", ""))
        self.cql = source.settings.get("cql", "").strip()
        self.zone = source.settings.get("time_zone", "") or EARLIEST_CLOCK
        self.problems: list[str] = []
        self.access = confluence_access.SpaceAccess(self)

    # -- the connector --------------------------------------------------------------

    def changed(self, cursor: str) -> Window:
        started = atlassian.now()
        self.problems = []
        documents = self.read(atlassian.since(cursor))
        return Window(documents, atlassian.cursor_of(started), self.problems)

    def read(self, since: datetime | None) -> Iterator[Document]:
        """The documents of the pages modified since `since` (all when None), as the
        search's pages come."""
        if since is None:
            for page in self.search(self.scope("page"), EXPAND, PAGE):
                yield from self.documents(page)
            return
        bound = f'lastmodified >= "{atlassian.query_time(since, self.zone)}"'
        done: set[str] = set()
        for page in self.search(self.scope("page", bound), EXPAND, PAGE):
            done.add(str(page["id"]))
            yield from self.documents(page)
        # a new comment or attachment leaves its page's date as it was: such pages are
        # read again whole, those the source's spaces and CQL take
        touched: list[str] = []
        for kind in ("comment", "attachment"):
            for item in self.search(self.scope(kind, bound), "container", IDS_PAGE):
                page_id = str((item.get("container") or {}).get("id") or "")
                if page_id.isdigit() and page_id not in done:
                    done.add(page_id)
                    touched.append(page_id)
        for start in range(0, len(touched), PAGE):
            ids = f"id in ({','.join(touched[start : start + PAGE])})"
            for page in self.search(self.scope("page", ids), EXPAND, PAGE):
                yield from self.documents(page)

    def visible(self) -> set[str]:
        """Every page's id, and `PAGE ID/attachments/FILE` of every attachment of a known
        format (not `PAGE ID/FILE`: that would count as seen with its page, and an
        attachment removed from a page that stays would never go)."""
        seen = {str(page["id"]) for page in self.search(self.scope("page"), "", IDS_PAGE)}
        for item in self.search(self.scope("attachment"), "container", IDS_PAGE):
            page_id = str((item.get("container") or {}).get("id") or "")
            if page_id in seen and attached(item):
                seen.add(f"{page_id}/attachments/{item.get('title')}")
        return seen

    def members(self, groups: set[str]) -> tuple[dict[str, set[str]], list[str]]:
        return self.access.members(groups)

    # -- reading ----------------------------------------------------------------------

    def connect(self) -> SourceHTTP:
        return atlassian.client(self.source, self.runtime.retries, self.site)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        found = self.client().get_json(path, params)
        if not isinstance(found, dict):
            raise ConnectorFailed(f"GET {path.split('?')[0]} did not answer a JSON object")
        return found

    def scope(self, kind: str, bound: str = "") -> str:
        """CQL for the content of a kind in the source's spaces; the source's own CQL
        applies to pages (a comment or an attachment carries no labels of its page)."""
        clauses = [f"type = {kind}"]
        if self.spaces:
            clauses.append("space in (" + ",".join(f'"{s}"' for s in self.spaces) + ")")
        if self.cql and kind == "page":
            clauses.append(f"({self.cql})")
        if bound:
            clauses.append(bound)
        return " AND ".join(clauses)

    def search(self, cql: str, expand: str, limit: int) -> Iterator[dict[str, Any]]:
        """The content CQL finds, a page of results at a time, following `next`."""
        params: dict[str, Any] = {"cql": cql, "limit": limit}
        if expand:
            params["expand"] = expand
        yield from self.listing("/rest/api/content/search", params)

    def listing(
        self, path: str, params: dict[str, Any], key: str = "id"
    ) -> Iterator[dict[str, Any]]:
        """The results (those with a `key`) of a listing of the REST API, page after
        page, following the `next` link each page gives. A page that keeps failing with
        5xx is asked again with half as many results, down to 10."""
        while True:
            limit = int(params.get("limit") or PAGE)
            body, limit = shrinking(self.get, path, params, "limit", limit)
            params = {**params, "limit": limit}
            yield from (r for r in body.get("results") or [] if isinstance(r, dict) and r.get(key))
            links = body.get("_links") or {}
            following = str(links.get("next") or "")
            if not following or not body.get("results"):
                return
            context = str(links.get("context") or "")
            if context and following.startswith(context + "/"):
                following = following[len(context) :]
            path, _, query = following.partition("?")
            params = dict(urllib.parse.parse_qsl(query))

    def comments(self, page_id: str) -> list[dict[str, Any]]:
        path = f"/rest/api/content/{page_id}/child/comment"
        params = {"expand": "body.storage,version,history", "depth": "all", "limit": 100}
        return list(self.listing(path, params))

    def attachments(self, page: dict[str, Any]) -> Iterator[Document]:
        page_id = str(page["id"])
        path = f"/rest/api/content/{page_id}/child/attachment"
        for item in self.listing(path, {"expand": "version,history", "limit": 100}):
            if not attached(item):
                continue
            name = str(item.get("title"))
            download = str((item.get("_links") or {}).get("download") or "")
            if not download:
                continue
            try:
                extracted = self.extract(name, download)
            except ExtractionError as e:
                self.problems.append(f"{page_id}/{name}: {e.reason}")
                continue
            version = item.get("version") or {}
            yield Document(
                source_type=SOURCE_TYPE,
                source_id=f"{page_id}/attachments/{name}",
                content=extracted.content,
                title=extracted.title or f"{page.get('title', '')}: {name}",
                metadata={
                    **extracted.metadata,
                    "file": name,
                    "page": str(page.get("title") or ""),
                    "page_id": page_id,
                    "space": str((page.get("space") or {}).get("key") or ""),
                    "url": self.site + download,
                    "media_type": str((item.get("extensions") or {}).get("mediaType") or ""),
                },
                collection=self.collection,
                created_at=atlassian.iso((item.get("history") or {}).get("createdDate")),
                updated_at=atlassian.iso(version.get("when")),
            )

    def extract(self, name: str, download: str) -> Any:
        """The text of an attachment, read by the extractor of its format."""
        suffix = PurePosixPath(name).suffix.lower()
        read = extractor(suffix)
        if read is None:
            raise ExtractionError("unknown format", suffix)
        response = self.client().request("GET", download)
        with tempfile.TemporaryDirectory(prefix="confluence-") as folder:
            path = Path(folder) / f"attachment{suffix}"
            path.write_bytes(response.content)
            return read(path, None)

    # -- one page ---------------------------------------------------------------------

    def documents(self, page: dict[str, Any]) -> list[Document]:
        """The page's document, then its attachments', each read by those who may read
        the page."""
        acl = self.access.acl(page)
        found = [self.document(page), *self.attachments(page)]
        for doc in found:
            doc.acl = acl
        return found

    def document(self, page: dict[str, Any]) -> Document:
        page_id = str(page["id"])
        title = " ".join(str(page.get("title") or "").split())
        ancestors = [
            " ".join(str(a.get("title") or "").split())
            for a in page.get("ancestors") or []
            if isinstance(a, dict)
        ]
        depth = len(ancestors)
        parts = [f"{'#' * min(level, 6)} {name}" for level, name in enumerate(ancestors, 1)]
        body = ((page.get("body") or {}).get("storage") or {}).get("value") or ""
        parts.append(storage_text(str(body), depth))
        comments = self.comments(page_id)
        if comments:
            parts.append(f"{'#' * min(depth + 1, 6)} Comments")
        for comment in comments:
            author = ((comment.get("version") or {}).get("by") or {}).get("displayName")
            when = atlassian.iso((comment.get("version") or {}).get("when"))
            heading = f"{'#' * min(depth + 2, 6)} Comment by {author or 'someone'}"
            text = storage_text(
                str(((comment.get("body") or {}).get("storage") or {}).get("value") or "")
            )
            parts.append(heading + (f", {when}" if when else "") + "\n\n" + text)
        space = page.get("space") or {}
        version = page.get("version") or {}
        labels = (((page.get("metadata") or {}).get("labels") or {}).get("results")) or []
        webui = str((page.get("_links") or {}).get("webui") or "")
        metadata: dict[str, Any] = {
            "page_id": page_id,
            "space": str(space.get("key") or ""),
            "space_name": str(space.get("name") or ""),
            "ancestors": ancestors,
            "labels": [str(label.get("name")) for label in labels if isinstance(label, dict)],
            "author": str((version.get("by") or {}).get("displayName") or ""),
            "version": version.get("number"),
            "comments": len(comments),
            "url": self.site + webui if webui else "",
        }
        return Document(
            source_type=SOURCE_TYPE,
            source_id=page_id,
            content="\n\n".join(part for part in parts if part.strip()),
            title=title,
            metadata={k: v for k, v in metadata.items() if v not in ("", None)},
            collection=self.collection,
            created_at=atlassian.iso((page.get("history") or {}).get("createdDate")),
            updated_at=atlassian.iso(version.get("when")),
        )


def attached(item: dict[str, Any]) -> bool:
    """An attachment of a format the extractors read."""
    return PurePosixPath(str(item.get("title") or "")).suffix.lower() in ATTACHED


def check(source: ConnectorSource) -> None:
    check_settings(source, SETTINGS, atlassian.SECRETS)
    atlassian.check(source, "Confluence")
    access.check(source)
    zone = source.settings.get("time_zone")
    if zone:
        try:
            ZoneInfo(zone)
        except (ValueError, KeyError) as e:
            raise InvalidRequest(
                "settings.time_zone", "must be a time zone name such as Europe/Berlin"
            ) from e
