"""E-mail files as threads: `.eml`, `.mbox`, Maildir folders and Outlook `.msg`.

Every message read in one run goes into a thread index (its ids, headers and its own
text: quoted lines, the "On ... wrote:" line and the signature dropped, so a sentence
of a thread is kept once); once the files are read, each thread becomes one document
with a section per message. An mbox is read a message at a time, so a large mailbox
costs the index, never the whole file. Attachments of a known type go through the
file extractors and become documents of their own, pointing at their thread.

A message that cannot be read (broken MIME, a mailbox cut off within its last
message, an attachment over the file limit) is an error of its file, named in
`skipped`; the other messages are indexed.
"""

from __future__ import annotations

import email.errors
import hashlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email import policy
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesParser
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path, PurePosixPath
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import ConfigurationError, ExtractionError
from knowledge_api.ingest.extract import IMAGES, extractor, html_to_markdown, literal
from knowledge_api.models import Document
from knowledge_api.registry import import_extra

SUFFIXES = (".eml", ".mbox", ".msg")
MAIL_EXTRA = "mail"
SOURCE_TYPE = "email"
MAILDIR_FOLDERS = ("cur", "new")
BROKEN_MIME = (
    email.errors.StartBoundaryNotFoundDefect,
    email.errors.NoBoundaryInMultipartDefect,
    email.errors.MultipartInvariantViolationDefect,
    email.errors.MissingHeaderBodySeparatorDefect,
)
CUT_OFF = (email.errors.CloseBoundaryNotFoundDefect,)
_REPLY_PREFIX = re.compile(r"^\s*((re|fwd?|aw|wg|sv|tr)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_WROTE = re.compile(r"^On\b[^\n]*(\n[^\n]*)?\bwrote:[ \t]*$", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")
_ID = re.compile(r"<([^<>\s]+)>")
_PARSER = BytesParser(policy=policy.compat32)
"""compat32: headers kept as text and decoded here when read (the default policy parses
every header into objects, ten times the cost of the rest of reading a message)."""


@dataclass(slots=True)
class Mail:
    """A message as its thread keeps it: headers and its own text, nothing else."""

    message_id: str
    parents: list[str]
    subject: str
    reply: bool
    """Its subject said Re:/Fwd: (joins a thread by subject when it names no parent)."""
    sender: str
    to: str
    cc: str
    date: datetime | None
    text: str
    folder: str
    file: str
    attachments: list[Document] = field(default_factory=list)

    def addresses(self) -> list[str]:
        pairs = getaddresses([self.sender, self.to, self.cc])
        return [address.lower() for _, address in pairs if "@" in address]


@dataclass(frozen=True)
class Problem:
    """A message or attachment left out: the file, a short reason and what it was."""

    file: str
    reason: str
    detail: str


