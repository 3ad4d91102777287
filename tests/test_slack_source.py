"""Slack threads as a connector source, against a fake Slack Web API on loopback: the
real `slack_sdk` client pages by cursor and waits out 429 and 503 through its retry
handlers; only the channels the bot is in are read; a reply to an old thread, an edit,
a deleted thread and a renamed channel follow; a wrong token and a retired method stop
the run. After each sync the store holds what Slack holds, on SQLite and on Postgres."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from knowledge_api.cli import main
from knowledge_api.connectors import registry
from knowledge_api.connectors import slack as connector
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.cli_env import (
    cli_environment,
    listed_sources,
    mirrored,
    refused_secret,
    refused_usage,
    source_documents,
    sync_source,
)
from tests.delegated import readable
from tests.slack_server import TEAM_URL, TOKEN, USERS, Slack, email, slack

ADD = ["sources", "add", "chat", "--kind", "slack", "--collection", "team"]


environment = cli_environment("sqlite", "postgres", SLACK_TOKEN_FOR_TESTS=TOKEN)


@pytest.fixture
def fake() -> Iterator[Slack]:
    with slack() as state:
        state.channel("C01GENERAL", "general")
        state.channel("C02INCIDENT", "incidents", private=True)
        state.channel("C03RANDOM", "random", member=False)
        state.joined("C01GENERAL")
        keys = state.post("C01GENERAL", "How often do we rotate the signing keys?")
        state.reply("C01GENERAL", keys, "Monthly, through the KMS cron job. Ask <@U03CAROL>.")
        state.post("C01GENERAL", "Deploy freeze starts Friday.", user="U03CAROL")
        latency = state.post("C02INCIDENT", "Checkout latency is above 2 s since 09:10.")
        state.reply("C02INCIDENT", latency, "Rolled back the gateway config.")
        state.reply("C02INCIDENT", latency, "Latency is back to normal.", user="U03CAROL")
        state.post("C02INCIDENT", "Zeppelin maintenance window tonight.")
        state.post("C03RANDOM", "Lunch on the roof?")
        yield state


def stored(settings: Settings) -> dict[str, Document]:
    return source_documents(settings, "team", "chat")


def assert_mirrors(settings: Settings, fake: Slack) -> dict[str, Document]:
    """The store holds each thread of the channels the bot is in, no other, with each
    message's author, text and permalink."""
    docs = stored(settings)
    for thread_id, messages, doc in mirrored(docs, fake.threads(), "chat"):
        channel_id, _ = thread_id.split("/")
        channel = fake.channels[channel_id]
        assert doc.title.startswith(f"#{channel.name}: {messages[0]['text'][:20]}")
        assert doc.metadata["replies"] == len(messages) - 1
        assert doc.metadata["channel"] == channel.name
        assert doc.content.count("\n## ") + doc.content.startswith("## ") == len(messages)
        for message in messages:
            assert message["text"].split("<@")[0] in doc.content
            assert f"## {USERS[message['user']]}, " in doc.content
            assert f"/archives/{channel_id}/p{message['ts'].replace('.', '')}" in doc.content
    return docs


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "chat", *more)


def add(fake: Slack, *more: str) -> int:
    return main([*ADD, "--url", fake.url, "--secret", "token=SLACK_TOKEN_FOR_TESTS", *more])


