import mailbox
import random
import struct
import sys
from email.message import EmailMessage
from pathlib import Path

import pytest

from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.mail import own_text
from tests.documents import email_message as message
from tests.documents import pdf_bytes, write_docx

RENEWAL = message(
    "Contract renewal",
    "Hi Bob,\n\nThe renewal price for 2027 is 12,000 EUR a year.\n\n-- \nAlice Vendor\nSales",
    msg_id="m1@vendor.example",
    cc="Carol <carol@shop.example>",
)
REPLY = message(
    "Re: Contract renewal",
    "Can you do a three-year term instead?\n\n"
    "On Tue, 6 Oct 2026 at 09:30, Alice Vendor <alice@vendor.example> wrote:\n"
    "> Hi Bob,\n> The renewal price for 2027 is 12,000 EUR a year.\n",
    sender="Bob Buyer <bob@shop.example>",
    to="Alice Vendor <alice@vendor.example>",
    msg_id="m2@shop.example",
    reply_to="m1@vendor.example",
    date="Wed, 07 Oct 2026 10:00:00 +0000",
)


def write(path: Path, msg: EmailMessage) -> Path:
    path.write_bytes(msg.as_bytes())
    return path


def test_a_thread_spread_over_files_is_one_document_with_a_section_per_message(
    tmp_path: Path,
) -> None:
    write(tmp_path / "renewal.eml", RENEWAL)
    box = mailbox.mbox(str(tmp_path / "Sent.mbox"))
    box.add(REPLY)
    box.add(message("Lunch", "Pizza on Friday?", msg_id="m9@shop.example"))
    box.close()
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    threads = {doc.title: doc for doc in loaded}
    assert sorted(threads) == ["Contract renewal", "Lunch"]
    thread = threads["Contract renewal"]
    assert thread.source_type == "email" and thread.source_id == "m1@vendor.example"
    assert thread.metadata == {
        "format": "email",
        "subject": "Contract renewal",
        "participants": "alice@vendor.example, bob@shop.example, carol@shop.example",
        "message_ids": "m1@vendor.example m2@shop.example",
        "folder": "Sent",
        "path": "Sent.mbox, renewal.eml",
        "first_date": "2026-10-06T07:30:00+00:00",
        "last_date": "2026-10-07T10:00:00+00:00",
    }
    content = thread.content
    assert content.count("12,000 EUR") == 1  # the quote of it in the reply is dropped
    assert "wrote:" not in content and "Sales" not in content  # nor the signature
    assert content.index("12,000 EUR") < content.index("three-year term")
    assert "Cc: Carol <carol@shop.example>" in content
    assert "## Bob Buyer, 2026-10-07 10:00" in content


def test_attachments_are_documents_of_their_own_pointing_at_their_thread(tmp_path: Path) -> None:
    msg = message("Quote", "The quote is attached.", msg_id="q1@vendor.example")
    msg.add_attachment(
        pdf_bytes([["Quote: support plan at 3,400 EUR"]]),
        maintype="application",
        subtype="pdf",
        filename="quote.pdf",
    )
    docx = write_docx(tmp_path / "terms.docx")
    msg.add_attachment(
        docx.read_bytes(), maintype="application", subtype="octet-stream", filename="terms.docx"
    )
    msg.add_attachment(b"\x89PNG\r\n", maintype="image", subtype="png", filename="logo.png")
    docx.unlink()
    write(tmp_path / "quote.eml", msg)
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    docs = {doc.source_id: doc for doc in loaded}
    assert sorted(docs) == [
        "q1@vendor.example",
        "q1@vendor.example/quote.pdf",
        "q1@vendor.example/terms.docx",
    ]
    pdf = docs["q1@vendor.example/quote.pdf"]
    assert pdf.source_type == "email" and "3,400 EUR" in pdf.content
    assert pdf.metadata["thread"] == "q1@vendor.example"
    assert pdf.metadata["attachment"] == "quote.pdf"
    assert "How a release goes out." in docs["q1@vendor.example/terms.docx"].content


def test_html_only_message_is_read_without_its_quoted_reply(tmp_path: Path) -> None:
    msg = EmailMessage()
    msg["From"] = "dana@vendor.example"
    msg["Subject"] = "Re: Contract renewal"
    msg["Message-ID"] = "<h1@vendor.example>"
    msg.set_content(
        "<html><body><p>We can offer a three-year term at 10,500 EUR a year.</p>"
        "<blockquote><p>Can you do a three-year term instead?</p></blockquote></body></html>",
        subtype="html",
    )
    write(tmp_path / "offer.eml", msg)
    (doc,) = load_paths([tmp_path], LoadOptions()).documents
    assert "10,500 EUR" in doc.content and "instead?" not in doc.content
    assert doc.title == "Contract renewal"


