"""GitHub issues and pull requests as a connector source, against a fake GitHub REST API
on loopback: the real client pages by `Link`, waits out 429 and 503, and stops on a
wrong token, a repository gone or with its issues turned off; after each sync the store
holds what GitHub holds, on SQLite and on Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.connectors import github as connector
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.cli_env import (
    cli_environment,
    mirrored,
    refused_secret,
    refused_usage,
    source_documents,
    sync_source,
    synced_over_http,
)
from tests.conftest import make_settings
from tests.delegated import readable
from tests.github_server import TOKEN, GitHub, github, stamp
from tests.test_access import bearer, error_of, make_key

SOURCES = "/v1/knowledge/sources"
ADD = ["sources", "add", "tracker", "--kind", "github", "--collection", "eng"]


environment = cli_environment("sqlite", "postgres", GITHUB_TOKEN_FOR_TESTS=TOKEN)


@pytest.fixture
def fake() -> Iterator[GitHub]:
    with github() as state:
        state.add("acme/api", "Login times out behind the SSO proxy", "Seen on staging.",
                  labels=["bug", "sso"], assignees=["carol"], milestone="1.4")  # fmt: skip
        state.add("acme/api", "Rotate the signing keys monthly", "Adds a cron job.",
                  pull=True, merged=True, state="closed")  # fmt: skip
        state.add("acme/api", "Zeppelin maintenance logbook export", "", state="closed")
        state.add("acme/web", "Dark mode for the dashboard", "Users asked twice.")
        state.comment("acme/api#1", "The gateway timeout is 30 s; raise it to 60 s.")
        state.comment("acme/api#1", "Raised on staging, fixed.", author="carol")
        state.comment("acme/api#2", "Looks right to me.")
        state.comment("acme/api#2", "Use the KMS client here.", author="dave", review=True)
        state.review("acme/api#2", "Approved once the KMS client is used.", "APPROVED")
        state.review("acme/api#2", "", "COMMENTED")  # a review with no text of its own
        yield state


def stored(settings: Settings) -> dict[str, Document]:
    return source_documents(settings, "eng", "tracker")


def assert_mirrors(settings: Settings, fake: GitHub) -> dict[str, Document]:
    """The store holds each item GitHub has, no other, with its title, body, comments."""
    docs = stored(settings)
    for _, item, doc in mirrored(docs, fake.items, "git"):
        assert doc.title == f"#{item.number} {item.title}"
        assert item.body in doc.content
        said = [c for c in item.comments + item.verdicts + item.reviews if c["body"]]
        for comment in said:
            assert comment["body"] in doc.content
        assert doc.metadata["comments"] == len(said)
        assert doc.metadata["state"] == item.state
        assert doc.metadata["labels"] == item.labels
        assert doc.metadata["kind"] == ("pull" if item.pull else "issue")
        assert doc.created_at[:10] == item.created_at[:10] == "2026-03-01"
    return docs


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "tracker", *more)


def add(fake: GitHub, repos: str = "acme/api,acme/web", *more: str) -> int:
    return main([*ADD, "--url", fake.url, "--set", f"repos={repos}",
                 "--secret", "token=GITHUB_TOKEN_FOR_TESTS", *more])  # fmt: skip


def test_issues_and_pull_requests_follow_github_between_syncs(
    environment: Settings,
    fake: GitHub,
    waits: list[float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connector, "PER_PAGE", 2)  # the Link header pages the listings
    assert add(fake) == 0
    assert sync(capsys) == (0, "eng/tracker: 4 added, 0 updated, 0 unchanged, 0 deleted")
    docs = assert_mirrors(environment, fake)
    login = docs["acme/api#1"]
    assert login.metadata["url"] == "https://github.example.com/acme/api/issues/1"
    assert login.metadata["assignees"] == ["carol"] and login.metadata["milestone"] == "1.4"
    assert "## Comment by @carol" in login.content
    pull = docs["acme/api#2"].metadata
    assert pull["kind"] == "pull" and pull["merged"] is True and pull["state"] == "closed"
    assert "## Review comment by @dave on src/app.py:12" in docs["acme/api#2"].content
    assert "## Review by @dave (approved), " in docs["acme/api#2"].content
    assert "merged" not in login.metadata
    assert any("page=2" in r for r in fake.requests)

    assert sync(capsys) == (0, "eng/tracker: 0 added, 0 updated, 2 unchanged, 0 deleted")
    since = [r for r in fake.requests if r.startswith("/repos/acme/api/issues?") and "since" in r]
    assert "since=2026-03-01T09%3A00%3A10Z" in since[-1]  # the latest change seen there

    # edited (one at the cursor's very second), commented, deleted, transferred, added
    newest = fake.items["acme/api#2"].updated_at
    fake.edit("acme/api#2", title="Rotate the signing keys every month", updated_at=newest)
    fake.comment("acme/api#3", "The logbook moved to the new wiki.")
    moved = fake.transfer("acme/api#1", "acme/web")
    del fake.items["acme/web#1"]
    fake.add("acme/web", "Export the dashboard as PDF", "A weekly report.", pull=True)
    fake.fail("/repos/acme/api/issues", 429, {"Retry-After": "2"})
    fake.fail("/repos/acme/web/issues", 503)
    fake.fail("/repos/acme/api/issues/3/comments", 503, {"Retry-After": "1"})
    assert sync(capsys) == (0, "eng/tracker: 2 added, 2 updated, 0 unchanged, 0 deleted")
    assert fake.faults == [] and 2.0 in waits and 1.0 in waits
    # an incremental run lists no ids: what is gone goes at the next prune (or --full)
    assert sync(capsys, "--full") == (0, "eng/tracker: 0 added, 0 updated, 4 unchanged, 2 deleted")
    docs = assert_mirrors(environment, fake)
    assert moved.source_id == "acme/web#2" and "acme/api#1" not in docs
    assert "Raised on staging, fixed." in docs["acme/web#2"].content
    assert docs["acme/api#3"].metadata["comments"] == 1

    assert sync(capsys) == (0, "eng/tracker: 0 added, 0 updated, 2 unchanged, 0 deleted")


@pytest.mark.parametrize("overlap", ["600", "0"])
def test_an_item_github_listed_late_is_read_by_the_next_run(
    environment: Settings,
    fake: GitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    overlap: str,
) -> None:
    """GitHub's listing lags its writes: an item updated a minute before the last run's
    latest change, which that run did not see, is read by the next run within
    KNOWLEDGE_SYNC_OVERLAP (and missed without one)."""
    monkeypatch.setenv("KNOWLEDGE_SYNC_OVERLAP", overlap)
    assert add(fake, "acme/api") == 0
    assert sync(capsys)[0] == 0
    latest = max(i.updated_at for i in fake.items.values())
    late = fake.add("acme/api", "Cache the SSO metadata", "Listed late by the search.")
    late.created_at = late.updated_at = stamp(datetime.fromisoformat(latest) - timedelta(minutes=1))
    line = sync(capsys)[1]
    if overlap == "0":
        assert line.startswith("eng/tracker: 0 added") and late.source_id not in stored(environment)
    else:
        assert line.startswith("eng/tracker: 1 added, 0 updated")
        assert "Listed late by the search." in stored(environment)[late.source_id].content


def test_a_wrong_token_stops_the_run_and_deletes_nothing(
    environment: Settings, fake: GitHub, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake) == 0
    line, listed = refused_secret(capsys, "tracker", "GITHUB_TOKEN_FOR_TESTS", "ghp_wrong")
    assert "credentials were refused (401)" in line and "ghp_" not in line
    assert waits == []
    assert len(stored(environment)) == 4
    assert "401" in listed["last_error"] and TOKEN not in json.dumps(listed)


@pytest.mark.parametrize(
    ("repo", "reason"),
    [("acme/gone", "not found (404)"), ("acme/quiet", "the endpoint is gone (410)")],
)
def test_a_repository_gone_or_without_issues_stops_the_run(
    environment: Settings,
    fake: GitHub,
    capsys: pytest.CaptureFixture[str],
    repo: str,
    reason: str,
) -> None:
    fake.disabled.add("acme/quiet")
    assert add(fake, f"acme/api,{repo}") == 0
    status, line = sync(capsys)
    assert status == 1 and reason in line and f"/repos/{repo}/issues" in line
    assert stored(environment) == {}


def test_a_listing_that_keeps_failing_is_read_in_smaller_pages_then_stops(
    environment: Settings, fake: GitHub, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake) == 0
    assert sync(capsys)[0] == 0
    for _ in range(6):  # 100 a page keeps failing: 50 a page passes
        fake.fail("/repos/acme/web/issues", 503)
    assert sync(capsys)[0] == 0
    assert any("per_page=50" in r for r in fake.requests) and len(waits) == 5
    for _ in range(18):  # 100, 50 and 25 a page fail alike
        fake.fail("/repos/acme/web/issues", 503)
    status, line = sync(capsys)
    assert status == 1 and "answered 503" in line and line.endswith("6 tries") and len(waits) == 20
    assert len(stored(environment)) == 4


def test_a_source_is_refused_without_repositories_or_with_a_wrong_one(
    environment: Settings, fake: GitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "settings.repos" in refused_usage(capsys, *ADD, "--url", fake.url)
    assert "'acme' is not OWNER/NAME" in refused_usage(
        capsys, *ADD, "--url", fake.url, "--set", "repos=acme"
    )
    assert "https://api.github.com" in refused_usage(
        capsys, *ADD, "--url", "ftp://github.example.com", "--set", "repos=a/b"
    )


def test_a_github_source_is_added_and_synced_over_http(
    fake: GitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN_FOR_TESTS", TOKEN)
    settings = make_settings(tmp_path, auth="keys", upload_dir=str(tmp_path / "uploads"))
    admin = bearer(asyncio.run(make_key(settings, "admin", ["admin", "read", "write"])))
    body = {
        "name": "tracker",
        "kind": "github",
        "url": fake.url,
        "collection": "eng",
        "secrets": {"token": "GITHUB_TOKEN_FOR_TESTS"},
    }
    with TestClient(create_app(settings)) as client:
        refused = client.post(SOURCES, json=body, headers=admin)
        assert error_of(refused, 400)["details"]["field"] == "settings.repos"
        body["settings"] = {"repos": "acme/api,acme/web"}
        assert client.post(SOURCES, json=body, headers=admin).status_code == 201
        listed = synced_over_http(client, "tracker", "eng", admin)
        assert listed["kind"] == "github" and listed["documents"] == 4
        assert TOKEN not in json.dumps(listed) and listed["last_error"] is None
        found = client.post(
            "/v1/knowledge/query",
            json={"query": "gateway timeout SSO", "collection": "eng", "sources": ["git"]},
            headers=admin,
        ).json()
        assert found["results"][0]["source_id"] == "acme/api#1"


def test_a_private_repository_is_read_by_its_collaborators_alone(
    environment: Settings,
    fake: GitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A public repository's items are public; a private one's are read by its
    collaborators, known by their public e-mail addresses (an account showing none gets
    no access, and the run says so); a change of collaborators follows at the next run,
    and so does a repository made private, to its items the run did not read."""
    monkeypatch.setenv("KNOWLEDGE_SYNC_OVERLAP", "0")  # a run reads the newest item alone
    fake.add("acme/web", "Keyboard shortcuts", "Press ? for the list.")
    fake.visibility["acme/api"] = "private"
    fake.collaborators["acme/api"] = ["alice", "bob", "carol"]
    fake.emails.update(alice="alice@acme.example.com", bob="Bob@Acme.example.com", carol=None)
    alice, bob, mallory = "alice@acme.example.com", "bob@acme.example.com", "mallory@example.com"
    assert add(fake) == 0
    status, line = sync(capsys)
    assert status == 0 and "1 GitHub account(s) show no e-mail address" in line and "carol" in line
    docs = stored(environment)
    api = {s for s in docs if s.startswith("acme/api#")}
    web = set(docs) - api
    assert {docs[s].acl for s in api} == {("group:github:acme/api",)}
    assert {docs[s].acl for s in web} == {("public",)} and len(web) == 2
    seen = readable(environment, "eng", "tracker", (alice, bob, "carol", mallory))
    assert seen == {alice: set(docs), bob: set(docs), "carol": web, mallory: web}

    fake.collaborators["acme/api"] = ["alice", "dave"]
    fake.emails["dave"] = "dave@acme.example.com"
    assert sync(capsys)[0] == 0
    seen = readable(environment, "eng", "tracker", (bob, "dave@acme.example.com"))
    assert seen == {bob: web, "dave@acme.example.com": set(docs)}
    assert "/users/alice" in fake.requests

    # made private: the item the run reads again (GitHub's `since` takes in the newest)
    # and the one it does not read close alike
    fake.visibility["acme/web"] = "private"
    fake.collaborators["acme/web"] = ["alice"]
    assert sync(capsys) == (0, "eng/tracker: 0 added, 1 updated, 1 unchanged, 0 deleted")
    assert {d.acl for s, d in stored(environment).items() if s in web} == {
        ("group:github:acme/web",)
    }
    seen = readable(environment, "eng", "tracker", (alice, mallory))
    assert seen == {alice: set(docs), mallory: set()}


def test_collaborators_may_be_known_by_their_logins(
    environment: Settings, fake: GitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.visibility["acme/web"] = "internal"
    fake.collaborators["acme/web"] = ["Carol"]
    assert add(fake, "acme/web", "--set", "identity=login") == 0
    assert sync(capsys)[0] == 0
    assert readable(environment, "eng", "tracker", ("carol", "alice")) == {
        "carol": {"acme/web#1"},
        "alice": set(),
    }
    assert not any(path.startswith("/users/") for path in fake.requests)
