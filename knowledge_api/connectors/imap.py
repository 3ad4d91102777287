"""A mailbox over IMAP: one document per thread, as `ingest` makes of mail files.

Each run lists every folder's UIDs and reads the headers that link messages into threads
(Message-ID, In-Reply-To, References, Subject, Date); only the messages of a thread
that gained a message since the cursor are read whole. The cursor keeps, per folder,
its UIDVALIDITY and the UIDs seen: a folder whose UIDVALIDITY changed is read again
from the start, and a folder that lost a message has its threads rewritten (a thread
whose every message went is pruned by the run).
"""

from __future__ import annotations

import contextlib
import email
import imaplib
import json
import re
import ssl
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from email import policy
from typing import Any, ClassVar

from knowledge_api.connectors.base import Runtime, Window, check_settings, secret, split
from knowledge_api.errors import ConnectorFailed, ExtractionError, InvalidRequest
from knowledge_api.ingest import mail
from knowledge_api.models import ConnectorSource, Document

SETTINGS = ("user", "folders", "tls", "cafile", "timeout")
SECRETS = ("password", "token")
THREAD_HEADERS = "MESSAGE-ID IN-REPLY-TO REFERENCES SUBJECT DATE FROM"
_UID = re.compile(rb"UID (\d+)")
_VALIDITY = re.compile(rb"UIDVALIDITY (\d+)")
FETCH_BATCH = 500


@dataclass(frozen=True)
class Folder:
    """A folder as one run found it: its UIDVALIDITY and each UID's message headers."""

    name: str
    validity: int
    headers: dict[int, mail.Mail]


