"""KB sync: pull the host's articles (GET /api/kb/articles) into the support collection.

An incremental sync asks for the articles updated since the newest `last_updated`
already stored and follows the pages (`limit`, `offset`) until the host's `total` is
reached; a full sync asks for everything and then removes the synced articles the host
no longer has. Articles go through the ordinary ingestion, so an unchanged article is
neither embedded nor written again.

When the host is unreachable or fails, nothing is removed: the index keeps serving
what it has, and `SyncState` (shown by /health) says since when it is stale.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowledge_api.config.fields import Secret
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.ledger import MAX_AUDITED_IDS, Actor, changes, local_user
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases.sources import MassDeleteRefused, MirrorPlan

log = logging.getLogger("knowledge_api.kb_sync")
ARTICLES_PATH = "/api/kb/articles"
SOURCE_TYPE = "knowledge"
MAX_PAGES = 10000


class HostUnavailable(KnowledgeAPIError, status=503, type="kb_host_unavailable"):
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


# -- the host --------------------------------------------------------------------------


class KBClient:
    """The host's article API over HTTP (blocking; the sync runs it in a thread)."""

    def __init__(self, base_url: str, token: Secret, timeout: float, page_size: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.page_size = page_size

    def fetch(self, updated_since: str = "") -> list[Any]:
        """Every article (updated since `updated_since`), page after page."""
        articles: list[Any] = []
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params: dict[str, Any] = {"limit": self.page_size, "offset": len(articles)}
            if updated_since:
                params["updated_since"] = updated_since
            page, total = self.page(params)
            fresh = [a for a in page if article_key(a) not in seen]
            if page and not fresh:
                raise HostUnavailable(
                    f"{self.base_url}{ARTICLES_PATH} repeats the same page: it ignores `offset`"
                )
            seen.update(article_key(a) for a in fresh)
            articles.extend(fresh)
            if not page or len(articles) >= total:
                return articles
        raise HostUnavailable(f"{self.base_url}{ARTICLES_PATH} never reached its total")

    def page(self, params: dict[str, Any]) -> tuple[list[Any], int]:
        url = f"{self.base_url}{ARTICLES_PATH}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token.get()}")
        try:
            with OPENER.open(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise HostUnavailable(
                f"{self.base_url}{ARTICLES_PATH} answered {e.code}: {host_message(e)}",
                status=e.code,
            ) from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise HostUnavailable(f"{self.base_url} is unreachable: {reason}") from e
        except ValueError as e:
            raise HostUnavailable(f"{self.base_url}{ARTICLES_PATH} did not answer JSON") from e
        articles, total = body.get("articles") if isinstance(body, dict) else None, None
        if isinstance(body, dict):
            total = body.get("total", len(articles) if isinstance(articles, list) else None)
        if not isinstance(articles, list) or not isinstance(total, int):
            raise HostUnavailable(
                f"{self.base_url}{ARTICLES_PATH} answered without an `articles` list and `total`"
            )
        return articles, total


class SameOriginCredentials(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but send the token only to the origin it was configured for:
    urllib would otherwise carry Authorization to whatever host a 302 names."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and origin(newurl) != origin(req.full_url):
            follow.remove_header("Authorization")
        return follow


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


OPENER = urllib.request.build_opener(SameOriginCredentials)


def article_key(raw: Any) -> str:
    return str(raw.get("id")).strip() if isinstance(raw, dict) else repr(raw)


def host_message(error: urllib.error.HTTPError) -> str:
    """The host's own error message (its JSON `message`), or the HTTP reason."""
    try:
        body = json.loads(error.read() or b"{}")
    except (ValueError, OSError):
        body = {}
    finally:
        error.close()
    message = body.get("message") or body.get("error") if isinstance(body, dict) else None
    return str(message or error.reason)


# -- syncing ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncReport:
    full: bool
    updated_since: str
    fetched: int
    indexed: int
    embedded: int
    unchanged: int
    removed: int
    invalid: tuple[str, ...]
    seconds: float

    def line(self) -> str:
        kind = "full sync" if self.full else f"incremental sync since {self.updated_since or '-'}"
        text = (
            f"{kind}: {self.fetched} articles fetched, {self.indexed} indexed "
            f"({self.embedded} passages embedded), {self.unchanged} unchanged, "
            f"{self.removed} removed in {self.seconds:.1f}s"
        )
        if self.invalid:
            text += f"; {len(self.invalid)} invalid skipped: {'; '.join(self.invalid[:5])}"
        return text


@dataclass
class SyncState:
    """What /health says about the sync: when it last worked, since when it fails."""

    host: str
    last_success: str = ""
    failing_since: str = ""
    last_error: str = ""
    last_report: SyncReport | None = field(default=None, repr=False)

    def succeeded(self, report: SyncReport) -> None:
        self.last_success, self.failing_since, self.last_error = now_iso(), "", ""
        self.last_report = report

    def failed(self, error: str) -> None:
        self.failing_since = self.failing_since or now_iso()
        self.last_error = error

    def health(self) -> dict[str, Any]:
        if self.failing_since:
            status = "stale"
        elif self.last_success:
            status = "ok"
        else:
            status = "pending"
        report: dict[str, Any] = {"status": status, "host": self.host}
        if self.last_success:
            report["last_success"] = self.last_success
        if self.failing_since:
            report["stale_since"] = self.last_success or "never synced"
            report["failing_since"] = self.failing_since
            report["error"] = self.last_error
        if self.last_report is not None:
            report["last_sync"] = self.last_report.line()
        return report


PERIODIC = Actor("kb-sync")
"""The periodic sync, as the audit trail names it."""


class KBSync:
    def __init__(
        self,
        service: KnowledgeService,
        client: KBClient,
        collection: str,
        actor: Actor = PERIODIC,
    ) -> None:
        self.service = service
        self.client = client
        self.collection = collection
        self.state = SyncState(client.base_url)
        self.actor = actor
        """Who the audit trail says wrote: the periodic sync, or who ran `sync`."""

    @classmethod
    def from_service(cls, service: KnowledgeService, actor: Actor = PERIODIC) -> KBSync:
        s = service.settings
        client = KBClient(s.kb_sync_url, s.kb_sync_token, s.kb_sync_timeout, s.kb_sync_page_size)
        return cls(service, client, s.support_collection, actor)

    async def run(self, full: bool = False, allow_mass_delete: bool = False) -> SyncReport:
        """One sync; on failure nothing stored changes and the error is re-raised. A full
        sync removing more than KNOWLEDGE_PRUNE_MAX_FRACTION of the synced articles is
        refused (MassDeleteRefused) unless `allow_mass_delete`."""
        try:
            report = await self._run(full, allow_mass_delete)
        except KnowledgeAPIError as e:
            self.state.failed(e.message)
            raise
        self.state.succeeded(report)
        return report

    async def _run(self, full: bool, allow_mass_delete: bool) -> SyncReport:
        started = time.perf_counter()
        stored = await self.stored_articles()
        since = "" if full else max((ts for ts in stored.values() if ts), default="")
        raw = await asyncio.to_thread(self.client.fetch, since)
        articles, invalid = parse_articles(raw)
        host = self.client.base_url
        plan = MirrorPlan(self.collection, host, stored=len(stored))
        if full:
            present = {article_key(item) for item in raw}  # malformed ones are kept too
            plan.deleted = {
                doc_id: source_id
                for doc_id, source_id in await self.stored_ids()
                if source_id not in present
            }
            settings = self.service.settings
            plan.check_deletions(settings.prune_max_fraction, allow_mass_delete)
        documents = [a.document(self.collection, host) for a in articles]
        acl = await self.service.keys.source_acl(self.collection, host)
        for doc in documents:
            doc.acl = doc.acl if acl is None else acl
        summary = await self.service.ingest(documents, source=host)
        removed = (
            await self.service.store.delete_documents(list(plan.deleted)) if plan.deleted else 0
        )
        await self.service.store.record_source(self.collection, host)
        if summary.documents or removed:
            await self.service.audit(
                self.actor,
                "kb sync full" if full else "kb sync",
                self.collection,
                changes(
                    documents,
                    summary,
                    removed=removed,
                    removed_ids=list(plan.deleted)[:MAX_AUDITED_IDS],
                ),
            )
        return SyncReport(
            full=full,
            updated_since=since,
            fetched=len(raw),
            indexed=summary.documents,
            embedded=summary.embedded,
            unchanged=summary.skipped,
            removed=removed,
            invalid=tuple(invalid),
            seconds=time.perf_counter() - started,
        )

    async def stored_articles(self) -> dict[str, str]:
        """source id -> last_updated of the articles this host synced before."""
        return {
            doc.source_id: str(doc.metadata.get("last_updated", "")) async for doc in self._synced()
        }

    async def stored_ids(self) -> list[tuple[str, str]]:
        return [(doc.id, doc.source_id) async for doc in self._synced()]

    async def _synced(self) -> AsyncIterator[Document]:
        host = self.client.base_url
        async for doc in self.service.iter_documents(self.collection):
            if doc.source_type == SOURCE_TYPE and doc.metadata.get("kb_host") == host:
                yield doc


def parse_articles(raw: Sequence[Any]) -> tuple[list[Article], list[str]]:
    articles, invalid = [], []
    for item in raw:
        try:
            articles.append(Article.parse(item))
        except ValueError as e:
            invalid.append(f"{article_key(item)}: {e}")
    return articles, invalid


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- entry points ----------------------------------------------------------------------


async def sync_command(
    service: KnowledgeService,
    full: bool,
    allow_mass_delete: bool = False,
    acl: tuple[str, ...] | None = None,
) -> int:
    """`knowledge-api sync --from URL`: one sync, a summary line, exit status 1 on failure;
    with `acl`, the host's articles take that access list from now on."""
    sync = KBSync.from_service(service, local_user())
    if acl is not None:
        await service.keys.set_source_acl(sync.collection, sync.client.base_url, acl)
    try:
        report = await sync.run(full, allow_mass_delete)
    except MassDeleteRefused as e:
        print(f"sync stopped: {e.message}", flush=True)
        return 1
    except HostUnavailable as e:
        count = len(await sync.stored_articles())
        print(f"sync failed: {e.message}; the index keeps its {count} articles", flush=True)
        return 1
    print(report.line())
    return 0


@asynccontextmanager
async def periodic_sync(service: KnowledgeService) -> AsyncIterator[KBSync | None]:
    """While the service runs: a full sync at start, then an incremental one every
    KNOWLEDGE_KB_SYNC_INTERVAL (every KNOWLEDGE_KB_SYNC_FULL_EVERY-th one full).
    Nothing runs when KNOWLEDGE_KB_SYNC_URL is empty."""
    if not service.settings.kb_sync_url:
        yield None
        return
    sync = KBSync.from_service(service)
    service.health_reports["kb_sync"] = sync.state.health
    task = asyncio.create_task(sync_forever(sync), name="kb-sync")
    try:
        yield sync
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def sync_forever(sync: KBSync) -> None:
    settings = sync.service.settings
    runs = 0
    while True:
        full = runs % settings.kb_sync_full_every == 0
        try:
            log.info("%s", (await sync.run(full)).line())
        except KnowledgeAPIError as e:
            log.warning("KB sync failed, serving the articles already indexed: %s", e.message)
        except Exception as e:  # a bug must not end the periodic sync; /health shows it
            log.exception("KB sync failed unexpectedly")
            sync.state.failed(f"unexpected error: {type(e).__name__}")
        runs += 1
        await asyncio.sleep(settings.kb_sync_interval)
