"""A web site as a connector source, against a real HTTP server on loopback: its own
links followed to a depth, robots.txt obeyed, sitemaps read, unchanged pages answered
304 and left alone, and the pages edited, removed or unlinked between syncs kept in
step; `ingest URL` of one page."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.connectors import http
from knowledge_api.connectors.pages import canonical
from knowledge_api.connectors.web import Known, read_cursor, write_cursor
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.cli_env import (
    cli_settings,
    listed_sources,
    source_documents,
    sync_source,
    synced_over_http,
    use_postgres,
)
from tests.conftest import make_settings
from tests.documents import pdf_bytes
from tests.test_access import bearer, error_of, make_key
from tests.web_site import Site, serving

SOURCES = "/v1/knowledge/sources"


@pytest.fixture
def environment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    monkeypatch.setattr(http, "BACKOFF_BASE", 0.01)  # a 503 without Retry-After: short waits
    return cli_settings(request, tmp_path, monkeypatch)


@pytest.fixture(params=["sqlite", "postgres"])
def backends(
    request: pytest.FixtureRequest, environment: Settings, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    if request.param == "postgres":
        use_postgres(request, monkeypatch)
    return Settings.from_env(env_file=None)


@pytest.fixture
def site() -> Iterator[Site]:
    with serving() as found:
        found.add("/robots.txt", "User-agent: *\nDisallow: /private/\n", "text/plain")
        yield found


@pytest.fixture
def elsewhere() -> Iterator[Site]:
    """Another site, which links lead to: never read."""
    with serving() as found:
        yield found


def stored(
    settings: Settings, source: str = "site", collection: str = "web"
) -> dict[str, Document]:
    return source_documents(settings, collection, source)


def sync(capsys: pytest.CaptureFixture[str], name: str = "site") -> tuple[int, str]:
    return sync_source(capsys, name)


def add(site: Site, *settings: str, url: str = "/", name: str = "site") -> None:
    more = [part for setting in settings for part in ("--set", setting)]
    argv = ["sources", "add", name, "--kind", "web", "--url", site.url + url]
    assert main([*argv, "--collection", "web", *more]) == 0


def titles(documents: dict[str, Document], site: Site) -> dict[str, str]:
    return {source_id.removeprefix(site.url): doc.title for source_id, doc in documents.items()}


def crawled(
    settings: Settings, site: Site, capsys: pytest.CaptureFixture[str], *more: str, url: str = "/"
) -> tuple[int, str, list[str]]:
    """The site added as a source with settings `more`, from `url`, and synced once: the
    sync's status and line, and the paths of the pages the source then holds, sorted."""
    add(site, *more, url=url)
    status, line = sync(capsys)
    return status, line, sorted(titles(stored(settings), site))