def test_threads_follow_slack_between_syncs(
    environment: Settings,
    fake: Slack,
    waits: list[float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connector, "PAGE", 1)  # the cursor pages every listing
    assert add(fake) == 0
    assert sync(capsys) == (0, "team/chat: 4 added, 0 updated, 0 unchanged, 0 deleted")
    docs = assert_mirrors(environment, fake)
    keys = next(d for d in docs.values() if "signing keys" in d.title)
    assert keys.title == "#general: How often do we rotate the signing keys?"
    assert "Ask @carol." in keys.content and keys.metadata["participants"] == ["alice", "bob"]
    assert keys.metadata["url"].startswith(f"{TEAM_URL}archives/C01GENERAL/p")
    assert f"?thread_ts={keys.source_id.split('/')[1]}&cid=C01GENERAL" in keys.content
    assert keys.created_at[:10] == "2026-03-01"
    assert not any("Lunch" in d.content for d in docs.values())  # the bot is not in #random
    assert fake.calls.count("conversations.history") > 3  # paged

    assert sync(capsys) == (0, "team/chat: 0 added, 0 updated, 0 unchanged, 0 deleted")
    assert "conversations.replies" not in fake.calls[fake.calls.index("auth.test", 1) :]

    # a reply to an old thread, an edit, a thread deleted, one new, a channel renamed
    general = fake.channels["C01GENERAL"]
    freeze = next(m["ts"] for m in general.roots if "freeze" in m["text"])
    keys_ts = next(m["ts"] for m in general.roots if "signing keys" in m["text"])
    fake.reply("C01GENERAL", freeze, "It moves to Monday.")
    fake.edit("C01GENERAL", keys_ts, "How often do we rotate the API keys?")
    incidents = fake.channels["C02INCIDENT"]
    fake.delete("C02INCIDENT", incidents.roots[-1]["ts"])
    incidents.name = "incidents-2026"
    fake.post("C01GENERAL", "The new runbook is in the wiki.", user="U02BOB")
    fake.fail("conversations.history", 429, {"Retry-After": "3"})
    fake.fail("conversations.replies", 503)
    assert sync(capsys) == (0, "team/chat: 1 added, 3 updated, 0 unchanged, 1 deleted")
    assert fake.faults == [] and 3.0 in waits and len(waits) == 2
    docs = assert_mirrors(environment, fake)
    assert "It moves to Monday." in docs[f"C01GENERAL/{freeze}"].content
    assert all(
        d.title.startswith("#incidents-2026: ")
        for d in docs.values()
        if d.metadata["channel_id"] == "C02INCIDENT"
    )

    assert sync(capsys) == (0, "team/chat: 0 added, 0 updated, 0 unchanged, 0 deleted")


def test_only_the_channels_named_are_read_and_the_bot_must_be_in_them(
    environment: Settings, fake: Slack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake, "--set", "channels=#incidents") == 0
    assert sync(capsys)[0] == 0
    assert {d.metadata["channel"] for d in stored(environment).values()} == {"incidents"}
    assert main(["sources", "remove", "chat", "--collection", "team"]) == 0
    assert add(fake, "--set", "channels=general,random") == 0
    status, line = sync(capsys)
    assert status == 1 and "the bot is not a member of #random" in line
    assert stored(environment) == {}


def test_a_wrong_token_stops_the_run_and_deletes_nothing(
    environment: Settings, fake: Slack, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake) == 0
    line, listed = refused_secret(capsys, "chat", "SLACK_TOKEN_FOR_TESTS", "xoxb-wrong")
    assert "credentials were refused" in line and "invalid_auth" in line
    assert "xoxb" not in line and waits == []
    assert len(stored(environment)) == 4
    assert "invalid_auth" in listed["last_error"] and TOKEN not in json.dumps(listed)


@pytest.mark.parametrize(
    ("status", "reason"), [(410, "the endpoint is gone (410)"), (404, "not found (404)")]
)
def test_a_retired_method_stops_the_run_and_deletes_nothing(
    environment: Settings,
    fake: Slack,
    capsys: pytest.CaptureFixture[str],
    status: int,
    reason: str,
) -> None:
    assert add(fake) == 0
    assert sync(capsys)[0] == 0
    fake.fail("conversations.history", status)
    code, line = sync(capsys, "--full")
    assert code == 1 and f"conversations.history: {reason}" in line
    assert len(stored(environment)) == 4


def test_server_errors_that_go_on_stop_the_run_after_the_retries(
    environment: Settings, fake: Slack, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake) == 0
    assert sync(capsys)[0] == 0
    for _ in range(6):
        fake.fail("conversations.history", 503)
    code, line = sync(capsys)
    assert code == 1 and "conversations.history: answered 503" in line and len(waits) == 5
    assert len(stored(environment)) == 4


def test_an_unreachable_slack_stops_the_run_after_the_retries(
    environment: Settings, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    url = "http://127.0.0.1:9/api"
    assert main([*ADD, "--url", url, "--secret", "token=SLACK_TOKEN_FOR_TESTS"]) == 0
    status, line = sync(capsys)
    assert status == 1 and f"{url} is unreachable" in line and len(waits) == 5


def test_a_source_needs_a_token_and_an_api_url(
    environment: Settings, fake: Slack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "secrets.token" in refused_usage(capsys, *ADD, "--url", fake.url)
    assert "https://slack.com/api" in refused_usage(
        capsys, *ADD, "--url", "slack.com", "--secret", "token=X"
    )


def test_private_channels_are_read_by_their_members_alone(
    environment: Settings, fake: Slack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A public channel's threads are public; a private channel's are read by its
    members (known by their e-mail addresses), and a change of members is followed by
    the next run, without writing a thread again."""
    alice, bob, carol = (email(user) for user in USERS)
    fake.channels["C02INCIDENT"].members = ["U01ALICE", "U03CAROL", "U09BOT"]
    assert add(fake) == 0
    assert sync(capsys)[0] == 0
    docs = stored(environment)
    general = {s for s, d in docs.items() if d.metadata["channel_id"] == "C01GENERAL"}
    incidents = set(docs) - general
    assert len(general) == 2 and len(incidents) == 2
    assert {docs[s].acl for s in incidents} == {("group:slack:C02INCIDENT",)}
    assert {docs[s].acl for s in general} == {("public",)}
    users = (alice, bob, carol, "mallory@acme.example.com")
    seen = readable(environment, "team", "chat", users)
    assert seen == {alice: set(docs), bob: general, carol: set(docs), users[3]: general}

    fake.channels["C02INCIDENT"].members = ["U02BOB", "U03CAROL", "U09BOT"]
    assert sync(capsys) == (0, "team/chat: 0 added, 0 updated, 0 unchanged, 0 deleted")
    seen = readable(environment, "team", "chat", (alice, bob))
    assert seen == {alice: general, bob: set(docs)}

    # a public channel converted to private closes its threads, none of them changed
    fake.channels["C01GENERAL"].private = True
    fake.channels["C01GENERAL"].members = ["U01ALICE"]
    assert sync(capsys) == (0, "team/chat: 0 added, 0 updated, 0 unchanged, 0 deleted")
    seen = readable(environment, "team", "chat", (alice, bob))
    assert seen == {alice: general, bob: incidents}
    fake.channels["C01GENERAL"].private = False
    assert sync(capsys)[0] == 0

    # the bot removed from the channel: nobody is its member any more; the mapping
    # turned off: the source's own access list (closed) applies again
    assert main(["groups", "set", bob, "oncall"]) == 0  # set by hand: kept
    fake.channels["C02INCIDENT"].member = False
    assert sync(capsys)[0] == 0
    assert readable(environment, "team", "chat", (bob,)) == {bob: general}
    fake.channels["C02INCIDENT"].member = True
    assert sync(capsys)[0] == 0
    assert readable(environment, "team", "chat", (bob,)) == {bob: set(docs)}
    assert main(["sources", "remove", "chat", "--collection", "team"]) == 0
    assert add(fake, "--set", "permissions=off") == 0
    assert sync(capsys)[0] == 0
    assert readable(environment, "team", "chat", (bob,)) == {bob: set()}
    assert main(["groups", "get", bob]) == 0
    assert "oncall" in capsys.readouterr().out


def test_groups_are_given_once_every_batch_is_stored_and_move_with_the_cursor(
    environment: Settings,
    fake: Slack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window written one document a batch still fills every group its documents
    name; a run stopped while asking who is in them (after its batches were stored)
    gives and takes back nothing and keeps its cursor, and the next run follows."""
    monkeypatch.setattr(registry, "READ_BATCH", 1)
    alice, bob = email("U01ALICE"), email("U02BOB")
    fake.channels["C02INCIDENT"].members = ["U01ALICE", "U09BOT"]
    assert add(fake) == 0
    assert sync(capsys)[0] == 0
    docs = set(stored(environment))
    incidents = {s for s in docs if s.startswith("C02INCIDENT/")}
    assert len(incidents) == 2
    seen = readable(environment, "team", "chat", (alice, bob))
    assert seen == {alice: docs, bob: docs - incidents}
    before = source_list(capsys)["cursor"]

    fake.channels["C02INCIDENT"].members = ["U02BOB", "U09BOT"]
    fake.post("C01GENERAL", "Who owns the status page?")
    fake.fail("conversations.members", 410)
    code, line = sync(capsys)
    assert code == 1 and "conversations.members" in line
    written = set(stored(environment))
    assert len(written) == 5  # the batches were stored before the run stopped
    seen = readable(environment, "team", "chat", (alice, bob))
    assert seen == {alice: written, bob: written - incidents}
    assert source_list(capsys)["cursor"] == before

    # the window read again: the thread the stopped run wrote is unchanged
    assert sync(capsys) == (0, "team/chat: 0 added, 0 updated, 1 unchanged, 0 deleted")
    seen = readable(environment, "team", "chat", (alice, bob))
    assert seen == {alice: written - incidents, bob: written}
    assert source_list(capsys)["cursor"] != before


def source_list(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    (listed,) = listed_sources(capsys)
    return listed


def test_an_explicit_access_list_wins_over_slack_permissions(
    environment: Settings, fake: Slack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(fake, "--acl", "group:support") == 0
    assert sync(capsys)[0] == 0
    assert {d.acl for d in stored(environment).values()} == {("group:support",)}


def test_a_group_two_sources_give_stays_while_one_still_gives_it(
    environment: Settings, fake: Slack, capsys: pytest.CaptureFixture[str]
) -> None:
    bob = email("U02BOB")
    assert add(fake) == 0
    assert main([*ADD[:2], "chat2", *ADD[3:-1], "team2", "--url", fake.url,
                 "--secret", "token=SLACK_TOKEN_FOR_TESTS"]) == 0  # fmt: skip
    assert sync(capsys)[0] == 0 and sync_source(capsys, "chat2")[0] == 0
    assert main(["sources", "remove", "chat", "--collection", "team"]) == 0
    capsys.readouterr()
    assert main(["groups", "get", bob]) == 0
    assert "slack:C02INCIDENT" in capsys.readouterr().out
    assert len(readable(environment, "team2", "chat2", (bob,))[bob]) == 4
    assert main(["sources", "remove", "chat2", "--collection", "team2"]) == 0
    capsys.readouterr()
    assert main(["groups", "get", bob]) == 0
    assert "slack:C02INCIDENT" not in capsys.readouterr().out
