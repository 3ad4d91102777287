"""An IMAP mailbox as a connector source, against a real Dovecot: threads as documents,
incremental runs by UID, expunged messages pruned under the guard, a changed
UIDVALIDITY read again without duplicates, an access token sent by XOAUTH2 (checked
by a real introspection endpoint), and the password or token never kept."""

from __future__ import annotations

import asyncio
import json
from email.message import EmailMessage
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService
from tests.cli_env import (
    cli_home,
    listed_sources,
    refused_secret,
    refused_usage,
    source_documents,
    sync_source,
)
from tests.conftest import make_settings
from tests.documents import email_message
from tests.imap_server import (
    PASSWORD,
    SUPPORT,
    TOKEN,
    Introspection,
    Mailbox,
    dovecot,
    introspection,
    message,
)
from tests.test_access import bearer, error_of, make_key

SOURCES = "/v1/knowledge/sources"


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch, MAIL_PASSWORD=PASSWORD)


@pytest.fixture
def mailbox() -> object:
    with dovecot() as found:
        yield found


def stored(tmp_path: Path, source: str = "mail") -> dict[str, Document]:
    """The documents of the source, by source id."""
    return source_documents(make_settings(tmp_path, db_path=tmp_path / "k.db"), "support", source)


def add(mailbox: Mailbox, *more: str, secret: str = "password=MAIL_PASSWORD") -> int:
    return main(
        [
            "sources", "add", "mail", "--kind", "imap", "--url", mailbox.url,
            "--collection", "support", "--set", "user=alice", "--secret", secret, *more,
        ]
    )  # fmt: skip


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "mail", *more)