def test_a_site_is_crawled_and_kept_in_step_between_runs(
    backends: Settings, site: Site, elsewhere: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page(
        "/",
        "Welcome",
        "The home of the example handbook.",
        links=(
            "/guide",
            "/faq#answers",
            "/private/plans",
            f"{elsewhere.url}/offsite",
            "/old-guide",
            "/status",
            "/draft",
            "/logo.png",
            "mailto:team@example.com",
        ),
        etag='"home-1"',
    )
    site.page(
        "/guide",
        "Guide",
        "The guide explains how the zeppelin hangar is booked.",
        links=("/guide/install?lang=en",),
        modified=datetime(2026, 1, 2, tzinfo=UTC),
    )
    site.page(
        "/guide/install?lang=en",
        "Install",
        "Install the booking client with pip.",
        links=("/deep",),
        etag='"install-1"',
    )
    site.page("/deep", "Deep", "Three links away from the start: past the depth.")
    site.page("/faq", "FAQ", "Questions the readers ask about parking.", etag='"faq-1"')
    site.answer_first("/faq", 429, {"Retry-After": "1"})
    site.page("/status", "Status", "Every system is running.")  # no validators
    site.answer_first("/status", 503)
    site.page(
        "/draft", "Draft", "Not for the index.", head='<meta name="robots" content="noindex">'
    )
    site.page("/private/plans", "Plans", "robots.txt keeps this page out.")
    site.add("/old-guide", b"", "text/plain", status=301, headers={"Location": "/guide"})
    site.page("/orphan", "Orphan", "No page links here; the sitemap lists it.", etag='"o-1"')
    site.sitemap("/sitemap_index.xml", [f"{site.url}/sitemap-pages.xml"], index=True)
    site.sitemap(
        "/sitemap-pages.xml",
        [f"{site.url}/orphan", f"{site.url}/faq", f"{elsewhere.url}/listed"],
    )
    add(site, "depth=2", f"sitemap={site.url}/sitemap_index.xml")
    capsys.readouterr()

    assert sync(capsys) == (0, "web/site: 6 added, 0 updated, 0 unchanged, 0 deleted")
    docs = stored(backends)
    assert titles(docs, site) == {
        "/": "Welcome",
        "/guide": "Guide",
        "/guide/install?lang=en": "Install",
        "/faq": "FAQ",
        "/status": "Status",
        "/orphan": "Orphan",
    }
    before = titles(docs, site)
    guide = docs[f"{site.url}/guide"]
    assert guide.source_type == "wiki" and guide.metadata["url"] == f"{site.url}/guide"
    assert guide.content.startswith("# Guide\n\nThe guide explains how the zeppelin hangar")
    assert "## Details" in guide.content and "Copyright" not in guide.content
    assert guide.updated_at.startswith("2026-01-02T00:00:00")  # its Last-Modified
    assert "parking" in docs[f"{site.url}/faq"].content
    assert site.requested("/faq") == [429, 200] and site.requested("/status") == [503, 200]
    assert site.requested("/old-guide") == [301] and site.requested("/guide") == [200]
    assert site.requested("/draft") == [200]  # read, its links followed, not indexed
    for never in ("/private/plans", "/deep", "/logo.png"):
        assert site.requested(never) == []
    assert elsewhere.log == []

    # nothing changed: the pages with validators answer 304; /status, without, is read
    site.log.clear()
    assert sync(capsys) == (0, "web/site: 0 added, 0 updated, 1 unchanged, 0 deleted")
    for path in ("/", "/guide", "/guide/install?lang=en", "/faq", "/orphan"):
        assert site.requested(path) == [304], path
    assert titles(stored(backends), site) == before

    # edited, added, removed (404 and 410) and unlinked
    site.page(
        "/",
        "Welcome",
        "The home of the example handbook.",
        links=("/guide", "/faq", "/status", "/news"),
        etag='"home-2"',
    )
    site.page(
        "/guide",
        "Guide",
        "The guide now explains how the zeppelin hangar is booked and cancelled.",
        modified=datetime(2026, 2, 3, tzinfo=UTC),
    )
    site.page("/news", "News", "The hangar opens on Sundays from March.", etag='"news-1"')
    del site.resources["/faq"]
    site.add("/status", b"retired", "text/plain", status=410)
    assert sync(capsys) == (0, "web/site: 1 added, 1 updated, 1 unchanged, 3 deleted")
    docs = stored(backends)
    gone = ("/guide/install?lang=en", "/faq", "/status")  # unlinked, 404 and 410
    kept = {path: title for path, title in before.items() if path not in gone}
    assert titles(docs, site) == kept | {"/news": "News"}
    assert "booked and cancelled" in docs[f"{site.url}/guide"].content
    assert docs[f"{site.url}/guide"].updated_at.startswith("2026-02-03T00:00:00")
    assert "Sundays" in docs[f"{site.url}/news"].content

    (listed,) = listed_sources(capsys)
    assert listed["kind"] == "web" and listed["last_error"] is None and listed["documents"] == 4


def test_the_start_page_gone_stops_the_run_and_deletes_nothing(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/guide",))
    site.page("/guide", "Guide", "How the hangar is booked.")
    add(site)
    assert sync(capsys)[0] == 0
    del site.resources["/"]
    status, line = sync(capsys)
    assert status == 1
    assert line == f"web/site: sync stopped: the start page {site.url}/ answered not found (404)"
    assert len(stored(environment)) == 2


def test_robots_txt_disallowing_the_start_page_stops_the_run(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/private/", "Plans", "Kept out by robots.txt.")
    add(site, url="/private/")
    status, line = sync(capsys)
    assert status == 1 and f"robots.txt disallows {site.url}/private/ to knowledge-api" in line
    assert site.requested("/private/") == []


def test_robots_txt_crawl_delay_spaces_the_requests(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/guide",))
    site.page("/guide", "Guide", "How the hangar is booked.")
    site.add("/robots.txt", "User-agent: knowledge-api\nCrawl-delay: 1\n", "text/plain")
    add(site)
    assert sync(capsys)[0] == 0
    assert [path for path, _ in site.log] == ["/robots.txt", "/", "/guide"]
    assert site.times[2] - site.times[1] >= 0.9


def test_a_page_that_keeps_failing_is_kept_and_named_while_the_run_goes_on(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/guide",), etag='"h"')
    site.page("/guide", "Guide", "How the hangar is booked.", links=("/guide/install",))
    site.page("/guide/install", "Install", "Install the client.", etag='"i"')
    add(site)
    assert sync(capsys)[0] == 0
    for _ in range(6):  # every try of the next run
        site.answer_first("/guide", 503)
    status, line = sync(capsys)
    assert status == 0
    assert line.startswith("web/site: 0 added, 0 updated, 0 unchanged, 0 deleted; 1 left out:")
    assert f"GET {site.url}/guide: answered 503, 6 tries" in line
    # kept, and so is the page only it links to (its links are the cursor's)
    assert titles(stored(environment), site) == {
        "/": "Welcome",
        "/guide": "Guide",
        "/guide/install": "Install",
    }
    assert site.requested("/guide/install") == [200, 304]


def test_max_pages_caps_a_run_and_says_so(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home.", links=("/a", "/b", "/c"))
    for path in ("/a", "/b", "/c"):
        site.page(path, f"Page {path[1:]}", f"The page {path[1:]} of the handbook.")
    assert crawled(environment, site, capsys, "max_pages=2") == (
        0,
        "web/site: 2 added, 0 updated, 0 unchanged, 0 deleted; 1 left out: "
        "max_pages=2 reached: 2 more pages not read",
        ["/", "/a"],
    )


def test_a_sitemap_as_the_url_is_the_list_of_pages(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/one", "One", "The first page the sitemap lists.")
    site.page("/two", "Two", "The second page the sitemap lists.", links=("/three",))
    site.page("/three", "Three", "Linked from the second page.")
    site.sitemap("/sitemap.xml", [f"{site.url}/one", f"{site.url}/two#top"])
    assert crawled(environment, site, capsys, "depth=0", url="/sitemap.xml") == (
        0,
        "web/site: 2 added, 0 updated, 0 unchanged, 0 deleted",
        ["/one", "/two"],
    )
    assert site.requested("/three") == []


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--url", "ftp://example.com/"], "url"),
        (["--url", "http://example.com/", "--set", "depth=deep"], "settings.depth"),
        (["--url", "http://example.com/", "--set", "max_pages=0"], "settings.max_pages"),
        (["--url", "http://example.com/", "--set", "timeout=-1"], "settings.timeout"),
        (["--url", "http://example.com/", "--set", "sitemap=file:///s.xml"], "settings.sitemap"),
        (["--url", "http://example.com/", "--set", "folders=x"], "settings.folders"),
        (["--url", "http://example.com/", "--set", "pdf=yes"], "settings.pdf"),
    ],
)
def test_a_source_the_web_kind_cannot_read_is_refused_naming_the_field(
    environment: Settings, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    assert main(["sources", "add", "site", "--kind", "web", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {field}")


def test_ingest_of_one_page(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/guide", "Guide", "How the zeppelin hangar is booked.", links=("/other",))
    url = f"{site.url}/guide#booking"
    assert main(["ingest", url, "--collection", "web", "--meta", "team=ops"]) == 0
    assert capsys.readouterr().out.startswith("1 documents indexed")
    (doc,) = stored(environment, source=url).values()
    assert doc.source_id == f"{site.url}/guide" and doc.title == "Guide"
    assert doc.source_type == "wiki" and doc.metadata["team"] == "ops"
    assert "zeppelin hangar" in doc.content
    assert site.requested("/other") == []  # one page: its links are not followed


def test_ingest_of_a_page_that_is_missing_unreachable_or_no_html_says_so(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.add("/logo.png", b"\x89PNG\r\n\x1a\n", "image/png")
    assert main(["ingest", f"{site.url}/missing"]) == 1
    assert capsys.readouterr().err == f"error: {site.url}/missing answered not found (404)\n"
    assert main(["ingest", f"{site.url}/logo.png"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {site.url}/logo.png: is not an HTML page: it answered image/png\n"
    assert main(["ingest", "http://127.0.0.1:9/page"]) == 1
    err = capsys.readouterr().err
    unreachable = "error: GET http://127.0.0.1:9/page: unreachable (ConnectError), 6 tries"
    assert err.splitlines()[-1] == unreachable
    assert "no such file" not in err


def test_urls_are_spelled_one_way() -> None:
    assert canonical("HTTP://Example.COM:80/a/b?x=1#frag") == "http://example.com/a/b?x=1"
    assert canonical("https://example.com") == "https://example.com/"
    assert canonical("https://user@example.com:8443/p") == "https://example.com:8443/p"
    with pytest.raises(InvalidRequest):
        canonical("mailto:team@example.com")


def test_the_cursor_keeps_each_url_once() -> None:
    found = {
        "http://s/": Known('"h"', "", ["http://s/a", "http://s/b"]),
        "http://s/a": Known("", "Fri, 02 Jan 2026 00:00:00 GMT", ["http://s/", "http://s/b"]),
    }
    cursor = write_cursor(found)
    assert json.loads(cursor)["urls"] == ["http://s/", "http://s/a", "http://s/b"]
    assert read_cursor(cursor) == found


def test_a_site_is_added_and_synced_over_http(
    environment: Settings, site: Site, tmp_path: Path
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/guide",))
    site.page("/guide", "Guide", "How the zeppelin hangar is booked.")
    settings = make_settings(tmp_path, auth="keys", upload_dir=str(tmp_path / "uploads"))
    admin = bearer(asyncio.run(make_key(settings, "admin", ["admin", "read", "write"])))
    body = {"name": "site", "kind": "web", "url": f"{site.url}/", "collection": "web"}
    with TestClient(create_app(settings)) as client:
        deep = {**body, "settings": {"depth": "99"}}
        details = error_of(client.post(SOURCES, json=deep, headers=admin), 400)["details"]
        assert details["field"] == "settings.depth"
        assert details["rule"] == "must be a whole number from 0 to 20"
        created = client.post(SOURCES, json=body, headers=admin)
        assert created.status_code == 201 and created.json()["kind"] == "web", created.text
        listed = synced_over_http(client, "site", "web", admin)
        assert listed["documents"] == 2 and listed["last_error"] is None


def test_linked_pdfs_are_read_as_pdf_files_are_when_pdf_is_on(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/manual.pdf",))
    manual = pdf_bytes([["Booking the hangar."], ["Cancelling a booking."]], title="Hangar manual")
    site.add("/manual.pdf", manual, "application/pdf", etag='"m-1"')
    add(site, name="plain")
    add(site, "pdf=on")
    assert sync(capsys, "plain") == (0, "web/plain: 1 added, 0 updated, 0 unchanged, 0 deleted")
    assert site.requested("/manual.pdf") == []
    assert sync(capsys) == (0, "web/site: 2 added, 0 updated, 0 unchanged, 0 deleted")
    pdf = stored(environment)[f"{site.url}/manual.pdf"]
    assert pdf.title == "Hangar manual" and pdf.metadata["format"] == "pdf"
    assert pdf.metadata["pages"] == 2 and "## Page 2\n\nCancelling a booking." in pdf.content
    # the home page, sent without validators, is read again; the PDF answers 304
    assert sync(capsys) == (0, "web/site: 0 added, 0 updated, 1 unchanged, 0 deleted")
    assert site.requested("/manual.pdf") == [200, 304]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"status": 301, "headers": {"Location": "ELSEWHERE/"}}, "redirects to ELSEWHERE/, off"),
        ({"status": 410}, "answered gone (410)"),
        ({"content_type": "application/json"}, "is no HTML page: it answered application/json"),
    ],
)
def test_a_start_page_leading_nowhere_readable_stops_the_first_run(
    environment: Settings,
    site: Site,
    elsewhere: Site,
    capsys: pytest.CaptureFixture[str],
    answer: dict[str, object],
    reason: str,
) -> None:
    answer = dict(answer)
    if "headers" in answer:
        answer["headers"] = {"Location": f"{elsewhere.url}/"}
        reason = reason.replace("ELSEWHERE", elsewhere.url)
    site.add("/start", b"{}", str(answer.pop("content_type", "text/plain")), **answer)
    add(site, url="/start")
    status, line = sync(capsys)
    assert status == 1 and line.startswith(
        f"web/site: sync stopped: the start page {site.url}/start "
    )
    assert reason in line
    assert elsewhere.log == []


def test_a_start_page_redirecting_within_the_site_is_followed(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.add("/", b"", "text/plain", status=302, headers={"Location": "/docs/"})
    site.page("/docs/", "Docs", "The documentation of the hangar.", links=("/docs/booking",))
    site.page("/docs/booking", "Booking", "How the hangar is booked.")
    assert crawled(environment, site, capsys, "depth=1") == (
        0,
        "web/site: 2 added, 0 updated, 0 unchanged, 0 deleted",
        ["/docs/", "/docs/booking"],
    )


def test_a_full_run_reads_every_page_whole(
    environment: Settings, site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    site.page("/", "Welcome", "The home of the handbook.", links=("/guide",), etag='"h"')
    site.page("/guide", "Guide", "How the hangar is booked.", etag='"g"')
    add(site)
    assert sync(capsys)[0] == 0
    site.log.clear()
    assert main(["sources", "sync", "site", "--full"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == "web/site: 0 added, 0 updated, 2 unchanged, 0 deleted"
    assert site.requested("/") == [200] and site.requested("/guide") == [200]