class IMAPConnector:
    kind: ClassVar[str] = "imap"

    def __init__(self, source: ConnectorSource, collection: str) -> None:
        check(source)
        self.source = source
        self.collection = collection
        url = urllib.parse.urlsplit(source.url)
        self.secure = url.scheme == "imaps"
        self.host = url.hostname or ""
        self.port = url.port or (993 if self.secure else 143)
        self.folders = split(source.settings.get("folders", "")) or ["INBOX"]
        self.timeout = float(source.settings.get("timeout", "30"))
        self.client: imaplib.IMAP4 | None = None
        self.found: list[Folder] = []
        self.problems: list[str] = []
        """Messages left out of the last run, each with its folder and reason."""

    @classmethod
    def from_settings(
        cls, source: ConnectorSource, collection: str, runtime: Runtime
    ) -> IMAPConnector:
        return cls(source, collection)  # IMAP: no HTTP calls to retry

    # -- the connector --------------------------------------------------------------

    def changed(self, since: str) -> Window:
        """The threads with a message new since the cursor `since` (the UIDs each folder
        held), all of them when a message is gone; every folder's headers are read, so
        the window knows every id and the run prunes at each run."""
        known = read_cursor(since)
        self.found = [self.folder(name) for name in self.folders]
        fresh: set[tuple[str, int]] = set()
        lost = False
        for folder in self.found:
            validity, seen = known.get(folder.name, (0, set()))
            if validity != folder.validity:
                seen = set()
            fresh |= {(folder.name, uid) for uid in folder.headers.keys() - seen}
            lost = lost or bool(seen - folder.headers.keys())
        threads = mail.group(list(self.unique().values()))
        where = self.places()
        rewritten = [
            thread
            for thread in threads
            if lost or any(where[m.message_id] in fresh for m in thread)
        ]
        documents = self.read([where[m.message_id] for thread in rewritten for m in thread])
        state = {f.name: {"validity": f.validity, "uids": uid_set(f.headers)} for f in self.found}
        cursor = json.dumps(state, sort_keys=True)
        return Window(documents, cursor, self.problems, seen=self.visible())

    def visible(self) -> set[str]:
        """Every thread's id and every message's id (an attachment's source id is its
        message's id, a slash and its file name)."""
        messages = list(self.unique().values())
        return {mail.thread_id(t) for t in mail.group(messages)} | {m.message_id for m in messages}

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(imaplib.IMAP4.error, OSError):  # the server went first
                self.client.logout()
            self.client = None

    # -- reading ----------------------------------------------------------------------

    def unique(self) -> dict[str, mail.Mail]:
        """Each message once (a copy in a second folder is the same message)."""
        found: dict[str, mail.Mail] = {}
        for folder in self.found:
            for uid in sorted(folder.headers):
                found.setdefault(folder.headers[uid].message_id, folder.headers[uid])
        return found

    def places(self) -> dict[str, tuple[str, int]]:
        """Message id -> the folder and UID it is read from."""
        where: dict[str, tuple[str, int]] = {}
        for folder in self.found:
            for uid in sorted(folder.headers):
                where.setdefault(folder.headers[uid].message_id, (folder.name, uid))
        return where

    def folder(self, name: str) -> Folder:
        client = self.connected()
        status, data = client.select(quote(name), readonly=True)
        if status != "OK":
            raise ConnectorFailed(f"{self.where()} has no folder {name!r}: {text(data)}")
        validity = self.validity(client, name)
        headers: dict[int, mail.Mail] = {}
        uids = self.uids(client)
        for part in batches(uids):
            for uid, raw in self.fetch(
                client, part, f"BODY.PEEK[HEADER.FIELDS ({THREAD_HEADERS})]"
            ):
                headers[uid] = self.headers(raw, name)
        return Folder(name, validity, headers)

    def read(self, places: Iterable[tuple[str, int]]) -> list[Document]:
        """The thread documents (and attachments) of these messages, read whole."""
        threads = mail.Threads(collection=self.collection)
        by_folder: dict[str, list[int]] = {}
        for folder, uid in places:
            by_folder.setdefault(folder, []).append(uid)
        client = self.connected()
        for folder, uids in by_folder.items():
            client.select(quote(folder), readonly=True)
            for part in batches(sorted(uids)):
                for uid, raw in self.fetch(client, part, "BODY.PEEK[]"):
                    name = f"{self.where()}/{folder}"
                    try:
                        message = mail.parse(raw)
                    except ExtractionError as e:
                        threads.problems.append(mail.Problem(name, e.reason, f"UID {uid}"))
                        continue
                    threads.add(threads.mail(message, name, folder))
        self.problems = [f"{p.file}: {p.reason} ({p.detail})" for p in threads.problems]
        return threads.documents()

    def headers(self, raw: bytes, folder: str) -> mail.Mail:
        """A message known by its thread headers alone (how it joins a thread)."""
        message = email.message_from_bytes(raw, policy=policy.compat32)
        return mail.Threads().mail(message, f"{self.where()}/{folder}", folder)

    def validity(self, client: imaplib.IMAP4, name: str) -> int:
        _, data = client.response("UIDVALIDITY")
        for item in data:
            if isinstance(item, bytes) and item.isdigit():
                return int(item)
        status, data = client.status(quote(name), "(UIDVALIDITY)")
        found = _VALIDITY.search(data[0] if data and isinstance(data[0], bytes) else b"")
        if status != "OK" or found is None:
            raise ConnectorFailed(f"{self.where()} gave no UIDVALIDITY for {name!r}")
        return int(found.group(1))

    def uids(self, client: imaplib.IMAP4) -> list[int]:
        status, data = client.uid("SEARCH", "ALL")
        if status != "OK":
            raise ConnectorFailed(f"{self.where()} refused to list UIDs: {text(data)}")
        return sorted(int(uid) for uid in (data[0] or b"").split())

    def fetch(
        self, client: imaplib.IMAP4, uids: list[int], what: str
    ) -> Iterator[tuple[int, bytes]]:
        status, data = client.uid("FETCH", ",".join(map(str, uids)), f"(UID {what})")
        if status != "OK":
            raise ConnectorFailed(f"{self.where()} refused to fetch messages: {text(data)}")
        for item in data:
            if isinstance(item, tuple) and len(item) == 2:
                found = _UID.search(item[0])
                if found is not None:
                    yield int(found.group(1)), item[1]

    def connected(self) -> imaplib.IMAP4:
        if self.client is not None:
            return self.client
        # an unset variable is said before connecting
        password, token = secret(self.source, "password"), secret(self.source, "token")
        context = ssl.create_default_context()
        cafile = self.source.settings.get("cafile")
        try:
            if cafile:
                context.load_verify_locations(cafile)
        except (OSError, ssl.SSLError) as e:
            raise ConnectorFailed(f"settings.cafile {cafile!r} cannot be read: {e}") from e
        try:
            client = (
                imaplib.IMAP4_SSL(self.host, self.port, ssl_context=context, timeout=self.timeout)
                if self.secure
                else imaplib.IMAP4(self.host, self.port, timeout=self.timeout)
            )
        except (OSError, imaplib.IMAP4.error) as e:
            raise ConnectorFailed(f"{self.where()} is unreachable: {e}") from e
        user = self.source.settings.get("user", "")
        try:
            if self.source.settings.get("tls") == "starttls":
                client.starttls(context)
        except (OSError, imaplib.IMAP4.error) as e:
            dropped(client)
            raise ConnectorFailed(f"{self.where()} could not upgrade to TLS: {e}") from e
        try:
            if token:
                client.authenticate("XOAUTH2", lambda challenge: xoauth2(user, token, challenge))
            else:
                client.login(user, password)
        except (OSError, imaplib.IMAP4.error) as e:
            dropped(client)
            raise ConnectorFailed(f"{self.where()} refused the login of {user!r}: {e}") from e
        self.client = client
        return client

    def where(self) -> str:
        scheme = "imaps" if self.secure else "imap"
        return f"{scheme}://{self.host}:{self.port}"


