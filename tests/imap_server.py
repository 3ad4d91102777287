"""A real Dovecot for the IMAP connector's tests: started on a loopback port from a
configuration in a temporary folder, one passwd-file user and a Maildir the test fills
(and changes over IMAP between syncs, as a mail client would)."""

from __future__ import annotations

import imaplib
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import ClassVar

import pytest

from tests import loopback
from tests.documents import email_message

DOVECOT = shutil.which("dovecot") or (
    "/usr/sbin/dovecot" if Path("/usr/sbin/dovecot").exists() else None
)
USER, PASSWORD = "alice", "imap-secret-41"
TOKEN = "ya29.test-access-token-17"
"""The one access token the test's OAuth 2.0 introspection endpoint calls active."""


def needs_dovecot() -> None:
    if DOVECOT is None:
        pytest.skip("Dovecot is not installed: apt-get install dovecot-imapd")


@dataclass
class Mailbox:
    port: int
    home: Path
    cafile: Path | None = None

    @property
    def url(self) -> str:
        return f"imap://127.0.0.1:{self.port}"

    @contextmanager
    def client(self) -> Iterator[imaplib.IMAP4]:
        client = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        if self.cafile is not None:
            client.starttls(ssl.create_default_context(cafile=str(self.cafile)))
        client.login(USER, PASSWORD)
        try:
            yield client
        finally:
            client.logout()

    def deliver(self, message: EmailMessage, folder: str = "") -> None:
        """A message written into the Maildir as a delivery agent would."""
        maildir = self.home / "Maildir" / (f".{folder}" if folder else "")
        for part in ("cur", "new", "tmp"):
            (maildir / part).mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns()}.{os.getpid()}.test"
        (maildir / "new" / name).write_bytes(bytes(message))
        owned(self.home)

    def append(self, message: EmailMessage, folder: str = "INBOX") -> None:
        with self.client() as client:
            status, data = client.append(folder, None, None, bytes(message))
            assert status == "OK", data

    def expunge(self, message_id: str, folder: str = "INBOX") -> None:
        with self.client() as client:
            client.select(folder)
            _, found = client.uid("SEARCH", "HEADER", "Message-ID", message_id)
            assert found[0], f"no message {message_id} in {folder}"
            client.uid("STORE", found[0].decode().replace(" ", ","), "+FLAGS", r"(\Deleted)")
            client.expunge()

    def flag(self, message_id: str, folder: str = "INBOX") -> None:
        with self.client() as client:
            client.select(folder)
            _, found = client.uid("SEARCH", "HEADER", "Message-ID", message_id)
            client.uid("STORE", found[0].decode(), "+FLAGS", r"(\Flagged \Seen)")

    def recreate(self, folder: str, messages: list[EmailMessage]) -> None:
        """The folder deleted and made again with these messages: a new UIDVALIDITY."""
        with self.client() as client:
            assert client.delete(folder)[0] == "OK"
            assert client.create(folder)[0] == "OK"
        for message in messages:
            self.append(message, folder)

    def create(self, folder: str) -> None:
        with self.client() as client:
            assert client.create(folder)[0] == "OK"

    def validity(self, folder: str) -> int:
        with self.client() as client:
            client.select(folder, readonly=True)
            return int(client.response("UIDVALIDITY")[1][0])


VENDOR = "vendor@example.com"
SUPPORT = "support@example.com"


def message(message_id: str, subject: str, body: str) -> EmailMessage:
    """A vendor's message to support, on 2 March 2026 at 10:00."""
    date = "Mon, 02 Mar 2026 10:00:00 +0000"
    return email_message(subject, body, VENDOR, SUPPORT, message_id, date=date)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def owned(path: Path) -> None:
    """Root runs the test: the mail belongs to the mail user (`nobody`), as Dovecot
    refuses to read mail as root."""
    if os.getuid() == 0:
        for found in [path, *path.rglob("*")]:
            os.chown(found, 65534, 65534)


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (the test's own authority)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: apt-get install openssl")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class Introspection(loopback.Handler):
    """An OAuth 2.0 token introspection endpoint (RFC 7662): a POSTed `token` is active,
    for the user, when it is `TOKEN`."""

    asked: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        token = urllib.parse.parse_qs(body).get("token", [""])[0]
        self.asked.append(token)
        answer = {"active": True, "username": USER} if token == TOKEN else {"active": False}
        self.respond(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})


@contextmanager
def introspection() -> Iterator[str]:
    """The introspection endpoint on a loopback port: its URL."""
    with loopback.serving(Introspection) as url:
        yield url + "/introspect"


@contextmanager
def dovecot(tls: bool = False, introspection_url: str = "") -> Iterator[Mailbox]:
    """Dovecot on a loopback port; with `tls`, STARTTLS offered (and required before a
    login) with a certificate `Mailbox.cafile` trusts; with `introspection_url`, SASL
    XOAUTH2 too, its tokens checked at that OAuth 2.0 introspection endpoint."""
    needs_dovecot()
    assert DOVECOT is not None
    root = Path(tempfile.mkdtemp(prefix="imap-test-"))
    root.chmod(0o755)  # the mail user and the login processes reach it
    port = free_port()
    home = root / "home" / USER
    (home / "Maildir").mkdir(parents=True)
    (root / "state").mkdir()
    (root / "passwd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}::::::\n")
    me = os.getuid()
    if me == 0:
        users = "default_internal_user = dovecot\ndefault_login_user = dovenull\n"
        mail_uid = "uid=65534 gid=65534"
    else:
        name = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        users = f"default_internal_user = {name}\ndefault_login_user = {name}\n"
        mail_uid = f"uid={me} gid={os.getgid()}"
    if tls:
        cert, key = certificate(root)
        ssl = f"ssl = required\nssl_cert = <{cert}\nssl_key = <{key}\n"
        ssl += "disable_plaintext_auth = yes\n"
    else:
        ssl = "ssl = no\ndisable_plaintext_auth = no\n"
    mechanisms, oauth2 = "plain login", ""
    if introspection_url:
        (root / "oauth2.conf").write_text(
            f"introspection_mode = post\nintrospection_url = {introspection_url}\n"
            "username_attribute = username\nactive_attribute = active\n"
            "active_value = true\n"
        )
        mechanisms += " xoauth2"
        oauth2 = (
            "passdb {\n  driver = oauth2\n  mechanisms = xoauth2\n"
            f"  args = {root}/oauth2.conf\n}}\n"
        )
    config = root / "dovecot.conf"
    config.write_text(
        f"""base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
{ssl}auth_mechanisms = {mechanisms}
{users}mail_location = maildir:~/Maildir
first_valid_uid = 1
{oauth2}passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = {mail_uid} home={root}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""
    )
    owned(root / "home")
    server = subprocess.Popen([DOVECOT, "-F", "-c", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log = (
                        (root / "dovecot.log").read_text()
                        if (root / "dovecot.log").exists()
                        else ""
                    )
                    raise AssertionError(f"dovecot did not start: {log}") from None
                time.sleep(0.1)
        yield Mailbox(port, home, root / "cert.pem" if tls else None)
    finally:
        server.terminate()
        server.wait(timeout=20)
        shutil.rmtree(root, ignore_errors=True)