@dataclass
class Threads:
    """The thread index of one run: messages added file by file, documents at the end."""

    source_type: str = SOURCE_TYPE
    collection: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    max_file_bytes: int = 50 * 2**20
    messages: dict[str, Mail] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def read(self, path: Path, name: str) -> None:
        """The messages of the file `path` (named `name`); ExtractionError when it
        holds none that can be read."""
        folder = folder_of(path, name)
        if name.lower().endswith(".msg"):
            self.add(self.outlook(path, name, folder))
            return
        found = 0
        for number, raw, last in raw_messages(path, name):
            found += 1
            try:
                message = parse(raw, last)
            except ExtractionError as e:
                where = f"message {number}" if name.lower().endswith(".mbox") else "the message"
                self.problems.append(Problem(name, e.reason, f"{where}: {e.detail}"))
                continue
            self.add(self.mail(message, name, folder))
        if not found:
            raise ExtractionError("no messages", "not an e-mail file")

    def add(self, mail: Mail) -> None:
        self.messages.setdefault(mail.message_id, mail)

    def mail(self, message: Message, name: str, folder: str) -> Mail:
        mail = Mail(
            message_id=message_id(message),
            parents=parent_ids(message),
            subject=normal_subject(header(message, "subject")),
            reply=bool(_REPLY_PREFIX.match(header(message, "subject"))),
            sender=header(message, "from"),
            to=header(message, "to"),
            cc=header(message, "cc"),
            date=message_date(header(message, "date")),
            text=own_text(body_text(message)),
            folder=folder,
            file=name,
        )
        for part in attachments(message):
            data = part.get_payload(decode=True)
            if isinstance(data, bytes):
                self.attach(mail, part.get_filename() or "", data)
        return mail

    def outlook(self, path: Path, name: str, folder: str) -> Mail:
        """An Outlook .msg file, read with extract-msg (the `mail` extra)."""
        extract_msg = import_extra("extract_msg", MAIL_EXTRA)
        try:
            msg = extract_msg.openMsg(str(path))
        except Exception as e:  # olefile and extract-msg raise many kinds on a bad file
            raise ExtractionError("unreadable MSG", f"{type(e).__name__}: {e}") from e
        try:
            return self.outlook_mail(msg, name, folder)
        except ExtractionError:
            raise
        except Exception as e:  # a property extract-msg cannot decode
            raise ExtractionError("unreadable MSG", f"{type(e).__name__}: {e}") from e
        finally:
            msg.close()

    def outlook_mail(self, msg: Any, name: str, folder: str) -> Mail:
        """The message of an opened .msg file: its transport headers name its parents
        and give its date when the file holds no submit time."""
        html = msg.htmlBody if not msg.body else None
        text = msg.body or (html_text(html) if html else "")
        raw_subject = str(msg.subject or "")
        sent = msg.date
        transport = msg.header
        sent_date = message_date(header(transport, "date")) if transport is not None else None
        mail = Mail(
            message_id=strip_id(str(msg.messageId or "")) or synthetic_id(raw_subject, text),
            parents=parent_ids(transport) if transport is not None else [],
            subject=normal_subject(raw_subject),
            reply=bool(_REPLY_PREFIX.match(raw_subject)),
            sender=str(msg.sender or ""),
            to=str(msg.to or ""),
            cc=str(msg.cc or ""),
            date=sent.astimezone(UTC) if isinstance(sent, datetime) else sent_date,
            text=own_text(text),
            folder=folder,
            file=name,
        )
        for attachment in msg.attachments:
            data = getattr(attachment, "data", None)
            filename = str(getattr(attachment, "longFilename", "") or "")
            if isinstance(data, bytes):
                self.attach(mail, filename, data)
        return mail

    def attach(self, mail: Mail, filename: str, data: bytes) -> None:
        """An attachment of a type the extractors read, as a document of its own."""
        suffix = PurePosixPath(filename).suffix.lower()
        extract = extractor(suffix)
        if extract is None or suffix in IMAGES:
            return  # logos, archives, calendar invites: not knowledge of the thread
        where = f"{filename} of message <{mail.message_id}>"
        if len(data) > self.max_file_bytes:
            limit = self.max_file_bytes // 2**20
            self.problems.append(
                Problem(mail.file, "attachment too large", f"{where}: over the {limit} MB limit")
            )
            return
        try:
            with tempfile.TemporaryDirectory() as folder:
                kept = Path(folder) / f"attachment{suffix}"
                kept.write_bytes(data)
                extracted = extract(kept, None)
        except ConfigurationError as e:
            self.problems.append(Problem(mail.file, "extractor not installed", e.message))
            return
        except ExtractionError as e:
            reason = f"attachment {e.reason}"
            self.problems.append(Problem(mail.file, reason, f"{where}: {e.detail}".rstrip(": ")))
            return
        mail.attachments.append(
            Document(
                source_type=self.source_type,
                source_id=f"{mail.message_id}/{filename}",
                content=extracted.content,
                title=extracted.title or filename,
                metadata={
                    "path": mail.file,
                    "format": suffix.lstrip("."),
                    **extracted.metadata,
                    "attachment": filename,
                    **self.metadata,
                },
                collection=self.collection,
                created_at=validation.utc_text(mail.date) if mail.date else "",
                updated_at=validation.utc_text(mail.date) if mail.date else "",
            )
        )

    def documents(self) -> list[Document]:
        """A document per thread, then the attachments, each naming its thread."""
        documents: list[Document] = []
        attachments: list[Document] = []
        for thread in group(list(self.messages.values())):
            doc = self.thread_document(thread)
            documents.append(doc)
            for mail in thread:
                attachments += [
                    replace(a, metadata={**a.metadata, "thread": doc.source_id})
                    for a in mail.attachments
                ]
        return documents + attachments

    def thread_document(self, thread: list[Mail]) -> Document:
        dates = [mail.date for mail in thread if mail.date is not None]
        subject = next((mail.subject for mail in thread if mail.subject), "")
        participants = sorted({address for mail in thread for address in mail.addresses()})
        metadata: dict[str, Any] = {
            "format": "email",
            "subject": subject,
            "participants": ", ".join(participants),
            "message_ids": " ".join(mail.message_id for mail in thread),
            "folder": ", ".join(sorted({mail.folder for mail in thread if mail.folder})),
            "path": ", ".join(sorted({mail.file for mail in thread})),
        }
        if dates:
            metadata["first_date"] = min(dates).isoformat()
            metadata["last_date"] = max(dates).isoformat()
        return Document(
            source_type=self.source_type,
            source_id=thread_id(thread),
            content="\n\n".join(section(mail) for mail in thread),
            title=subject or "(no subject)",
            metadata={**metadata, **self.metadata},
            collection=self.collection,
            created_at=validation.utc_text(min(dates)) if dates else "",
            updated_at=validation.utc_text(max(dates)) if dates else "",
        )


