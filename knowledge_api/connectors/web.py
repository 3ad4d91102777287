"""Web pages: a site read from a start page (or a sitemap), its own links followed to a
depth, as its readers find its pages.

robots.txt is obeyed for the service's user agent (`knowledge-api`), its Crawl-delay
too, and so is a page's `<meta name="robots">` (noindex, nofollow). Only the site's own
pages are read: the scheme, host and port of the source's URL. Each HTML page goes
through the extractor `ingest` reads .html files with. The cursor keeps each page's
`ETag`, `Last-Modified` and links: the next run asks with `If-None-Match` and
`If-Modified-Since`, and a page that answers 304 is unchanged (neither read nor
embedded) while its links, from the cursor, are followed still. A page that answers 404
or 410, or that no page or sitemap leads to any more, is not seen, so the run prunes it.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.robotparser
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar
from xml.etree import ElementTree

import httpx

from knowledge_api.connectors.base import Kind, Window, check_settings, split
from knowledge_api.connectors.http import WAIT_CEILING, SourceHTTP
from knowledge_api.connectors.pages import (
    AGENT,
    GONE,
    Page,
    canonical,
    client,
    is_html,
    is_pdf,
    origin_of,
    pdf_document,
)
from knowledge_api.errors import ConnectorFailed, ExtractionError, InvalidRequest
from knowledge_api.models import ConnectorSource, Document

SETTINGS = ("depth", "max_pages", "pdf", "sitemap", "timeout")
DEPTH, MAX_DEPTH = 3, 20
MAX_PAGES = 500
ROBOTS_ANSWERS = frozenset(range(400, 500)) - {429}
"""robots.txt statuses taken as an answer: any 4xx but a rate limit."""
MAX_SITEMAPS = 50
MAX_SITEMAP_BYTES = 50 * 2**20
"""The sitemaps protocol's own limit on one file, uncompressed."""
NOT_PAGES = (
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico", ".css", ".js", ".json",
    ".xml", ".zip", ".gz", ".tgz", ".tar", ".mp3", ".mp4", ".webm", ".woff", ".woff2",
    ".ttf", ".pdf", ".docx", ".pptx", ".xlsx", ".exe", ".dmg", ".iso",
)  # fmt: skip
"""Links that are no page by their suffix: not fetched."""


@dataclass
class Known:
    """A page as the last run left it: its validators and the site links it holds."""

    etag: str = ""
    modified: str = ""
    links: list[str] = field(default_factory=list)


@dataclass
class Crawl:
    """One run: what the cursor knew, and what this run found."""

    known: dict[str, Known]
    found: dict[str, Known] = field(default_factory=dict)
    documents: list[Document] = field(default_factory=list)
    """Those of the page read last, until the crawl hands them on."""
    seen: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def keep(self, url: str, known: Known) -> list[str]:
        """A page seen: read now, or unchanged since the last run (or unreadable now,
        and kept as it was); its links."""
        self.seen.add(url)
        self.found[url] = known
        return known.links


