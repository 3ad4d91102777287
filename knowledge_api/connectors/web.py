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
import tempfile
import urllib.parse
import urllib.robotparser
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, ClassVar
from xml.etree import ElementTree

import httpx

from knowledge_api import __version__, validation
from knowledge_api.connectors.base import Window, check_settings, split
from knowledge_api.connectors.http import WAIT_CEILING, SourceHTTP
from knowledge_api.errors import ConnectorFailed, ExtractionError, InvalidRequest
from knowledge_api.ingest.extract import Extracted, html_to_markdown, pdf_file
from knowledge_api.models import ConnectorSource, Document

AGENT = "knowledge-api"
"""The name robots.txt rules are looked up by."""
USER_AGENT = f"{AGENT}/{__version__}"
SOURCE_TYPE = "wiki"
"""A site's pages are read as `ingest` reads the same pages saved as .html files."""
SETTINGS = ("depth", "max_pages", "pdf", "sitemap", "timeout")
DEPTH, MAX_DEPTH = 3, 20
MAX_PAGES = 500
HTML_TYPES = {"text/html", "application/xhtml+xml"}
GONE = {404: "not found (404)", 410: "gone (410)"}
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
FIELDS = {"source_id": "url", "content": "text", "title": "title", "metadata": "metadata"}


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
    seen: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def keep(self, url: str, known: Known) -> list[str]:
        """A page seen: read now, or unchanged since the last run (or unreadable now,
        and kept as it was); its links."""
        self.seen.add(url)
        self.found[url] = known
        return known.links


class WebConnector:
    kind: ClassVar[str] = "web"

    def __init__(self, source: ConnectorSource, collection: str) -> None:
        check(source)
        self.collection = collection
        self.start = canonical(source.url)
        self.origin = origin_of(self.start)
        self.depth = int(source.settings.get("depth", DEPTH))
        self.max_pages = int(source.settings.get("max_pages", MAX_PAGES))
        self.sitemaps = split(source.settings.get("sitemap", ""))
        self.pdfs = source.settings.get("pdf", "off") == "on"
        if is_sitemap(self.start):
            self.sitemaps.insert(0, self.start)
        self.http = client(self.origin, float(source.settings.get("timeout", "30")))
        self.seen: set[str] | None = None

    @classmethod
    def from_settings(cls, source: ConnectorSource, collection: str) -> WebConnector:
        return cls(source, collection)

    # -- the connector --------------------------------------------------------------

    def changed(self, cursor: str) -> Window:
        """Every page the site leads to; those unchanged since `cursor` (a 304) are
        seen without being read."""
        crawl = Crawl(read_cursor(cursor))
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
        return Window(crawl.documents, write_cursor(crawl.found), crawl.problems)

    def visible(self) -> set[str]:
        """The pages the last `changed` saw (a crawl of its own when none ran)."""
        if self.seen is None:
            self.changed("")
        return set(self.seen or ())

    def close(self) -> None:
        self.http.close()

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


class Page:
    """An HTML page as it was answered: its document, the links it holds, and what its
    `<meta name="robots">` asks."""

    def __init__(self, url: str, response: httpx.Response) -> None:
        self.url = url
        self.response = response
        self.tree = html_tree(response.content, url)
        self.directives = robots_directives(self.tree)

    def links(self) -> list[str]:
        """The page's links, absolute and canonical, in order, each once (none when it
        says nofollow)."""
        if self.tree is None or "nofollow" in self.directives:
            return []
        base = next((b.get("href") for b in self.tree.iter("base") if b.get("href")), None)
        base_url = urllib.parse.urljoin(self.url, str(base).strip()) if base else self.url
        found: dict[str, None] = {}
        for anchor in self.tree.iter("a", "area"):
            href = str(anchor.get("href") or "").strip()
            try:
                found[canonical(urllib.parse.urljoin(base_url, href))] = None
            except InvalidRequest:
                continue  # mailto:, javascript:, a port that is no number
        return list(found)

    def document(self, collection: str) -> Document:
        """The page's main content through the .html files' extractor: the title its
        first heading (else its <title>), its headings the sections; the document dated
        by `Last-Modified` where the server sends one."""
        charset = self.response.charset_encoding
        # the header's charset where it gives one, else the page's own <meta charset>
        extracted = html_to_markdown(self.response.text if charset else self.response.content)
        return document_of(self.url, extracted, self.response, collection, "html")