def dropped(client: imaplib.IMAP4) -> None:
    """The connection closed without a goodbye (one a failed TLS handshake left half
    made cannot say one)."""
    with contextlib.suppress(OSError):
        client.shutdown()
    with contextlib.suppress(OSError):
        client.sock.close()


def check(source: ConnectorSource) -> None:
    """InvalidRequest naming the field for a source this connector cannot read."""
    url = urllib.parse.urlsplit(source.url)
    if url.scheme not in ("imap", "imaps") or not url.hostname:
        raise InvalidRequest("url", "must be imap://HOST[:PORT] or imaps://HOST[:PORT]")
    try:
        url.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as e:
        raise InvalidRequest("url", "must be imap://HOST[:PORT] or imaps://HOST[:PORT]") from e
    check_settings(source, SETTINGS, SECRETS)
    if source.settings.get("tls", "starttls") != "starttls":
        raise InvalidRequest("settings.tls", "must be starttls (imaps:// for TLS from the start)")
    if url.scheme == "imaps" and "tls" in source.settings:
        raise InvalidRequest("settings.tls", "is for imap://: imaps:// is TLS from the start")
    if not source.settings.get("user"):
        raise InvalidRequest("settings.user", "an IMAP source needs --set user=NAME")
    given = [key for key in SECRETS if key in source.secrets]
    if len(given) != 1:
        raise InvalidRequest(
            f"secrets.{given[-1] if given else 'password'}",
            "an IMAP source takes exactly one of --secret password=ENV_VAR or "
            "--secret token=ENV_VAR (an OAuth 2.0 access token, sent by XOAUTH2)",
        )


def xoauth2(user: str, token: str, challenge: bytes) -> bytes:
    """The client's answer in SASL XOAUTH2 (imaplib encodes it in base64): to the empty
    first challenge, the user and the bearer token; to a server's error (a JSON
    challenge after a refused token), the empty answer that ends the exchange."""
    if challenge:
        return b""
    return f"user={user}\x01auth=Bearer {token}\x01\x01".encode()


def read_cursor(cursor: str) -> dict[str, tuple[int, set[int]]]:
    """Folder -> (UIDVALIDITY, UIDs seen) of the cursor a run left."""
    if not cursor:
        return {}
    state: dict[str, Any] = json.loads(cursor)
    return {
        name: (int(folder["validity"]), uids_of(str(folder["uids"])))
        for name, folder in state.items()
    }


def uid_set(uids: Iterable[int]) -> str:
    """UIDs as an IMAP sequence set, runs written as ranges: `1:40,42,45:50`."""
    ranges: list[list[int]] = []
    for uid in sorted(uids):
        if ranges and uid == ranges[-1][1] + 1:
            ranges[-1][1] = uid
        else:
            ranges.append([uid, uid])
    return ",".join(str(a) if a == b else f"{a}:{b}" for a, b in ranges)


def uids_of(sequence: str) -> set[int]:
    found: set[int] = set()
    for part in filter(None, sequence.split(",")):
        first, _, last = part.partition(":")
        found.update(range(int(first), int(last or first) + 1))
    return found


def batches(uids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(uids), FETCH_BATCH):
        yield uids[start : start + FETCH_BATCH]


def quote(folder: str) -> str:
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text(data: Any) -> str:
    return " ".join(d.decode(errors="replace") for d in data if isinstance(d, bytes))