class WebConnector(Kind):
    kind: ClassVar[str] = "web"
    http: SourceHTTP

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.start = canonical(source.url)
        self.origin = origin_of(self.start)
        self.depth = int(source.settings.get("depth", DEPTH))
        self.max_pages = int(source.settings.get("max_pages", MAX_PAGES))
        self.sitemaps = split(source.settings.get("sitemap", ""))
        self.pdfs = source.settings.get("pdf", "off") == "on"
        if is_sitemap(self.start):
            self.sitemaps.insert(0, self.start)
        self.http = client(self.origin, float(source.settings.get("timeout", "30")), self.runtime)
        self.seen: set[str] | None = None

    # -- the connector --------------------------------------------------------------

    def changed(self, cursor: str) -> Window:
        """Every page the site leads to; those unchanged since `cursor` (a 304) are
        seen without being read."""
        crawl = Crawl(read_cursor(cursor))
        window = Window(problems=crawl.problems)
        window.documents = self.crawl(crawl, window)
        return window

    def crawl(self, crawl: Crawl, window: Window) -> Iterator[Document]:
        """The pages read, one at a time as the crawl goes; the window's cursor and
        every page seen once it ends."""
        robots = self.robots()
        first = [] if self.start in self.sitemaps else [self.start]
        if first and not robots.can_fetch(AGENT, self.start):
            raise ConnectorFailed(f"{self.origin}/robots.txt disallows {self.start} to {AGENT}")
        seeds = list(dict.fromkeys(first + self.sitemap_pages()))
        critical = set(first)
        queue = deque((url, 0) for url in seeds)
        queued = set(seeds)
        fetched = 0
        while queue:
            url, depth = queue.popleft()
            if not robots.can_fetch(AGENT, url):
                continue
            if fetched >= self.max_pages:
                crawl.problems.append(
                    f"max_pages={self.max_pages} reached: {len(queue) + 1} more pages not read"
                )
                break
            if fetched:
                self.pause(robots)
            fetched += 1
            links, moved = self.visit(url, crawl, url in critical)
            yield from crawl.documents
            crawl.documents.clear()
            if moved is not None and moved not in queued:
                queued.add(moved)
                queue.appendleft((moved, depth))  # a redirect is the page itself
                if url in critical:
                    critical.add(moved)
            for link in links if depth < self.depth else []:
                if link not in queued:
                    queued.add(link)
                    queue.append((link, depth + 1))
        self.seen = crawl.seen
        # every run walks the whole site (a page unchanged is a 304), so it knows every
        # page: what is gone is pruned at every run
        window.cursor, window.seen = write_cursor(crawl.found), set(crawl.seen)

    def visible(self) -> set[str]:
        """The pages the last `changed` saw (a crawl of its own when none ran)."""
        if self.seen is None:
            for _ in self.changed("").documents:
                pass
        return set(self.seen or ())

    # -- reading ----------------------------------------------------------------------

    def visit(self, url: str, crawl: Crawl, critical: bool) -> tuple[list[str], str | None]:
        """Read one page into `crawl`: the site links it holds, and where it redirects
        (None: nowhere). A failure of the start page stops the run; another page's is
        a problem of the run, and its document is kept as the last run left it."""
        previous = crawl.known.get(url)
        try:
            response = self.http.request(
                "GET",
                url,
                answers=GONE,
                headers=conditions(previous),
                follow_redirects=False,
            )
        except ConnectorFailed as e:
            if critical:
                raise
            crawl.problems.append(e.message)
            return crawl.keep(url, previous or Known()), None
        status = response.status_code
        if status in GONE:
            if critical:
                raise ConnectorFailed(f"the start page {url} answered {GONE[status]}")
            return [], None
        if status == 304 and previous is not None:
            return crawl.keep(url, previous), None
        if status in (301, 302, 303, 307, 308):
            return [], self.moved(url, response, critical)
        if status != 200:
            return [], None
        if critical and not is_html(response):
            kind = response.headers.get("content-type", "") or "no content type"
            raise ConnectorFailed(f"the start page {url} is no HTML page: it answered {kind}")
        links: list[str] = []
        try:
            if is_html(response):
                page = Page(url, response)
                links = [link for link in page.links() if self.on_site(link)]
                if "noindex" in page.directives:
                    return links, None
                document = page.document(self.collection)
            elif self.pdfs and is_pdf(response):
                document = pdf_document(url, response, self.collection)
            else:
                return [], None
        except ExtractionError as e:
            crawl.problems.append(f"{url}: {e}")
            return links, None
        crawl.documents.append(document)
        headers = response.headers
        crawl.keep(url, Known(headers.get("etag", ""), headers.get("last-modified", ""), links))
        return links, None

    def moved(self, url: str, response: httpx.Response, critical: bool) -> str | None:
        """Where a redirect leads, if to a page of the site; a start page that leads
        off the site (`http://` to `https://`, another host) stops the run."""
        location = response.headers.get("location", "")
        try:
            target = canonical(urllib.parse.urljoin(url, location))
        except InvalidRequest:
            target = None
        if target is not None and self.on_site(target):
            return target
        if critical:
            raise ConnectorFailed(
                f"the start page {url} redirects to {target or repr(location)}, off the site: "
                "give that URL as the source's"
            )
        return None

    def robots(self) -> urllib.robotparser.RobotFileParser:
        """The site's robots.txt: none (4xx) allows every page, a refusal (401, 403)
        none; a server failing to answer it stops the run."""
        robots = urllib.robotparser.RobotFileParser(f"{self.origin}/robots.txt")
        response = self.http.request("GET", f"{self.origin}/robots.txt", answers=ROBOTS_ANSWERS)
        if response.status_code in (401, 403):
            robots.parse(["User-agent: *", "Disallow: /"])
        elif response.status_code >= 400:
            robots.parse([])
        else:
            robots.parse(response.text.splitlines())
        return robots

    def pause(self, robots: urllib.robotparser.RobotFileParser) -> None:
        delay = robots.crawl_delay(AGENT)
        if delay:
            self.http.retries.sleep(min(float(delay), WAIT_CEILING))

    def sitemap_pages(self) -> list[str]:
        """The site's pages the sitemaps list, sitemap indexes followed (at most
        MAX_SITEMAPS files); a sitemap that cannot be read stops the run."""
        pending, read, pages = list(self.sitemaps), set[str](), list[str]()
        while pending and len(read) < MAX_SITEMAPS:
            url = pending.pop(0)
            if url in read:
                continue
            read.add(url)
            index, locations = sitemap(url, self.http.request("GET", url).content)
            if index:
                pending.extend(locations)
            else:
                pages.extend(page for page in locations if self.on_site(page))
        return pages

    def on_site(self, url: str) -> bool:
        """A page of the site (a link to a file that is no page is not followed)."""
        path = urllib.parse.urlsplit(url).path.lower()
        if self.pdfs and path.endswith(".pdf"):
            return origin_of(url) == self.origin
        return origin_of(url) == self.origin and not path.endswith(NOT_PAGES)