def is_mail(path: Path, name: str) -> bool:
    """An e-mail file by its suffix, or a message file of a Maildir folder (a file in
    `cur` or `new` beside the other)."""
    if PurePosixPath(name).suffix.lower() in SUFFIXES:
        return True
    parent = path.parent
    return parent.name in MAILDIR_FOLDERS and all(
        (parent.parent / folder).is_dir() for folder in MAILDIR_FOLDERS
    )


def in_maildir_tmp(path: Path) -> bool:
    """A file of a Maildir's `tmp` folder: a message still being delivered."""
    parent = path.parent
    return parent.name == "tmp" and all((parent.parent / f).is_dir() for f in MAILDIR_FOLDERS)


def folder_of(path: Path, name: str) -> str:
    """The mailbox a message was filed in: a Maildir's folder name, an mbox's stem,
    the folder of an .eml or .msg file."""
    if path.parent.name in MAILDIR_FOLDERS and not name.lower().endswith(SUFFIXES):
        return path.parent.parent.name.lstrip(".") or "INBOX"
    if name.lower().endswith(".mbox"):
        return PurePosixPath(name).stem
    return PurePosixPath(name).parent.as_posix().strip(".")


def raw_messages(path: Path, name: str) -> Iterator[tuple[int, bytes, bool | None]]:
    """(number, bytes, last) of each message: one for an .eml or Maildir file, every
    message of an mbox read one at a time. `last` is True for an mbox's last message,
    None when the file ends inside it (no final line break), False otherwise."""
    if not name.lower().endswith(".mbox"):
        yield 1, path.read_bytes(), False
        return
    number, ended = 0, True
    lines: list[bytes] = []
    with path.open("rb") as file:
        for line in file:
            ended = line.endswith(b"\n")
            if line.startswith(b"From "):
                if lines:
                    number += 1
                    yield number, b"".join(lines), False
                lines = []
                continue
            if line.startswith(b">") and line.lstrip(b">").startswith(b"From "):
                line = line[1:]  # mboxrd's escaped "From " line
            lines.append(line)
    if lines:
        yield number + 1, b"".join(lines), True if ended else None


def parse(raw: bytes, last: bool | None = False) -> Message:
    """A message, or ExtractionError("broken MIME") when its structure is broken
    ("cut-off mailbox" when the last message of an mbox ends inside it: mid-line, or
    within a multipart before its closing boundary)."""
    message = _PARSER.parsebytes(raw)
    defects = [defect for part in message.walk() for defect in part.defects]
    if last is None or (last and any(isinstance(d, CUT_OFF) for d in defects)):
        raise ExtractionError("cut-off mailbox", "it ends inside its last message")
    broken = [d for d in defects if isinstance(d, BROKEN_MIME + CUT_OFF)]
    if broken:
        raise ExtractionError("broken MIME", type(broken[0]).__name__)
    if not any(message.get(name) for name in ("from", "date", "message-id", "subject")):
        raise ExtractionError("not a message", "no From, Date, Message-ID or Subject header")
    return message


def header(message: Message, name: str) -> str:
    """A header's text, its encoded words (RFC 2047) decoded; one that does not decode
    is read as it was written."""
    value = message.get(name)
    if value is None:
        return ""
    try:
        text = str(make_header(decode_header(str(value))))
    except (ValueError, LookupError, UnicodeError, email.errors.HeaderParseError):
        text = str(value)
    return " ".join(text.split())


def message_id(message: Message) -> str:
    found = strip_id(header(message, "message-id"))
    return found or synthetic_id(header(message, "subject"), header(message, "date"))


def strip_id(value: str) -> str:
    found = _ID.search(value)
    return found.group(1) if found else value.strip().strip("<>")


def synthetic_id(*parts: str) -> str:
    """An id for a message without one, the same each time it is read."""
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:20] + "@no-message-id"


def parent_ids(message: Message) -> list[str]:
    """The ids a message replies to: its References, then its In-Reply-To."""
    ids = _ID.findall(header(message, "references")) + _ID.findall(header(message, "in-reply-to"))
    return list(dict.fromkeys(ids))


