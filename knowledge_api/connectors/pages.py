"""One web page as the web connector and `ingest URL` read it: its URL spelled one way,
its main content through the extractor of .html files (a PDF through that of PDF
files), the links it holds and what its `<meta name="robots">` asks.
"""

from __future__ import annotations

import tempfile
import urllib.parse
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from knowledge_api import __version__, validation
from knowledge_api.connectors.base import Runtime
from knowledge_api.connectors.http import SourceHTTP
from knowledge_api.errors import ConnectorFailed, ExtractionError, InvalidRequest
from knowledge_api.ingest.extract import Extracted, html_to_markdown, pdf_file
from knowledge_api.models import Document

AGENT = "knowledge-api"
"""The name robots.txt rules are looked up by."""
USER_AGENT = f"{AGENT}/{__version__}"
SOURCE_TYPE = "wiki"
"""A site's pages are read as `ingest` reads the same pages saved as .html files."""
HTML_TYPES = {"text/html", "application/xhtml+xml"}
GONE = {404: "not found (404)", 410: "gone (410)"}
FIELDS = {
    "source_id": "url",
    "content": "text",
    "title": "title",
    "metadata": "metadata",
    "created_at": "created",
    "updated_at": "last_modified",
}
"""A page's document as its errors name its fields."""


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
                "last_modified": http_date(response.headers.get("last-modified", "")) or None,
            },
            FIELDS,
            max_content=None,
        )
    except InvalidRequest as e:
        raise ExtractionError("bad document", e.message) from e
    return Document(
        source_type=SOURCE_TYPE,
        collection=collection,
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


def client(origin: str, timeout: float = 30.0, runtime: Runtime | None = None) -> SourceHTTP:
    return (runtime or Runtime()).http(origin, headers={"User-Agent": USER_AGENT}, timeout=timeout)


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


def is_html(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind:
        return kind in HTML_TYPES
    head = response.content[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def is_pdf(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return kind == "application/pdf" or response.content.startswith(b"%PDF-")


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