def pdf_document(url: str, response: httpx.Response, collection: str) -> Document:
    """A PDF the site links to, read as `ingest` reads PDF files: a section per page."""
    with tempfile.NamedTemporaryFile(suffix=".pdf") as file:
        file.write(response.content)
        file.flush()
        extracted = pdf_file(Path(file.name))
    return document_of(url, extracted, response, collection, "pdf")


def document_of(
    url: str, extracted: Extracted, response: httpx.Response, collection: str, kind: str
) -> Document:
    """The document of what was read at `url`, held to the rules of a document, dated
    by the answer's `Last-Modified` where it has one."""
    title = extracted.title or title_of(url)
    metadata = {**extracted.metadata, "url": url, "site": origin_of(url), "format": kind}
    try:
        fields = validation.document_fields(
            {
                "url": url,
                "text": extracted.content,
                "title": title[: validation.TITLE_MAX_LENGTH],
                "metadata": metadata,
            },
            FIELDS,
            max_content=None,
        )
    except InvalidRequest as e:
        raise ExtractionError("bad document", e.message) from e
    return Document(
        source_type=SOURCE_TYPE,
        collection=collection,
        updated_at=http_date(response.headers.get("last-modified", "")),
        **fields,
    )


def is_url(value: str) -> bool:
    """What `ingest` reads as a web page rather than a path."""
    return value.lower().startswith(("http://", "https://"))


def read_page(url: str, collection: str, source_type: str | None = None) -> Document:
    """One page, read as a web source reads it (redirects followed): ConnectorFailed
    when it cannot be reached or is gone, InvalidRequest naming the URL when it is no
    HTML page, ExtractionError when it has no main content."""
    start = canonical(url, field=url)
    http = client(origin_of(start))
    try:
        response = http.request("GET", start, answers=GONE)
    finally:
        http.close()
    if response.status_code in GONE:
        raise ConnectorFailed(f"{url} answered {GONE[response.status_code]}")
    if not is_html(response):
        kind = response.headers.get("content-type", "") or "no content type"
        raise InvalidRequest(url, f"is not an HTML page: it answered {kind}")
    document = Page(canonical(str(response.url)), response).document(collection)
    document.source_type = source_type or SOURCE_TYPE
    return document


def client(origin: str, timeout: float = 30.0) -> SourceHTTP:
    return SourceHTTP(origin, headers={"User-Agent": USER_AGENT}, timeout=timeout)


def canonical(url: str, field: str = "url") -> str:
    """The one spelling of a page's URL: scheme and host in lower case, no default port,
    no fragment, no user name, `/` for an empty path; the query kept. InvalidRequest
    naming `field` for a URL that is not http(s)."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError as e:
        raise InvalidRequest(field, "must be an http:// or https:// URL") from e
    if scheme not in ("http", "https") or not host:
        raise InvalidRequest(field, "must be an http:// or https:// URL")
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    netloc = host if port in (None, default) else f"{host}:{port}"
    return urllib.parse.urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def origin_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def is_sitemap(url: str) -> bool:
    return urllib.parse.urlsplit(url).path.lower().endswith((".xml", ".xml.gz"))


def is_html(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind:
        return kind in HTML_TYPES
    head = response.content[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def is_pdf(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return kind == "application/pdf" or response.content.startswith(b"%PDF-")


def conditions(known: Known | None) -> dict[str, str]:
    """The headers of a conditional GET of a page the last run read."""
    headers = {}
    if known is not None and known.etag:
        headers["If-None-Match"] = known.etag
    if known is not None and known.modified:
        headers["If-Modified-Since"] = known.modified
    return headers


def html_tree(content: bytes, url: str) -> Any:
    """The page parsed by lxml (None when it cannot be: trafilatura says why)."""
    from lxml import html as lxml_html

    try:
        return lxml_html.document_fromstring(content, base_url=url)
    except Exception:  # lxml rejects empty or odd documents
        return None


def robots_directives(tree: Any) -> set[str]:
    """What `<meta name="robots">` (or one naming this crawler) asks: noindex, nofollow."""
    if tree is None:
        return set()
    return {
        directive.strip().lower()
        for meta in tree.iter("meta")
        if str(meta.get("name", "")).lower() in ("robots", AGENT)
        for directive in str(meta.get("content", "")).split(",")
    } - {""}


def title_of(url: str) -> str:
    """A page without a heading or <title>: the last part of its path."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path).rstrip("/")
    return path.rpartition("/")[2] or urllib.parse.urlsplit(url).netloc


def http_date(value: str) -> str:
    """An HTTP date as ISO 8601 in UTC ('' when absent or unreadable)."""
    try:
        return parsedate_to_datetime(value).astimezone(UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError, IndexError):
        return ""


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
