"""Confluence as a connector source, against a fake Confluence on loopback
(tests/atlassian_server.py): one document per page with its ancestors as the section
path, its labels, space and comments; attachments read by the extractors as documents
of their own; kept in step as pages are added, edited, moved and deleted, comments and
attachments come and go; Cloud and Server; the failures a run rides out or stops on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from knowledge_api.cli import main
from knowledge_api.connectors.base import Runtime
from knowledge_api.connectors.confluence import ConfluenceConnector
from knowledge_api.connectors.http import Retries
from knowledge_api.models import ConnectorSource, Document
from knowledge_api.settings import Settings
from tests.atlassian_server import (
    PAT,
    SITE_ZONE,
    TOKEN,
    Atlassian,
    Attachment,
    Comment,
    Confluence,
    Page,
    serving,
    source_args,
)
from tests.cli_env import cli_environment, listed_sources, source_documents, sync_source
from tests.delegated import readable
from tests.documents import pdf_bytes, write_docx, write_pptx

NOW = datetime.now(UTC).replace(microsecond=0)
DAYS = [NOW - timedelta(days=40 - n) for n in range(10)]
HTML_PAGE = (
    b"<html><head><title>Status page</title></head><body><main><h1>Status page</h1>"
    b"<p>The status page shows every region's health and the open incidents, refreshed "
    b"each minute from the probes in three regions.</p></main></body></html>"
)


environment = cli_environment("sqlite", "postgres", WIKI_TOKEN=TOKEN, WIKI_PAT=PAT)


sqlite_only = cli_environment(WIKI_TOKEN=TOKEN, WIKI_PAT=PAT)


def wiki(tmp_path: Path, context: str = "/wiki") -> Confluence:
    site = Confluence(context)
    docx = write_docx(tmp_path / "notes.docx").read_bytes()
    pptx = write_pptx(tmp_path / "deck.pptx").read_bytes()
    pdf = pdf_bytes([["Rollback takes eleven minutes per region."]], "Rollback timings")
    pages = [
        Page(
            "100",
            "ENG",
            "Engineering Home",
            "<h1>Welcome</h1><p>Start here to find the "
            "runbooks.</p><table><tbody><tr><th>Team</th><th>Lead</th></tr><tr><td>API</td>"
            "<td>Grace</td></tr></tbody></table>",
            DAYS[0],
            DAYS[0],
        ),
        Page(
            "101",
            "ENG",
            "Runbooks",
            "<p>Every runbook of the platform.</p><ol><li>read "
            "the alert</li><li>open the dashboard</li></ol><ac:structured-macro "
            'ac:name="code"><ac:parameter ac:name="language">bash</ac:parameter>'
            "<ac:plain-text-body><![CDATA[kubectl rollout undo deploy/api]]>"
            "</ac:plain-text-body></ac:structured-macro>",
            DAYS[1],
            DAYS[1],
            parent="100",
            labels=["runbook", "oncall"],
            comments=[
                Comment("Grace Hopper", DAYS[1] + timedelta(hours=n), f"Reviewed step {n}.")
                for n in range(3)
            ],
            attachments=[
                Attachment("rollback.pdf", "application/pdf", pdf, DAYS[1]),
                Attachment(
                    "notes.docx",
                    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                    docx,
                    DAYS[1],
                ),
                Attachment(
                    "deck.pptx",
                    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                    pptx,
                    DAYS[1],
                ),
                Attachment("status.html", "text/html", HTML_PAGE, DAYS[1]),
                Attachment("photo.png", "image/png", b"\x89PNG", DAYS[1]),
            ],
        ),
        Page(
            "102",
            "ENG",
            "Database failover",
            "<h2>When</h2><p>The primary stops "
            "answering for a minute.</p><h2>How</h2><ul><li>promote the replica</li>"
            "</ul>",
            DAYS[2],
            DAYS[2],
            parent="101",
        ),
        Page("200", "OPS", "On-call", "<p>The rota changes every Monday.</p>", DAYS[3], DAYS[3]),
        Page(
            "201",
            "OPS",
            "Pager setup",
            "<p>Install the pager app.</p>",
            DAYS[4],
            DAYS[4],
            parent="200",
        ),
        Page("300", "HR", "Holidays", "<p>Not in the synced spaces.</p>", DAYS[5], DAYS[5]),
    ]
    site.pages = {page.id: page for page in pages}
    return site


def add_source(url: str, *more: str) -> int:
    return main(
        [*source_args("wiki", "confluence", url, "WIKI_TOKEN"), "--set", "spaces=ENG,OPS", *more]
    )


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "wiki", *more)


def stored(settings: Settings) -> dict[str, Document]:
    return source_documents(settings, "ops", "wiki")


KNOWN = (".pdf", ".docx", ".pptx", ".html")


def holds_what_confluence_holds(settings: Settings, site: Confluence) -> dict[str, Document]:
    docs = stored(settings)
    pages = [p for p in site.pages.values() if p.space in ("ENG", "OPS")]
    files = [
        f"{p.id}/attachments/{a.name}"
        for p in pages
        for a in p.attachments
        if a.name.endswith(KNOWN)
    ]
    assert sorted(docs) == sorted([p.id for p in pages] + files)
    for page in pages:
        doc = docs[page.id]
        ancestors = site.ancestors(page)
        assert doc.source_type == "wiki" and doc.title == page.title
        assert doc.metadata["space"] == page.space
        assert doc.metadata.get("ancestors", []) == [a.title for a in ancestors]
        assert doc.metadata["labels"] == page.labels
        assert doc.metadata.get("comments", 0) == len(page.comments)
        assert doc.content.count("Comment by ") == len(page.comments)
        for comment in page.comments:
            assert comment.body in doc.content
        path = " > ".join(a.title for a in ancestors)
        assert all(chunk.section.startswith(path) for chunk in doc.chunks)
        assert doc.updated_at.startswith(page.updated.strftime("%Y-%m-%dT%H:%M:%S"))
    for name in files:
        assert docs[name].metadata["page_id"] == name.split("/")[0]
        assert docs[name].metadata["url"].startswith(f"{site.url}{site.context}/download/")
    return docs


def test_a_confluence_site_is_kept_in_step_sync_after_sync(
    environment: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = Atlassian(cloud=True)
    site = state.confluence = wiki(tmp_path)
    with serving(state):
        site.url = state.url
        assert add_source(f"{state.url}/wiki", "--set", f"time_zone={SITE_ZONE}") == 0
        assert sync(capsys) == (0, "ops/wiki: 9 added, 0 updated, 0 unchanged, 0 deleted")
        docs = holds_what_confluence_holds(environment, site)
        failover = docs["102"]
        assert failover.content.startswith("# Engineering Home\n\n## Runbooks\n\n#### When\n")
        assert {c.section for c in failover.chunks} == {
            "Engineering Home > Runbooks > When",
            "Engineering Home > Runbooks > How",
        }
        runbooks = docs["101"].content
        assert "1. read the alert\n2. open the dashboard" in runbooks
        assert "```bash\nkubectl rollout undo deploy/api\n```" in runbooks
        assert "## Comments\n\n### Comment by Grace Hopper, " in runbooks
        assert "| Team | Lead |\n|---|---|\n| API | Grace |" in docs["100"].content
        assert docs["101"].metadata["url"] == f"{state.url}/wiki/spaces/ENG/pages/101"
        assert "eleven minutes per region" in docs["101/attachments/rollback.pdf"].content
        assert "Use the tarball on Linux hosts." in docs["101/attachments/notes.docx"].content
        assert "Search ships in March." in docs["101/attachments/deck.pptx"].content
        assert "refreshed each minute" in docs["101/attachments/status.html"].content
        assert "Holidays" not in {doc.title for doc in docs.values()}
        (listed,) = listed_sources(capsys)
        started = datetime.fromisoformat(str(listed["cursor"]))

        # a page added, one edited at the window's edge (before the previous run's start,
        # which its search missed), one moved to another space and parent, one deleted;
        # a comment on an old page, an attachment added to an old page and one removed
        state.calls.clear()
        later = datetime.now(UTC).replace(microsecond=0)
        pages = site.pages
        pages["103"] = Page(
            "103",
            "ENG",
            "Cache warmup",
            "<p>Warm the cache after deploys.</p>",
            later,
            later,
            parent="100",
        )
        pages["200"].body = "<p>The rota changes every Monday at nine.</p>"
        pages["200"].updated = started - timedelta(minutes=9)
        pages["102"].space, pages["102"].parent, pages["102"].updated = "OPS", "200", later
        del pages["201"]
        pages["101"].comments.append(Comment("Ada Lovelace", later, "Step 4 is obsolete."))
        pages["101"].attachments = [a for a in pages["101"].attachments if a.name != "deck.pptx"]
        pages["100"].attachments.append(Attachment("arch.html", "text/html", HTML_PAGE, later))
        assert sync(capsys) == (0, "ops/wiki: 2 added, 3 updated, 4 unchanged, 0 deleted")
        since = (started - timedelta(minutes=10)).astimezone(ZoneInfo(SITE_ZONE))
        windows = [c.params["cql"] for c in state.calls if c.path.endswith("/content/search")]
        assert windows[0] == (
            f'type = page AND space in ("ENG","OPS") AND lastmodified >= "{since:%Y-%m-%d %H:%M}"'
        )
        # an incremental run lists no ids: what is gone goes at the next prune (or --full)
        full = sync(capsys, "--full")
        assert full == (0, "ops/wiki: 0 added, 0 updated, 9 unchanged, 2 deleted")
        docs = holds_what_confluence_holds(environment, site)
        assert "every Monday at nine" in docs["200"].content
        assert docs["102"].content.startswith("# On-call\n\n### When\n")
        assert docs["101"].metadata["comments"] == 4

        assert sync(capsys) == (0, "ops/wiki: 0 added, 0 updated, 9 unchanged, 0 deleted")
        holds_what_confluence_holds(environment, site)


def test_confluence_server_without_a_time_zone_and_the_failures_of_a_run(
    sqlite_only: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Server at its root with a personal access token; no time zone given, the window
    is written as UTC-12's clock, which the site (UTC+5:30) reads as earlier than meant.
    A 429 and a 503 are waited out; a wrong token stops the run and deletes nothing."""
    state = Atlassian(cloud=False)
    site = state.confluence = wiki(tmp_path, context="")
    with serving(state):
        site.url = state.url
        assert (
            main(
                [
                    *source_args("wiki", "confluence", state.url, "WIKI_PAT", server=True, user=""),
                    "--set",
                    'cql=label = "runbook"',
                ]
            )
            == 0
        )
        state.fail("/rest/api/content/search", 429, headers={"Retry-After": "1"})
        state.fail("/rest/api/content/101/child/comment", 503)
        assert sync(capsys) == (0, "ops/wiki: 5 added, 0 updated, 0 unchanged, 0 deleted")
        docs = stored(sqlite_only)
        attached = ["deck.pptx", "notes.docx", "rollback.pdf", "status.html"]
        assert sorted(docs) == ["101"] + [f"101/attachments/{name}" for name in attached]
        assert docs["101"].metadata["comments"] == 3
        limited = next(i for i, c in enumerate(state.calls) if c.status == 429)
        assert state.calls[limited + 1].at - state.calls[limited].at >= 1.0
        assert [c.status for c in state.calls if c.path.endswith("101/child/comment")][:2] == [
            503,
            200,
        ]
        (listed,) = listed_sources(capsys)
        started = datetime.fromisoformat(str(listed["cursor"]))

        site.pages["101"].body = "<p>Every runbook of the platform, reviewed.</p>"
        site.pages["101"].updated = started - timedelta(minutes=5)
        state.calls.clear()
        assert sync(capsys) == (0, "ops/wiki: 0 added, 1 updated, 4 unchanged, 0 deleted")
        assert "reviewed" in stored(sqlite_only)["101"].content
        since = (started - timedelta(minutes=10)).astimezone(ZoneInfo("Etc/GMT+12"))
        first = next(c for c in state.calls if c.path.endswith("/content/search"))
        assert first.params["cql"].endswith(f'lastmodified >= "{since:%Y-%m-%d %H:%M}"')

        monkeypatch.setenv("WIKI_PAT", "revoked-pat-value")
        status, line = sync(capsys)
        assert status == 1 and "credentials were refused (401)" in line
        assert "revoked-pat-value" not in line
        assert len(stored(sqlite_only)) == 5


