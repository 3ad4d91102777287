"""A fake Slack Web API on a loopback port, for the Slack connector's tests: channels
(some the bot is in), their messages and threads, shaped as Slack documents them
(`ok`, `messages` newest first, `response_metadata.next_cursor`), changed by the test
between syncs; faults (429 with Retry-After, 503, 410) planned for the next calls."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests import loopback

TOKEN = "xoxb-fake-bot-token"
TEAM_URL = "https://acme.slack.example.com/"
USERS = {"U01ALICE": "alice", "U02BOB": "bob", "U03CAROL": "carol"}


@dataclass
class Channel:
    id: str
    name: str
    member: bool = True
    private: bool = False
    members: list[str] = field(default_factory=lambda: [*USERS, "U09BOT"])
    """Who is in the channel (`conversations.members`): everyone and the bot at first."""
    roots: list[dict[str, Any]] = field(default_factory=list)
    replies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class Slack:
    def __init__(self) -> None:
        self.channels: dict[str, Channel] = {}
        self.faults: list[tuple[str, int, dict[str, str], dict[str, Any]]] = []
        self.calls: list[str] = []
        self.clock = 1_772_355_600  # 2026-03-01 09:00 UTC
        self.lock = threading.Lock()
        self.url = ""

    def ts(self) -> str:
        self.clock += 60
        return f"{self.clock}.000100"

    def channel(self, id: str, name: str, member: bool = True, private: bool = False) -> None:
        self.channels[id] = Channel(id, name, member, private)

    def post(self, channel: str, text: str, user: str = "U01ALICE") -> str:
        ts = self.ts()
        message = {"type": "message", "user": user, "text": text, "ts": ts, "team": "T1"}
        self.channels[channel].roots.append(message)
        return ts

    def joined(self, channel: str, user: str = "U09BOT") -> None:
        """Slack's notice that someone joined: a message with a subtype."""
        text = f"<@{user}> has joined the channel"
        message = {"type": "message", "subtype": "channel_join", "user": user, "text": text}
        self.channels[channel].roots.append(message | {"ts": self.ts()})

    def reply(self, channel: str, root_ts: str, text: str, user: str = "U02BOB") -> str:
        where = self.channels[channel]
        root = next(m for m in where.roots if m["ts"] == root_ts)
        ts = self.ts()
        reply = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "thread_ts": root_ts,
            "parent_user_id": root["user"],
        }
        where.replies.setdefault(root_ts, []).append(reply)
        replies = where.replies[root_ts]
        root |= {
            "thread_ts": root_ts,
            "reply_count": len(replies),
            "reply_users": sorted({r["user"] for r in replies}),
            "reply_users_count": len({r["user"] for r in replies}),
            "latest_reply": ts,
        }
        return ts

    def edit(self, channel: str, ts: str, text: str) -> None:
        root = next(m for m in self.channels[channel].roots if m["ts"] == ts)
        root |= {"text": text, "edited": {"user": root["user"], "ts": self.ts()}}

    def delete(self, channel: str, ts: str) -> None:
        where = self.channels[channel]
        where.roots = [m for m in where.roots if m["ts"] != ts]
        where.replies.pop(ts, None)

    def fail(self, method: str, status: int, headers: dict[str, str] | None = None) -> None:
        body = {"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"}
        self.faults.append((method, status, headers or {}, body))

    def threads(self) -> dict[str, list[dict[str, Any]]]:
        """Each thread the bot may read by its id, its messages oldest first."""
        return {
            f"{c.id}/{root['ts']}": [root, *c.replies.get(root["ts"], [])]
            for c in self.channels.values()
            if c.member
            for root in c.roots
            if "subtype" not in root
        }

    # -- answering ----------------------------------------------------------------------

    def answer(
        self, method: str, params: dict[str, str], authorization: str
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self.lock:
            self.calls.append(method)
            for fault in self.faults:
                if fault[0] == method:
                    self.faults.remove(fault)
                    return fault[1], fault[2], fault[3]
            if authorization != f"Bearer {TOKEN}":
                return 200, {}, {"ok": False, "error": "invalid_auth"}
            handler = getattr(self, method.replace(".", "_"), None)
            if handler is None:
                return 200, {}, {"ok": False, "error": "unknown_method"}
            return 200, {}, {"ok": True, **handler(params)}

    def auth_test(self, params: dict[str, str]) -> dict[str, Any]:
        return {
            "url": TEAM_URL,
            "team": "Acme",
            "user": "kb-bot",
            "team_id": "T1",
            "user_id": "U09BOT",
            "bot_id": "B09BOT",
        }

    def users_conversations(self, params: dict[str, str]) -> dict[str, Any]:
        rows = [
            {
                "id": c.id,
                "name": c.name,
                "is_channel": True,
                "is_private": c.private,
                "is_archived": False,
                "is_member": True,
            }
            for c in self.channels.values()
            if c.member
        ]
        return page(rows, params, "channels")

    def conversations_history(self, params: dict[str, str]) -> dict[str, Any]:
        where = self.channels.get(params.get("channel", ""))
        if where is None or not where.member:
            return {"ok": False, "error": "not_in_channel"}
        rows = sorted(where.roots, key=lambda m: float(m["ts"]), reverse=True)
        return page([dict(m) for m in rows], params, "messages")

    def conversations_replies(self, params: dict[str, str]) -> dict[str, Any]:
        where = self.channels[params["channel"]]
        root = next((m for m in where.roots if m["ts"] == params["ts"]), None)
        if root is None:
            return {"ok": False, "error": "thread_not_found"}
        rows = [dict(root), *where.replies.get(root["ts"], [])]
        return page(rows, params, "messages")

    def conversations_members(self, params: dict[str, str]) -> dict[str, Any]:
        where = self.channels.get(params.get("channel", ""))
        if where is None:
            return {"ok": False, "error": "channel_not_found"}
        if not where.member:
            return {"ok": False, "error": "not_in_channel"}
        return page(list(where.members), params, "members")

    def users_info(self, params: dict[str, str]) -> dict[str, Any]:
        user = params["user"]
        name = USERS.get(user, user)
        profile = {"display_name": name, "real_name": name.title()}
        if user in USERS:  # a bot's profile has no address
            profile["email"] = email(user)
        return {
            "user": {
                "id": user,
                "name": name,
                "real_name": name.title(),
                "is_bot": user not in USERS,
                "profile": profile,
            }
        }


def email(user: str) -> str:
    """The address Slack shows of a person (to a token with users:read.email)."""
    return f"{USERS[user]}@acme.example.com"


def page(rows: list[Any], params: dict[str, str], key: str) -> dict[str, Any]:
    """One page of `rows` from the opaque cursor, as Slack pages."""
    start = int(base64.b64decode(params["cursor"]).decode()) if params.get("cursor") else 0
    size = int(params.get("limit", "100"))
    end = start + size
    more = end < len(rows)
    cursor = base64.b64encode(str(end).encode()).decode() if more else ""
    return {key: rows[start:end], "has_more": more, "response_metadata": {"next_cursor": cursor}}


class Handler(loopback.Handler):
    slack: Slack

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        form = self.rfile.read(length).decode() if length else ""
        params = dict(urllib.parse.parse_qsl(url.query)) | dict(urllib.parse.parse_qsl(form))
        method = url.path.removeprefix("/api/")
        status, headers, body = self.slack.answer(
            method, params, self.headers.get("Authorization", "")
        )
        kind = {"Content-Type": "application/json; charset=utf-8"}
        self.respond(status, json.dumps(body).encode(), kind | headers)

    do_GET = do_POST


@contextmanager
def slack() -> Iterator[Slack]:
    state = Slack()
    with loopback.serving(type("Bound", (Handler,), {"slack": state})) as url:
        state.url = url + "/api"
        yield state
