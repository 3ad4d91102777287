"""A small web site served on loopback (http.server in a thread, port 0) that a test
changes between syncs: pages with `ETag` and `Last-Modified` answering conditional GETs
with 304, robots.txt, sitemaps, redirects, and answers queued for a path (a 429 with
`Retry-After`, a 503) before its page. Every request is logged with its answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime

from tests import loopback


@dataclass
class Resource:
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    etag: str = ""
    modified: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Site:
    url: str = ""
    resources: dict[str, Resource] = field(default_factory=dict)
    queued: dict[str, list[Resource]] = field(default_factory=dict)
    """Answers given to a path, one a request, before its resource."""
    log: list[tuple[str, int]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """When each request of the log came (time.monotonic)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def page(
        self,
        path: str,
        title: str,
        text: str,
        links: tuple[str, ...] = (),
        etag: str = "",
        modified: datetime | None = None,
        head: str = "",
    ) -> None:
        """An HTML page: its links in the navigation, its text under an h1 and an h2
        (the extractor leaves the navigation, header and footer out)."""
        nav = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
        html = (
            f"<!doctype html><html><head><title>{title} | Example</title>{head}</head>"
            f"<body><header><nav><ul>{nav}</ul></nav></header>"
            f"<main><article><h1>{title}</h1><p>{text}</p>"
            f"<h2>Details</h2><p>More about {title.lower()} for the readers of this "
            "site, written out in a full sentence.</p></article></main>"
            "<footer><p>Copyright Example Corp</p></footer></body></html>"
        )
        self.resources[path] = Resource(
            html.encode(),
            etag=etag,
            modified=format_datetime(modified, usegmt=True) if modified else "",
        )

    def add(self, path: str, body: str | bytes, content_type: str, **more: object) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.resources[path] = Resource(data, content_type, **more)  # type: ignore[arg-type]

    def sitemap(self, path: str, locations: list[str], index: bool = False) -> None:
        entry, root = ("sitemap", "sitemapindex") if index else ("url", "urlset")
        items = "".join(f"<{entry}><loc>{loc}</loc></{entry}>" for loc in locations)
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{items}</{root}>'
        )
        self.add(path, xml, "application/xml")

    def answer_first(self, path: str, status: int, headers: dict[str, str] | None = None) -> None:
        self.queued.setdefault(path, []).append(
            Resource(b"", "text/plain", status=status, headers=headers or {})
        )

    def requested(self, path: str) -> list[int]:
        """The statuses `path` was answered with, in order."""
        with self.lock:
            return [status for logged, status in self.log if logged == path]

    def answer(self, path: str, headers: dict[str, str]) -> Resource:
        with self.lock:
            if self.queued.get(path):
                return self.queued[path].pop(0)
        found = self.resources.get(path)
        if found is None:
            return Resource(b"not found", "text/plain", status=404)
        if found.status == 200 and not_modified(found, headers):
            return Resource(b"", "", etag=found.etag, modified=found.modified, status=304)
        return found


def not_modified(resource: Resource, headers: dict[str, str]) -> bool:
    match = headers.get("if-none-match")
    if match is not None:
        return bool(resource.etag) and match == resource.etag
    since = headers.get("if-modified-since")
    if since and resource.modified:
        return parsedate_to_datetime(resource.modified) <= parsedate_to_datetime(since)
    return False


def handler(site: Site) -> type[loopback.Handler]:
    class Handler(loopback.Handler):
        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            found = site.answer(self.path, headers)
            with site.lock:
                site.log.append((self.path, found.status))
                site.times.append(time.monotonic())
            described = {
                "Content-Type": found.content_type,
                "ETag": found.etag,
                "Last-Modified": found.modified,
            }
            written = {name: value for name, value in described.items() if value}
            body = b"" if found.status == 304 else found.body
            self.respond(found.status, body, written | found.headers)

    return Handler


@contextmanager
def serving() -> Iterator[Site]:
    site = Site()
    with loopback.serving(handler(site)) as url:
        site.url = url
        yield site