def test_settings_a_confluence_source_refuses(
    sqlite_only: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "sources",
        "add",
        "wiki",
        "--kind",
        "confluence",
        "--url",
        "https://acme.atlassian.net",
        "--secret",
        "token=T",
    ]
    assert main([*base, "--set", "time_zone=Mars/Olympus"]) == 2
    assert "settings.time_zone" in capsys.readouterr().err
    assert main([*base, "--set", "jql=project = OPS"]) == 2
    assert "settings.jql" in capsys.readouterr().err
    assert main([*base, "--set", "spaces=ENG"]) == 0


def test_a_cloud_site_given_without_its_path_is_read_under_wiki() -> None:
    def site(url: str, **settings: str) -> str:
        source = ConnectorSource("confluence", url, settings, {"token": "T"})
        return ConfluenceConnector(source, "ops").site

    assert site("https://acme.atlassian.net") == "https://acme.atlassian.net/wiki"
    assert site("https://acme.atlassian.net/wiki/") == "https://acme.atlassian.net/wiki"
    assert site("https://wiki.example.com") == "https://wiki.example.com"
    assert site("https://example.com/confluence") == "https://example.com/confluence"
    assert site("http://10.0.0.5:8090", deployment="cloud") == "http://10.0.0.5:8090/wiki"