def is_sitemap(url: str) -> bool:
    return urllib.parse.urlsplit(url).path.lower().endswith((".xml", ".xml.gz"))


def conditions(known: Known | None) -> dict[str, str]:
    """The headers of a conditional GET of a page the last run read."""
    headers = {}
    if known is not None and known.etag:
        headers["If-None-Match"] = known.etag
    if known is not None and known.modified:
        headers["If-Modified-Since"] = known.modified
    return headers


def sitemap(url: str, content: bytes) -> tuple[bool, list[str]]:
    """Whether the file is a sitemap index, and the URLs it lists (canonical);
    ConnectorFailed when it is no sitemap."""
    if content[:2] == b"\x1f\x8b":  # a sitemap.xml.gz served as it is
        try:
            content = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(content, MAX_SITEMAP_BYTES)
        except zlib.error as e:
            raise ConnectorFailed(f"the sitemap {url} is no readable gzip file") from e
    try:
        root = ElementTree.fromstring(content)
    except ElementTree.ParseError as e:
        raise ConnectorFailed(f"the sitemap {url} is not XML: {e}") from e
    kind = local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise ConnectorFailed(f"{url} is no sitemap: its root is <{kind}>")
    found = []
    for entry in root:
        for loc in entry:
            if local(loc.tag) == "loc" and loc.text and loc.text.strip():
                try:
                    found.append(canonical(loc.text))
                except InvalidRequest:
                    continue
    return kind == "sitemapindex", found


def local(tag: str) -> str:
    return tag.rpartition("}")[2]


def read_cursor(cursor: str) -> dict[str, Known]:
    """URL -> what the last run knew of the page (the cursor lists each URL once and
    links by their place in that list)."""
    if not cursor:
        return {}
    state: dict[str, Any] = json.loads(cursor)
    urls: list[str] = state["urls"]
    return {
        urls[page["url"]]: Known(
            page.get("etag", ""), page.get("modified", ""), [urls[i] for i in page["links"]]
        )
        for page in state["pages"]
    }


def write_cursor(found: dict[str, Known]) -> str:
    urls: dict[str, int] = {}

    def place(url: str) -> int:
        return urls.setdefault(url, len(urls))

    pages = []
    for url in sorted(found):
        known = found[url]
        page: dict[str, Any] = {"url": place(url)}
        if known.etag:
            page["etag"] = known.etag
        if known.modified:
            page["modified"] = known.modified
        page["links"] = [place(link) for link in known.links]
        pages.append(page)
    return json.dumps({"urls": list(urls), "pages": pages}, separators=(",", ":"))


def whole_number(source: ConnectorSource, key: str, low: int, high: int) -> None:
    value = source.settings.get(key)
    if value is not None and not (value.isdigit() and low <= int(value) <= high):
        raise InvalidRequest(f"settings.{key}", f"must be a whole number from {low} to {high}")


def check(source: ConnectorSource) -> None:
    """InvalidRequest naming the field for a source this connector cannot read."""
    canonical(source.url)
    check_settings(source, SETTINGS, ())
    whole_number(source, "depth", 0, MAX_DEPTH)
    whole_number(source, "max_pages", 1, 1_000_000)
    if source.settings.get("pdf", "off") not in ("on", "off"):
        raise InvalidRequest("settings.pdf", "must be on or off")
    timeout = source.settings.get("timeout", "30")
    try:
        positive = float(timeout) > 0
    except ValueError:
        positive = False
    if not positive:
        raise InvalidRequest("settings.timeout", "must be a number of seconds above 0")
    for url in split(source.settings.get("sitemap", "")):
        canonical(url, "settings.sitemap")