def listing(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    return next(s for s in listed_sources(capsys) if s["name"] == "mail")


def answer(message_id: str, replied: str, subject: str, body: str, time: str) -> EmailMessage:
    """Support's reply to the vendor's message `replied` of `subject`, at `time` on 2 March."""
    date = f"Mon, 02 Mar 2026 {time}:00 +0000"
    return email_message(f"Re: {subject}", body, SUPPORT, SUPPORT, message_id, replied, date)


def test_a_mailbox_becomes_threads_that_follow_its_changes(
    mailbox: Mailbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mailbox.deliver(message("renewal@vendor", "Contract renewal", "The renewal is due in May."))
    mailbox.deliver(
        answer(
            "renewal-2@us", "renewal@vendor", "Contract renewal",
            "We accept the 5% increase.\n\n> old", "11:00",
        )
    )  # fmt: skip
    mailbox.deliver(message("outage@vendor", "Outage notice", "The EU region is down."))
    assert add(mailbox) == 0
    assert sync(capsys) == (0, "support/mail: 2 added, 0 updated, 0 unchanged, 0 deleted")
    docs = stored(tmp_path)
    assert sorted(docs) == ["outage@vendor", "renewal@vendor"]
    renewal = docs["renewal@vendor"]
    assert "renewal is due in May" in renewal.content
    assert "accept the 5% increase" in renewal.content and "> old" not in renewal.content
    assert renewal.source_type == "email" and renewal.metadata["folder"] == "INBOX"
    assert renewal.metadata["message_ids"] == "renewal@vendor renewal-2@us"

    # nothing changed: nothing read again, and no model loaded
    def refuse(*args: object) -> None:
        raise AssertionError("the model was loaded")

    with monkeypatch.context() as patched:
        patched.setattr(KnowledgeService, "load_embedder", refuse)
        patched.setattr(KnowledgeService, "start", refuse)
        assert sync(capsys) == (0, "support/mail: 0 added, 0 updated, 0 unchanged, 0 deleted")

    # a reply to the second thread, and a flag on the first: one thread rewritten
    worked = "Failover to the US region worked."
    mailbox.append(answer("outage-2@us", "outage@vendor", "Outage notice", worked, "12:00"))
    mailbox.flag("<renewal@vendor>")
    assert sync(capsys) == (0, "support/mail: 0 added, 1 updated, 0 unchanged, 0 deleted")
    docs = stored(tmp_path)
    assert "Failover to the US region worked" in docs["outage@vendor"].content
    assert docs["renewal@vendor"].content == renewal.content

    # a message expunged: its thread is rewritten without it
    mailbox.expunge("<renewal-2@us>")
    status, line = sync(capsys)
    assert (status, line) == (0, "support/mail: 0 added, 1 updated, 1 unchanged, 0 deleted")
    docs = stored(tmp_path)
    assert "accept the 5% increase" not in docs["renewal@vendor"].content
    assert docs["renewal@vendor"].metadata["message_ids"] == "renewal@vendor"

    # a whole thread expunged: half the source is more than this guard lets go
    monkeypatch.setenv("KNOWLEDGE_PRUNE_MAX_FRACTION", "0.4")
    mailbox.expunge("<outage@vendor>")
    mailbox.expunge("<outage-2@us>")
    status, line = sync(capsys)
    assert status == 1 and "would lose 1 of its 2 documents" in line
    assert sorted(stored(tmp_path)) == ["outage@vendor", "renewal@vendor"]
    assert "KNOWLEDGE_PRUNE_MAX_FRACTION" in str(listing(capsys)["last_error"])
    assert sync(capsys, "--allow-mass-delete")[0] == 0
    assert sorted(stored(tmp_path)) == ["renewal@vendor"]
    shown = listing(capsys)
    assert shown["kind"] == "imap" and shown["last_error"] is None and shown["documents"] == 1
    assert shown["secrets"] == {"password": "MAIL_PASSWORD"}
    assert PASSWORD.encode() not in (tmp_path / "k.db").read_bytes()


def test_a_changed_uidvalidity_reads_the_folder_again_without_duplicates(
    mailbox: Mailbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mailbox.create("Support")
    kept = [
        message("ticket-1@customer", "Printer jams", "The printer jams on A3 paper."),
        message("ticket-2@customer", "VPN drops", "The VPN drops every hour."),
    ]
    for found in kept:
        mailbox.append(found, "Support")
    assert add(mailbox, "--set", "folders=INBOX,Support") == 0
    assert sync(capsys)[1] == "support/mail: 2 added, 0 updated, 0 unchanged, 0 deleted"
    before = mailbox.validity("Support")
    mailbox.recreate("Support", kept)
    assert mailbox.validity("Support") != before
    assert sync(capsys)[1] == "support/mail: 0 added, 0 updated, 2 unchanged, 0 deleted"
    assert sorted(stored(tmp_path)) == ["ticket-1@customer", "ticket-2@customer"]
    assert json.loads(str(listing(capsys)["cursor"]))["Support"]["validity"] != before


def test_a_refused_login_stops_the_run_and_deletes_nothing(
    mailbox: Mailbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mailbox.deliver(message("a@vendor", "Invoice", "Invoice 17 is paid."))
    assert add(mailbox) == 0
    line, _ = refused_secret(capsys, "mail", "MAIL_PASSWORD", "not-the-password")
    assert "refused the login of 'alice'" in line
    assert "not-the-password" not in line
    assert sorted(stored(tmp_path)) == ["a@vendor"]
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MAIL_PASSWORD")
        status, line = sync(capsys)
        assert status == 1 and "$MAIL_PASSWORD, which is not set" in line
        assert main(["sources", "sync", "--all"]) == 1


def test_an_access_token_logs_in_by_xoauth2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAIL_TOKEN", TOKEN)
    with introspection() as url, dovecot(introspection_url=url) as mailbox:
        mailbox.deliver(message("a@vendor", "Invoice", "Invoice 17 is paid."))
        assert add(mailbox, secret="token=MAIL_TOKEN") == 0
        capsys.readouterr()
        Introspection.asked.clear()
        assert sync(capsys) == (0, "support/mail: 1 added, 0 updated, 0 unchanged, 0 deleted")
        assert Introspection.asked == [TOKEN]  # the server asked about the token sent
        assert sorted(stored(tmp_path)) == ["a@vendor"]

        # a token the endpoint calls inactive: the run stops, nothing deleted
        mailbox.deliver(message("b@vendor", "Refund", "The refund went out."))
        monkeypatch.setenv("MAIL_TOKEN", "ya29.expired")
        status, line = sync(capsys, "--full")
        assert status == 1 and "refused the login of 'alice'" in line
        assert "AUTHENTICATIONFAILED" in line and "ya29.expired" not in line
        assert sorted(stored(tmp_path)) == ["a@vendor"]
        shown = listing(capsys)
        assert "refused the login of 'alice'" in str(shown["last_error"])
        assert shown["secrets"] == {"token": "MAIL_TOKEN"}
        assert TOKEN.encode() not in (tmp_path / "k.db").read_bytes()


def test_a_source_is_checked_when_added(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["sources", "add", "mail", "--kind", "imap", "--collection", "support"]
    assert "url: must be imap://HOST[:PORT]" in refused_usage(
        capsys, *base, "--url", "http://mail.example.com"
    )
    assert "settings.usr: is not a setting of imap" in refused_usage(
        capsys, *base, "--url", "imap://mail.example.com", "--set", "usr=a"
    )
    assert main([*base, "--url", "imap://h", "--set", "user=a", "--secret", "password=x y"]) == 2
    assert "secrets.password: takes the NAME of an environment variable" in (
        capsys.readouterr().err
    )
    assert main([*base, "--url", "imap://h", "--set", "user=a"]) == 2
    assert "secrets.password: an IMAP source takes exactly one of --secret password" in (
        capsys.readouterr().err
    )
    both = ["--secret", "password=MAIL_PASSWORD", "--secret", "token=MAIL_TOKEN"]
    assert "secrets.token: an IMAP source takes exactly one of" in refused_usage(
        capsys, *base, "--url", "imap://h", "--set", "user=a", *both
    )
    assert "settings.user: an IMAP source needs --set user=NAME" in refused_usage(
        capsys, *base, "--url", "imap://h", "--secret", "token=MAIL_TOKEN"
    )
    ok = [*base, "--url", "imap://h", "--set", "user=a", "--secret", "password=MAIL_PASSWORD"]
    assert main(ok) == 0
    assert main(ok) == 1
    assert "has a source 'mail' already" in capsys.readouterr().err


def test_a_source_over_http_takes_exactly_one_of_password_and_token(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auth="keys")
    admin = bearer(asyncio.run(make_key(settings, "admin", ["admin"])))
    body = {
        "name": "mail", "kind": "imap", "url": "imap://mail.example.com",
        "collection": "support", "settings": {"user": "alice"},
    }  # fmt: skip
    with TestClient(create_app(settings)) as client:
        for secrets, field in (
            ({}, "secrets.password"),
            ({"password": "MAIL_PASSWORD", "token": "MAIL_TOKEN"}, "secrets.token"),
        ):
            refused = client.post(SOURCES, json={**body, "secrets": secrets}, headers=admin)
            details = error_of(refused, 400)["details"]
            assert details["field"] == field and "exactly one of" in details["rule"], details
        created = client.post(
            SOURCES, json={**body, "secrets": {"token": "MAIL_TOKEN"}}, headers=admin
        )
        assert created.status_code == 201, created.text
        assert created.json()["secrets"] == {"token": "MAIL_TOKEN"}


def test_removing_a_source_takes_its_documents(
    mailbox: Mailbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mailbox.deliver(message("a@vendor", "Invoice", "Invoice 17 is paid."))
    assert add(mailbox) == 0
    assert sync(capsys)[0] == 0
    assert main(["sources", "remove", "mail"]) == 0
    assert "with its 1 documents" in capsys.readouterr().out
    assert stored(tmp_path) == {}
    assert main(["sources", "sync", "mail"]) == 1


def test_starttls_upgrades_before_the_login(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with dovecot(tls=True) as mailbox:
        assert mailbox.cafile is not None
        mailbox.deliver(message("tls@vendor", "Certificate renewal", "The certificate expires."))
        # upgraded, the server's certificate is checked: the system's authorities
        # do not know the test's own
        assert add(mailbox, "--set", "tls=starttls") == 0
        status, line = sync(capsys)
        assert status == 1 and "CERTIFICATE_VERIFY_FAILED" in line
        assert main(["sources", "remove", "mail"]) == 0
        assert add(mailbox, "--set", "tls=starttls", "--set", f"cafile={mailbox.cafile}") == 0
        assert sync(capsys) == (0, "support/mail: 1 added, 0 updated, 0 unchanged, 0 deleted")
        assert sorted(stored(tmp_path)) == ["tls@vendor"]