def test_a_reply_without_references_joins_its_thread_by_subject(tmp_path: Path) -> None:
    write(tmp_path / "a.eml", RENEWAL)
    write(tmp_path / "b.eml", message("RE: Contract renewal", "Agreed.", msg_id="x@shop.example"))
    write(
        tmp_path / "c.eml", message("Contract renewal", "Other vendor.", msg_id="y@other.example")
    )
    docs = load_paths([tmp_path], LoadOptions()).documents
    assert sorted(doc.metadata["message_ids"] for doc in docs) == [
        "m1@vendor.example x@shop.example",
        "y@other.example",
    ]


def test_maildir_messages_are_read_with_their_folder(tmp_path: Path) -> None:
    box = mailbox.Maildir(str(tmp_path / "Support"))
    box.add(RENEWAL)
    box.add(REPLY)
    box.close()
    (tmp_path / "Support" / "tmp" / "123.partial").write_text("half a message")
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    (doc,) = loaded.documents
    assert doc.metadata["folder"] == "Support"
    assert doc.metadata["message_ids"] == "m1@vendor.example m2@shop.example"


def test_bad_messages_are_errors_of_their_file_and_the_rest_is_indexed(tmp_path: Path) -> None:
    broken = (
        b"From: x@vendor.example\nSubject: Broken\nMessage-ID: <b@x>\n"
        b"Content-Type: multipart/mixed\n\nno boundary at all\n"
    )
    box = tmp_path / "INBOX.mbox"
    good = message("Fine", "This one is fine.", msg_id="ok@x").as_bytes()
    multipart = message("Cut", "first part", msg_id="cut@x")
    multipart.add_attachment(b"x" * 200, maintype="text", subtype="plain", filename="a.txt")
    cut = multipart.as_bytes()[:-60]
    box.write_bytes(
        b"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n"
        + good
        + b"\n"
        + b"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n"
        + broken
        + b"\n"
        + b"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n"
        + cut
    )
    big = message("Big", "A big attachment.", msg_id="big@x")
    big.add_attachment(b"a" * (2 * 2**20), maintype="text", subtype="plain", filename="big.txt")
    write(tmp_path / "big.eml", big)
    latin = message("Charset café", "placeholder", msg_id="cs@x")
    latin.set_payload("Caf\xe9 au lait".encode("latin-1"))
    latin.replace_header("Content-Type", 'text/plain; charset="x-unknown-8bit"')
    write(tmp_path / "charset.eml", latin)
    loaded = load_paths([tmp_path], LoadOptions(max_file_mb=1))
    problems = sorted((Path(s.path).name, s.reason, s.detail) for s in loaded.skipped)
    assert problems == [
        ("INBOX.mbox", "broken MIME", "message 2: NoBoundaryInMultipartDefect"),
        ("INBOX.mbox", "cut-off mailbox", "message 3: it ends inside its last message"),
        ("big.eml", "attachment too large", "big.txt of message <big@x>: over the 1 MB limit"),
    ]
    docs = {doc.title: doc for doc in loaded}
    assert sorted(docs) == ["Big", "Charset café", "Fine"]  # an encoded subject decoded
    assert docs["Charset café"].content.endswith("Caf\ufffd au lait")


def test_own_text_drops_quotes_the_wrote_line_and_the_signature() -> None:
    text = (
        "Yes, Friday works.\n\nOn Mon, 5 Oct 2026, Bob Buyer\n<bob@shop.example> wrote:\n"
        "> Does Friday work?\n>> Earlier\n\n-- \nAlice\n+49 30 1234"
    )
    assert own_text(text) == "Yes, Friday works."
    assert own_text("Hi\n-----Original Message-----\nFrom: x\nold text") == "Hi"


def write_msg(path: Path, headers: str, body: str, attachment: tuple[str, bytes]) -> Path:
    """An Outlook .msg file (an OLE compound file of MAPI properties), the few
    properties a reader needs: class, subject, body, sender, transport headers."""
    from extract_msg.ole_writer import OleWriter

    def utf16(text: str) -> bytes:
        return text.encode("utf-16-le")

    def entry(tag: int, value: int) -> bytes:
        return struct.pack("<IIII", tag, 6, value, 0)

    writer = OleWriter()
    strings = {
        0x001A: "IPM.Note",
        0x0037: "Re: Contract renewal",
        0x1000: body,
        0x007D: headers,
        0x0C1A: "Alice Vendor",
        0x0C1F: "alice@vendor.example",
        0x0E04: "bob@shop.example",
    }
    properties = b"\0" * 8 + struct.pack("<IIII", 0, 1, 0, 1) + b"\0" * 8
    for key, text in strings.items():
        writer.addEntry(f"__substg1.0_{key:04X}001F", utf16(text))
        properties += entry(key << 16 | 0x1F, len(utf16(text)) + 2)
    writer.addEntry("__properties_version1.0", properties)
    writer.addEntry("__nameid_version1.0", storage=True)
    for stream in ("00020102", "00030102", "00040102"):
        writer.addEntry(f"__nameid_version1.0/__substg1.0_{stream}", b"")
    folder = "__attach_version1.0_#00000000"
    name, data = attachment
    writer.addEntry(folder, storage=True)
    writer.addEntry(f"{folder}/__substg1.0_3707001F", utf16(name))
    writer.addEntry(f"{folder}/__substg1.0_37010102", data)
    writer.addEntry(
        f"{folder}/__properties_version1.0",
        b"\0" * 8
        + entry(0x37050003, 1)
        + entry(0x3707001F, len(utf16(name)) + 2)
        + entry(0x37010102, len(data)),
    )
    writer.write(str(path))
    return path