def test_a_page_of_results_that_keeps_failing_is_asked_again_smaller(tmp_path: Path) -> None:
    state = Atlassian(cloud=True)
    site = state.confluence = wiki(tmp_path)
    state.fail(
        "/wiki/rest/api/content/search",
        500,
        times=100,
        when=lambda params: int(params.get("limit", "0")) > 25,
    )
    waits: list[float] = []
    with serving(state), pytest.MonkeyPatch.context() as patch:
        site.url = state.url
        patch.setenv("WIKI_PAT", PAT)
        settings = {"deployment": "cloud"}
        source = ConnectorSource("confluence", f"{state.url}/wiki", settings, {"token": "WIKI_PAT"})
        connector = ConfluenceConnector(
            source, "ops", Runtime(Retries(attempts=1, sleep=waits.append))
        )
        try:
            documents = list(connector.changed("").documents)  # read as the pages come
        finally:
            connector.close()
    pages = sorted(d.source_id for d in documents if "/" not in d.source_id)
    assert pages == sorted(site.pages)
    asked = [c.params["limit"] for c in state.calls if c.path.endswith("/content/search")]
    assert asked[:3] == ["50", "50", "25"] and set(asked[3:]) == {"2"}
    assert len(waits) == 1


def test_pages_are_read_by_those_their_space_and_restrictions_let_view(
    environment: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A page is read by its space's readers who pass the view restrictions of the page
    and of each restricted ancestor (a child of a restricted page inherits them), its
    attachments alike; a space open to anonymous users is public; a change of who is in
    a restriction or a group follows at the next run, with no page edited."""
    state = wiki(tmp_path)
    granted = state.permissions
    granted.site.accounts = {"acc-ann": "ann@acme.example.com", "acc-bob": "bob@acme.example.com",
                             "acc-cy": "cy@acme.example.com"}  # fmt: skip
    granted.site.groups = {"engineers": ["acc-ann", "acc-bob", "acc-cy"], "sre": ["acc-bob"]}
    granted.readers = {"ENG": {"groups": ["engineers"]}, "OPS": {"anonymous": True}}
    granted.restricted = {"101": {"user": ["acc-ann"], "group": ["sre"]},
                          "102": {"user": ["acc-bob", "acc-cy"]}}  # fmt: skip
    ann, bob, cy = (f"{name}@acme.example.com" for name in ("ann", "bob", "cy"))
    jira = Atlassian()
    jira.confluence = state
    with serving(jira) as server:
        state.url = server.url
        assert add_source(server.url + "/wiki") == 0
        assert sync(capsys)[0] == 0
        docs = stored(environment)
        runbooks = {s for s in docs if s == "101" or s.startswith("101/")}
        assert len(runbooks) == 5 and {docs[s].acl for s in runbooks} == {
            ("group:confluence:ENG:101",)
        }
        assert docs["102"].acl == ("group:confluence:ENG:102",)
        assert docs["100"].acl == ("group:confluence:ENG",)
        assert docs["200"].acl == docs["201"].acl == ("public",)
        public = {"200", "201"}
        seen = readable(environment, "ops", "wiki", (ann, bob, cy, "mallory@example.com"))
        assert seen == {ann: {"100", *runbooks, *public}, bob: {"100", *runbooks, "102", *public},
                        cy: {"100", *public}, "mallory@example.com": public}  # fmt: skip

        granted.site.groups["sre"] = []
        granted.restricted["101"]["user"].append("acc-cy")
        assert sync(capsys) == (0, "ops/wiki: 0 added, 0 updated, 0 unchanged, 0 deleted")
        seen = readable(environment, "ops", "wiki", (ann, bob, cy))
        assert seen == {ann: {"100", *runbooks, *public}, bob: {"100", *public},
                        cy: {"100", *runbooks, "102", *public}}  # fmt: skip
