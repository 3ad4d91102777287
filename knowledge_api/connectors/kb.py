"""A KB host (GET /api/kb/articles): one document per article, `source_type`
`knowledge`, updated at the article's `last_updated`.

The host's API is read here alone: by the `kb` connector kind (`sources add NAME --kind
kb --url URL`) and by the KB sync of the support collection (`sync --from`,
KNOWLEDGE_KB_SYNC_URL; usecases/kb_sync.py). An incremental read asks for the articles
`updated_since` an instant and follows the pages (`limit`, `offset`) until the host's
`total` is reached; every call goes through the connectors' HTTP client (retries,
`Retry-After`, refusals that stop the run, the token masked in what the host says).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from knowledge_api import validation
from knowledge_api.connectors.base import Kind, Window, check_settings, secret
from knowledge_api.connectors.http import Retries, SourceHTTP, bearer
from knowledge_api.errors import ConnectorFailed, InvalidRequest
from knowledge_api.models import ConnectorSource, Document

ARTICLES_PATH = "/api/kb/articles"
SOURCE_TYPE = "knowledge"
MAX_PAGES = 10000
SETTINGS = ("page_size", "timeout")
SECRETS = ("token",)


class HostUnavailable(ConnectorFailed, status=503, type="kb_host_unavailable"):
    """The host KB API could not be reached, failed, or answered nonsense."""


@dataclass(frozen=True, slots=True)
class Article:
    id: str
    title: str
    url: str
    content: str
    intent: tuple[str, ...]
    device: tuple[str, ...]
    last_updated: str
    author: str

    @classmethod
    def parse(cls, raw: Any) -> Article:
        """One article of the host's answer; ValueError names what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        meta = raw.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ValueError("metadata is not an object")
        article_id, content = raw.get("id"), raw.get("content")
        if not isinstance(article_id, str | int) or not str(article_id).strip():
            raise ValueError("id is missing")
        if not isinstance(content, str) or not content.strip():
            raise ValueError("content is missing")
        return cls(
            id=str(article_id).strip(),
            title=text_field(raw, "title"),
            url=text_field(raw, "url"),
            content=content,
            intent=labels(meta.get("intent"), "intent"),
            device=labels(meta.get("device"), "device"),
            last_updated=iso_timestamp(meta.get("last_updated")),
            author=text_field(meta, "author"),
        )

    def document(self, collection: str, host: str) -> Document:
        return Document(
            source_type=SOURCE_TYPE,
            source_id=self.id,
            content=self.content,
            title=self.title,
            metadata={
                "url": self.url,
                "intent": list(self.intent),
                "device": list(self.device),
                "last_updated": self.last_updated,
                "author": self.author,
                "kb_host": host,
            },
            collection=collection,
            updated_at=validation.utc_text(datetime.fromisoformat(self.last_updated)),
        )


def text_field(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name, "")
    if not isinstance(value, str):
        raise ValueError(f"{name} is not a string")
    return value.strip()


def labels(value: Any, name: str) -> tuple[str, ...]:
    """A list of strings (a single string is a list of one)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ValueError(f"metadata.{name} is not a list of strings")
    return tuple(item.strip() for item in items if item.strip())


def iso_timestamp(value: Any) -> str:
    """ISO 8601 in UTC with a Z; a date alone is midnight."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("metadata.last_updated is missing")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError as e:
        raise ValueError(f"metadata.last_updated is not ISO 8601: {value!r}") from e
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def article_key(raw: Any) -> str:
    return str(raw.get("id")).strip() if isinstance(raw, dict) else repr(raw)


def parse_articles(raw: Sequence[Any]) -> tuple[list[Article], list[str]]:
    """The articles of the host's answer, and each one left out with its reason."""
    articles, invalid = [], []
    for item in raw:
        try:
            articles.append(Article.parse(item))
        except ValueError as e:
            invalid.append(f"{article_key(item)}: {e}")
    return articles, invalid