MSG_HEADERS = (
    "From: Alice Vendor <alice@vendor.example>\r\nTo: bob@shop.example\r\n"
    "Subject: Re: Contract renewal\r\nMessage-ID: <m3@vendor.example>\r\n"
    "In-Reply-To: <m2@shop.example>\r\nReferences: <m1@vendor.example> <m2@shop.example>\r\n"
    "Date: Thu, 08 Oct 2026 08:00:00 +0000\r\n\r\n"
)


def test_an_outlook_message_joins_its_thread_with_its_attachment(tmp_path: Path) -> None:
    pytest.importorskip("extract_msg", reason="pip install 'knowledge-api[mail]'")
    write(tmp_path / "renewal.eml", RENEWAL)
    write(tmp_path / "reply.eml", REPLY)
    signed = ("signed.txt", b"The contract is signed for three years.")
    body = "Yes: three years at 11,000 EUR.\r\n\r\n-- \r\nAlice Vendor"
    write_msg(tmp_path / "answer.msg", MSG_HEADERS, body, signed)
    loaded = load_paths([tmp_path], LoadOptions())
    assert not loaded.skipped
    thread, attachment = loaded.documents
    assert thread.metadata["message_ids"] == "m1@vendor.example m2@shop.example m3@vendor.example"
    assert thread.metadata["last_date"] == "2026-10-08T08:00:00+00:00"
    assert "three years at 11,000 EUR." in thread.content
    assert "Alice Vendor\n" not in thread.content.split("11,000 EUR.")[1]
    assert attachment.source_id == "m3@vendor.example/signed.txt"
    assert attachment.metadata["thread"] == "m1@vendor.example"
    assert attachment.content == "The contract is signed for three years."


def test_an_outlook_message_without_its_reader_is_skipped_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "answer.msg").write_bytes(b"not read")
    write(tmp_path / "renewal.eml", RENEWAL)
    monkeypatch.setitem(sys.modules, "extract_msg", None)
    loaded = load_paths([tmp_path], LoadOptions())
    (skipped,) = loaded.skipped
    assert (skipped.reason, skipped.detail) == (
        "extractor not installed",
        "extract_msg is not installed: pip install 'knowledge-api[mail]'",
    )
    assert [doc.title for doc in loaded] == ["Contract renewal"]


def test_a_damaged_outlook_file_is_skipped_as_unreadable(tmp_path: Path) -> None:
    pytest.importorskip("extract_msg", reason="pip install 'knowledge-api[mail]'")
    (tmp_path / "broken.msg").write_bytes(b"\xd0\xcf\x11\xe0 not an OLE file")
    (skipped,) = load_paths([tmp_path], LoadOptions()).skipped
    assert skipped.reason == "unreadable MSG"


def test_damaged_messages_are_read_or_named_never_a_crash(tmp_path: Path) -> None:
    """Random cuts, bytes and header fragments in real messages: each file is read, or
    skipped with a reason (ExtractionError), never an exception of another kind."""
    seeds = [RENEWAL.as_bytes(), REPLY.as_bytes()]
    quoted = message("Quote", "See attached.\n> old\n-- \nsig", msg_id="q@x", html="<p>Hi</p>")
    quoted.add_attachment(
        pdf_bytes([["Quote"]]), maintype="application", subtype="pdf", filename="quote.pdf"
    )
    seeds.append(quoted.as_bytes())
    fragments = [
        b"=?utf-8?b?",
        b"\n",
        b'; charset="x"',
        b"boundary=",
        b"\r\n--",
        b"Date: 99 Foo 99999 99:99:99 +9999\n",
        b"filename*=utf-8''%FF%FE",
    ]
    rng = random.Random(7)
    for n in range(300):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 20)):
            at = rng.randrange(len(data))
            step = rng.random()
            if step < 0.4:
                data[at] = rng.randrange(256)
            elif step < 0.7:
                del data[at : at + rng.randint(1, 50)]
            else:
                data[at:at] = rng.choice(fragments)
        folder = tmp_path / str(n)
        folder.mkdir()
        name = "box.mbox" if n % 3 == 0 else "message.eml"
        (folder / name).write_bytes((b"From x\n" if n % 3 == 0 else b"") + bytes(data))
        loaded = load_paths([folder], LoadOptions())
        assert len(loaded.documents) + len(loaded.skipped) >= 1