def normal_subject(subject: str) -> str:
    """The subject without its Re:/Fwd: prefixes (a thread's fallback key)."""
    return " ".join(_REPLY_PREFIX.sub("", subject).split())


def message_date(value: str) -> datetime | None:
    try:
        found = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if found.tzinfo is None:
        found = found.replace(tzinfo=UTC)
    return found.astimezone(UTC)


def body_text(message: Message) -> str:
    """The message's text: its first plain part, else its first HTML part as text."""
    leaves = [part for part in message.walk() if not part.is_multipart()]
    texts = [part for part in leaves if part.get_content_maintype() == "text"]
    bodies = [part for part in texts if not is_attachment(part)]
    for subtype in ("plain", "html"):
        body = next((part for part in bodies if part.get_content_subtype() == subtype), None)
        if body is not None:
            text = decoded(body)
            return html_text(text) if subtype == "html" else text
    return ""


def attachments(message: Message) -> list[Message]:
    return [part for part in message.walk() if not part.is_multipart() and is_attachment(part)]


def is_attachment(part: Message) -> bool:
    """A part sent as a file: marked as an attachment, or named."""
    return part.get_content_disposition() == "attachment" or part.get_filename() is not None


def decoded(part: Message) -> str:
    """A part's text in its charset; an unknown charset or bytes it does not hold are
    read as UTF-8, undecodable bytes replaced."""
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    charset = part.get_content_charset() or "utf-8"
    try:
        return data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def html_text(html: str | bytes) -> str:
    """An HTML body as text, its quoted replies (blockquote, Gmail's and Outlook's
    quote blocks) left out."""
    from lxml import html as lxml_html

    try:
        tree = lxml_html.document_fromstring(html)
    except Exception:  # lxml refuses empty or odd markup: nothing to read then
        return ""
    quoted = "//blockquote | //*[contains(@class, 'gmail_quote')] | //*[@id='divRplyFwdMsg']"
    for element in tree.xpath(quoted):
        element.drop_tree()
    cleaned = lxml_html.tostring(tree, encoding="unicode")
    try:
        return html_to_markdown(cleaned).content
    except ExtractionError:  # too little for a main content: the plain text then
        return str(tree.text_content())


def own_text(text: str) -> str:
    """What the writer of a message wrote: quoted ('>') lines, the "On ... wrote:"
    line and everything from the signature ("-- ") or a forwarded original left out."""
    kept: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.rstrip() == "--" or line.strip().startswith("-----Original Message-----"):
            break
        if not line.lstrip().startswith(">"):
            kept.append(line.rstrip())
    own = _WROTE.sub("", "\n".join(kept))
    return _BLANKS.sub("\n\n", own).strip()


def group(messages: list[Mail]) -> list[list[Mail]]:
    """The messages in threads, each in date order, the threads in the order of their
    first message: linked by Message-ID, In-Reply-To and References; a reply naming no
    parent joins the thread of its subject."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for mail in messages:
        for other in mail.parents:
            parent[root(other)] = root(mail.message_id)
    by_subject: dict[str, str] = {}
    for mail in sorted(messages, key=when):
        if mail.subject and (mail.parents or not mail.reply):
            by_subject.setdefault(mail.subject.lower(), mail.message_id)
    for mail in messages:
        starter = by_subject.get(mail.subject.lower())
        if mail.reply and not mail.parents and starter is not None:
            parent[root(mail.message_id)] = root(starter)
    threads: dict[str, list[Mail]] = {}
    for mail in sorted(messages, key=when):
        threads.setdefault(root(mail.message_id), []).append(mail)
    return list(threads.values())


def when(mail: Mail) -> tuple[datetime, str]:
    return (mail.date or datetime.max.replace(tzinfo=UTC), mail.message_id)


def thread_id(thread: list[Mail]) -> str:
    """The id of the thread's first message, or of the message it replies to first
    when that one was not read: the same thread keeps its id as replies come in."""
    first = thread[0]
    return first.parents[0] if first.parents else first.message_id


def section(mail: Mail) -> str:
    date = mail.date.isoformat() if mail.date else ""
    who = getaddresses([mail.sender])
    name = (who[0][0] or who[0][1]) if who else mail.sender
    heading = f"## {name or 'unknown sender'}" + (
        f", {date[:16].replace('T', ' ')}" if date else ""
    )
    lines = [f"From: {mail.sender}", f"To: {mail.to}"]
    if mail.cc:
        lines.append(f"Cc: {mail.cc}")
    if date:
        lines.append(f"Date: {date}")
    return "\n\n".join([heading, "\n".join(lines), literal(mail.text)]).rstrip()