class KBClient:
    """The host's article API (blocking: a sync runs it in a thread); each read opens
    its own client (`connect`) and closes it when done."""

    def __init__(self, connect: Callable[[], SourceHTTP], base_url: str, page_size: int) -> None:
        self.connect = connect
        self.base_url = base_url.rstrip("/")
        self.page_size = page_size

    @classmethod
    def at(
        cls,
        base_url: str,
        token: str,
        timeout: float,
        page_size: int,
        retries: Retries | None = None,
    ) -> KBClient:
        """A client of the host at `base_url`, sending `token` as a bearer token if any
        (httpx drops it on a redirect to another origin)."""
        headers = bearer(token)
        return cls(
            lambda: SourceHTTP(base_url, headers, retries=retries, timeout=timeout),
            base_url,
            page_size,
        )

    def fetch(self, updated_since: str = "") -> list[Any]:
        """Every article (updated since `updated_since`), page after page."""
        return [article for page in self.pages(updated_since) for article in page]

    def pages(self, updated_since: str) -> Iterator[list[Any]]:
        """The articles a page at a time, each once, with a client opened for the
        read and closed at its end."""
        http = self.connect()
        try:
            seen: set[str] = set()
            for _ in range(MAX_PAGES):
                params: dict[str, Any] = {"limit": self.page_size, "offset": len(seen)}
                if updated_since:
                    params["updated_since"] = updated_since
                page, total = self.page(http, params)
                fresh = [a for a in page if article_key(a) not in seen]
                if page and not fresh:
                    raise HostUnavailable(
                        f"{self.base_url}{ARTICLES_PATH} repeats the same page: it ignores `offset`"
                    )
                seen.update(article_key(a) for a in fresh)
                yield fresh
                if not page or len(seen) >= total:
                    return
            raise HostUnavailable(f"{self.base_url}{ARTICLES_PATH} never reached its total")
        finally:
            http.close()

    def page(self, http: SourceHTTP, params: dict[str, Any]) -> tuple[list[Any], int]:
        try:
            body = http.get_json(ARTICLES_PATH, params)
        except HostUnavailable:
            raise
        except ConnectorFailed as e:
            raise HostUnavailable(e.message) from e
        articles, total = body.get("articles") if isinstance(body, dict) else None, None
        if isinstance(body, dict):
            total = body.get("total", len(articles) if isinstance(articles, list) else None)
        if not isinstance(articles, list) or not isinstance(total, int):
            raise HostUnavailable(
                f"{self.base_url}{ARTICLES_PATH} answered without an `articles` list and `total`"
            )
        return articles, total


@dataclass(frozen=True)
class Read:
    """What one read of the host found: its articles as documents, those left out with
    their reason, and the id of every article it answered (malformed ones too)."""

    fetched: int
    documents: list[Document]
    invalid: list[str]
    present: set[str]


def read(client: KBClient, since: str, collection: str) -> Read:
    """The articles updated since `since` (all when empty), as documents of
    `collection`. Blocking: run it in a thread."""
    raw = client.fetch(since)
    articles, invalid = parse_articles(raw)
    documents = [a.document(collection, client.base_url) for a in articles]
    return Read(len(raw), documents, invalid, {article_key(item) for item in raw})


class KBConnector(Kind):
    """The `kb` kind: a KB host's articles into the source's collection."""

    kind: ClassVar[str] = "kb"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.host = source.url.rstrip("/")
        headers = bearer(secret(source, "token"))
        timeout = number(source, "timeout", 30.0)
        page_size = int(number(source, "page_size", 100))
        self.articles = KBClient(
            lambda: self.runtime.http(self.host, headers, timeout=timeout), self.host, page_size
        )

    def changed(self, since: str) -> Window:
        window = Window()
        window.documents = self.read(iso_timestamp(since) if since else "", window.problems)
        return window

    def read(self, since: str, problems: list[str]) -> Iterator[Document]:
        """The articles updated since `since` as documents, a page at a time; those
        left out go to `problems` with their reason."""
        for page in self.articles.pages(since):
            articles, invalid = parse_articles(page)
            problems.extend(invalid)
            yield from (a.document(self.collection, self.host) for a in articles)

    def visible(self) -> set[str]:
        return {article_key(raw) for raw in self.articles.fetch()}


def number(source: ConnectorSource, name: str, default: float) -> float:
    try:
        value = float(source.settings.get(name, default))
    except ValueError:
        value = 0.0
    if value <= 0:
        raise InvalidRequest(f"settings.{name}", "must be a positive number")
    return value


def check(source: ConnectorSource) -> None:
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequest("url", "must be the host's root: http(s)://HOST[:PORT][/PATH]")
    check_settings(source, SETTINGS, SECRETS)
