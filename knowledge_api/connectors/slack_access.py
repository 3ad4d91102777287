"""Slack's permissions as principals: a thread of a public channel is `public` (every
member of the workspace may read it), a thread of a private channel is for the group
`slack:<CHANNEL ID>`, whose members are the channel's (`conversations.members`), each
known by the e-mail address of the account (`users.info`, which shows it to a token with
`users:read.email`). Bots and accounts without an address are left out; a channel the
bot was removed from, or that is gone, has no members any more."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from knowledge_api.connectors import access
from knowledge_api.errors import ConnectorFailed


class Slack(Protocol):
    """What the mapping reads through (connectors/slack.py)."""

    def pages(self, method: str, **params: Any) -> Iterator[Any]: ...

    def person(self, user_id: str) -> dict[str, Any]: ...


PREFIX = "slack:"
GONE = {"channel_not_found", "not_in_channel", "is_archived"}
"""What `conversations.members` answers for a channel the bot can no longer read."""
SCOPES = "users:read.email"
"""What following a private channel's members takes beyond reading its messages."""


def acl(channel: dict[str, Any]) -> tuple[str, ...]:
    """Who may read a channel's threads."""
    if not channel.get("is_private"):
        return (access.PUBLIC,)
    return (access.principal(PREFIX + str(channel["id"])),)


def members(connector: Slack, groups: set[str]) -> tuple[access.Members, list[str]]:
    """The members of each private channel's group among `groups` (a channel gone, or
    that the bot left, is left out: its group lapses)."""
    directory = access.Directory(lambda user: email(connector, user))
    found: access.Members = {}
    for group in sorted(g for g in groups if g.startswith(PREFIX)):
        channel = group[len(PREFIX) :]
        try:
            accounts = [
                str(user)
                for page in connector.pages("conversations_members", channel=channel, limit=200)
                for user in page.get("members") or []
            ]
        except ConnectorFailed as e:
            if e.details.get("error") not in GONE:
                raise
            continue  # the channel is gone for the bot: so is its group
        found[group] = directory.users((account, None) for account in accounts)
    return found, directory.problems("Slack")


def email(connector: Slack, user: str) -> str | None:
    """A member's id: the e-mail address of the account ('' when none is shown, None
    for a bot or a deactivated account)."""
    person = connector.person(user)
    if person.get("is_bot") or person.get("deleted") or user == "USLACKBOT":
        return None
    return access.user_id((person.get("profile") or {}).get("email"))
