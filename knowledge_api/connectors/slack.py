"""Slack channels through the Web API (`slack_sdk` with a bot token): one document per
thread, the root message then each reply, a section per message with its author, time
and permalink; a message nobody answered is a thread of one.

Only the channels the bot is a member of are read (`users.conversations`). Each run
pages through each channel's history (top-level messages only, 200 a call) and reads the
replies of the threads whose activity (the root's `ts`, its `latest_reply`, an edit)
is later than the channel's cursor: a reply to an old thread moves its root's
`latest_reply`, so the old thread is read again. The same history lists every thread
for pruning. `Retry-After` is honoured as the other connectors honour it (clamped to
1-60 s), through the SDK's retry handlers.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from knowledge_api.connectors import access, http, slack_access
from knowledge_api.connectors.base import Kind, Window, check_settings, json_cursor, secret, split
from knowledge_api.errors import ConnectorFailed, InvalidRequest
from knowledge_api.ingest.extract import literal
from knowledge_api.models import ConnectorSource, Document
from knowledge_api.principals import PUBLIC_ACL
from knowledge_api.registry import import_extra

if TYPE_CHECKING:
    from slack_sdk import WebClient

SOURCE_TYPE = "chat"
SETTINGS = ("channels", "timeout", access.SETTING)
SECRETS = ("token",)
PAGE = 200
EXTRA = "connectors"
REFUSED = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
SCOPES = (
    "channels:read, groups:read, channels:history, groups:history, users:read "
    f"and, to follow private channels' members, {slack_access.SCOPES}"
)
NOTICES = {
    "channel_join", "channel_leave", "channel_topic", "channel_purpose", "channel_name",
    "channel_archive", "channel_unarchive", "bot_add", "bot_remove", "pinned_item",
}  # fmt: skip
"""Message subtypes Slack writes itself: nothing anyone said."""
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_LINK = re.compile(r"<(https?://[^|>]+)\|([^>]+)>")


class SlackConnector(Kind):
    kind: ClassVar[str] = "slack"

    def setup(self, source: ConnectorSource) -> None:
        check(source)
        self.wanted = [name.lstrip("#") for name in split(source.settings.get("channels", ""))]
        self.timeout = int(float(source.settings.get("timeout", "30")))
        self.sdk: WebClient | None = None
        self.team_url = ""
        self.people: dict[str, dict[str, Any]] = {}
        """User id -> the account `users.info` answered."""
        self.threads: dict[str, set[str]] | None = None
        """Channel id -> the root ts of every thread its history holds (this run's)."""

    # -- the connector --------------------------------------------------------------

    def changed(self, cursor: str) -> Window:
        window = Window()
        window.documents = self.read(read_cursor(cursor), window)
        return window

    def read(self, known: dict[str, dict[str, str]], window: Window) -> Iterator[Document]:
        """The threads with activity since each channel's cursor, as the histories'
        pages come; the window's cursor and every thread seen once all are read."""
        state: dict[str, dict[str, str]] = {}
        scopes: dict[str, tuple[str, ...]] = {}
        self.threads = {}
        for channel in self.channels():
            scopes[thread_id(channel["id"], "")] = slack_access.acl(channel)
            seen = known.get(channel["id"], {})
            name = str(channel.get("name") or "")
            # a renamed channel's threads are all written again: their titles name it
            since = seen.get("ts", "") if seen.get("name") == name else ""
            newest = seen.get("ts", "0")
            roots = self.threads.setdefault(channel["id"], set())
            for message in self.history(channel["id"]):
                roots.add(message["ts"])
                moved = activity(message)
                newest = max(newest, moved, key=float)
                if not since or float(moved) > float(since):
                    yield self.document(channel, message)
            state[channel["id"]] = {"ts": newest, "name": name}
        # every run reads every channel's history (to find the threads with new
        # replies), so it knows every thread: what is gone is pruned at every run
        window.cursor, window.seen = json.dumps(state, sort_keys=True), self.visible()
        window.scopes = scopes

    def visible(self) -> set[str]:
        if self.threads is None:
            self.threads = {
                c["id"]: {m["ts"] for m in self.history(c["id"])} for c in self.channels()
            }
        return {thread_id(channel, ts) for channel, roots in self.threads.items() for ts in roots}

    def close(self) -> None:
        self.sdk = None

    # -- reading ----------------------------------------------------------------------

    def web(self) -> WebClient:
        """The client, its token checked (`auth.test`, which also names the workspace's
        URL the permalinks start with)."""
        if self.sdk is None:
            sdk = import_extra("slack_sdk", EXTRA)
            handlers = import_extra("slack_sdk.http_retry.builtin_handlers", EXTRA)
            client = sdk.WebClient(
                token=secret(self.source, "token"),
                base_url=self.source.url.rstrip("/") + "/",
                timeout=self.timeout,
                retry_handlers=[
                    retry_handler(handlers.RateLimitErrorRetryHandler, self.runtime.retries)
                ],
            )
            found = next(answers(client, "auth_test", self.source.url))
            self.team_url = str(found.get("url") or "")
            self.sdk = client
        return self.sdk

    def call(self, method: str, **params: Any) -> Any:
        """One call's answer (its first page)."""
        return next(self.pages(method, **params))

    def pages(self, method: str, **params: Any) -> Iterator[Any]:
        return answers(self.web(), method, self.source.url, **params)

    def channels(self) -> list[dict[str, Any]]:
        """The channels to read: those the bot is in, narrowed to `channels` (names or
        ids); ConnectorFailed naming one it is not in."""
        member = [
            channel
            for page in self.pages(
                "users_conversations",
                types="public_channel,private_channel",
                exclude_archived=True,
                limit=PAGE,
            )
            for channel in page.get("channels") or []
            if isinstance(channel, dict) and channel.get("id")
        ]
        if not self.wanted:
            return member
        by_key = {key: c for c in member for key in (c["id"], c.get("name"))}
        missing = [name for name in self.wanted if name not in by_key]
        if missing:
            raise ConnectorFailed(
                f"the bot is not a member of #{missing[0]}: invite it there (/invite @BOT) "
                "or leave the channel out of settings.channels"
            )
        return [by_key[name] for name in self.wanted]

    def history(self, channel: str) -> Iterator[dict[str, Any]]:
        """The channel's top-level messages (a reply also sent to the channel stays in
        its thread), without Slack's notices of joins, topics and the like."""
        for page in self.pages("conversations_history", channel=channel, limit=PAGE):
            for message in page.get("messages") or []:
                if not isinstance(message, dict) or not message.get("ts"):
                    continue
                if message.get("subtype") in NOTICES:
                    continue
                if message.get("thread_ts", message["ts"]) == message["ts"]:
                    yield message

    def replies(self, channel: str, root: dict[str, Any]) -> list[dict[str, Any]]:
        """The root and its replies, oldest first."""
        if not root.get("reply_count"):
            return [root]
        found = [
            message
            for page in self.pages(
                "conversations_replies", channel=channel, ts=root["ts"], limit=PAGE
            )
            for message in page.get("messages") or []
            if isinstance(message, dict) and message.get("ts")
        ]
        return sorted(found, key=lambda m: float(m["ts"])) or [root]

    def document(self, channel: dict[str, Any], root: dict[str, Any]) -> Document:
        channel_id, name = channel["id"], str(channel.get("name") or channel["id"])
        messages = self.replies(channel_id, root)
        sections = [self.section(channel_id, root["ts"], m) for m in messages]
        authors = list(dict.fromkeys(self.author(m) for m in messages))
        first = self.text(root).strip().splitlines()
        latest = max((activity(m) for m in messages), key=float)
        return Document(
            source_type=SOURCE_TYPE,
            source_id=thread_id(channel_id, root["ts"]),
            content="\n\n".join(sections),
            title=f"#{name}: {shorten(first[0] if first else '')}".rstrip(": "),
            metadata={
                "url": self.permalink(channel_id, root["ts"], root["ts"]),
                "channel": name,
                "channel_id": channel_id,
                "private": bool(channel.get("is_private")),
                "replies": len(messages) - 1,
                "participants": authors,
            },
            collection=self.collection,
            created_at=iso(root["ts"]),
            updated_at=iso(latest),
            acl=slack_access.acl(channel) if access.follows(self.source) else PUBLIC_ACL,
        )

    def section(self, channel: str, root: str, message: dict[str, Any]) -> str:
        heading = f"## {self.author(message)}, {iso(message['ts'])[:16].replace('T', ' ')}"
        link = self.permalink(channel, root, message["ts"])
        return f"{heading}\n\n{link}\n\n{literal(self.text(message))}".rstrip()

    def text(self, message: dict[str, Any]) -> str:
        """The message's text with mentions as names and links as `label (URL)`."""
        text = str(message.get("text") or "")
        text = _MENTION.sub(lambda m: f"@{self.user(m.group(1))}", text)
        return _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", text)

    def author(self, message: dict[str, Any]) -> str:
        if message.get("user"):
            return self.user(str(message["user"]))
        profile = message.get("bot_profile") or {}
        return str(message.get("username") or profile.get("name") or "unknown")

    def user(self, user_id: str) -> str:
        user = self.person(user_id)
        profile = user.get("profile") or {}
        return str(
            profile.get("display_name") or user.get("real_name") or user.get("name") or user_id
        )

    def person(self, user_id: str) -> dict[str, Any]:
        """The account `users.info` answers, asked once a run."""
        if user_id not in self.people:
            self.people[user_id] = self.call("users_info", user=user_id).get("user") or {}
        return self.people[user_id]

    def members(self, groups: set[str]) -> tuple[dict[str, set[str]], list[str]]:
        return slack_access.members(self, groups)

    def permalink(self, channel: str, root: str, ts: str) -> str:
        """The message's link as Slack's `chat.getPermalink` makes it (without a call
        per message)."""
        link = f"{self.team_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"
        return link if ts == root else f"{link}?thread_ts={root}&cid={channel}"


def answers(client: WebClient, method: str, where: str, **params: Any) -> Iterator[Any]:
    """Each page of a call, following `response_metadata.next_cursor` (the SDK's
    paging); ConnectorFailed naming the method and why when Slack refuses it."""
    errors = import_extra("slack_sdk.errors", EXTRA)
    try:
        yield from getattr(client, method)(**params)
    except errors.SlackApiError as e:
        data = getattr(e.response, "data", None)
        error = data.get("error") if isinstance(data, dict) else None
        raise ConnectorFailed(refusal(method, e.response), error=error) from e
    except (urllib.error.URLError, OSError, errors.SlackRequestError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectorFailed(f"{where} is unreachable: {reason}") from e


def retry_handler(base: type[Any], retries: http.Retries) -> Any:
    """The SDK's rate-limit handler, waiting as every connector waits (`Retry-After`
    clamped to 1-60 s, backoff with jitter otherwise) and trying 5xx and dropped
    connections again too."""

    class Clamped(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.retries = retries
            super().__init__(max_retry_count=self.retries.attempts)

        def _can_retry(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> bool:
            if response is not None:
                return response.status_code in http.RETRIED
            return isinstance(error, (urllib.error.URLError, OSError)) and not isinstance(
                error, urllib.error.HTTPError
            )

        def prepare_for_next_attempt(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> None:
            state.next_attempt_requested = True
            status = response.status_code if response is not None else None
            headers = {k.lower(): v for k, v in (response.headers if response else {}).items()}
            after = headers.get("retry-after") or [""]
            value = after[0] if isinstance(after, list) else str(after)
            self.retries.sleep(self.retries.pause(status, value, state.current_attempt))
            state.increment_current_attempt()

    return Clamped()


def refusal(method: str, response: Any) -> str:
    """Why Slack refused a call, in the words the other connectors use."""
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    error = str(data.get("error") or "") if isinstance(data, dict) else ""
    call = method.replace("_", ".", 1)
    if error in REFUSED:
        return f"{call}: {http.STOPS[401]} (Slack says {error})"
    if error == "missing_scope":
        needed = data.get("needed", "") if isinstance(data, dict) else ""
        return f"{call}: {http.STOPS[403]} (missing {needed}; a bot token needs {SCOPES})"
    if status in http.STOPS:
        return f"{call}: {http.STOPS[status]}"
    return f"{call}: answered {status}" + (f" ({error})" if error else "")


def activity(message: dict[str, Any]) -> str:
    """The latest ts of a thread root: its own, its latest reply's, its last edit's."""
    edited = message.get("edited") or {}
    stamps = [message["ts"], message.get("latest_reply"), edited.get("ts")]
    return max((str(s) for s in stamps if s), key=float)


def thread_id(channel: str, ts: str) -> str:
    return f"{channel}/{ts}"


def iso(ts: str) -> str:
    return datetime.fromtimestamp(float(ts), UTC).isoformat(timespec="seconds")


def shorten(text: str, size: int = 80) -> str:
    return text if len(text) <= size else text[: size - 1].rstrip() + "…"


def read_cursor(cursor: str) -> dict[str, dict[str, str]]:
    """Channel id -> the latest activity a run saw there (`ts`) and the channel's name
    then (`name`)."""
    return {
        str(k): {"ts": str(v.get("ts", "")), "name": str(v.get("name", ""))}
        for k, v in json_cursor(cursor).items()
        if isinstance(v, dict)
    }


def check(source: ConnectorSource) -> None:
    """InvalidRequest naming the field for a source this connector cannot read."""
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvalidRequest("url", "must be the Web API root: https://slack.com/api")
    check_settings(source, SETTINGS, SECRETS)
    access.check(source)
    if "token" not in source.secrets:
        raise InvalidRequest("secrets.token", "a Slack source needs --secret token=ENV_VAR")
    try:
        float(source.settings.get("timeout", "30"))
    except ValueError as e:
        raise InvalidRequest("settings.timeout", "must be a number of seconds") from e
