import mailbox
from email.message import EmailMessage
from pathlib import Path

from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.mail import own_text
from tests.documents import pdf_bytes, write_docx


def message(
    subject: str,
    body: str,
    sender: str = "Alice Vendor <alice@vendor.example>",
    to: str = "Bob Buyer <bob@shop.example>",
    msg_id: str = "",
    reply_to: str = "",
    date: str = "Tue, 06 Oct 2026 09:30:00 +0200",
    html: str = "",
    cc: str = "",
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    if cc:
        msg["Cc"] = cc
    msg["Subject"] = subject
    msg["Date"] = date
    if msg_id:
        msg["Message-ID"] = f"<{msg_id}>"
    if reply_to:
        msg["In-Reply-To"] = f"<{reply_to}>"
        msg["References"] = f"<{reply_to}>"
    msg.set_content(body)
    if html:
        msg.add_alternative(html, subtype="html")
    return msg


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
    latin = message("Charset", "placeholder", msg_id="cs@x")
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
    assert sorted(docs) == ["Big", "Charset", "Fine"]
    assert docs["Charset"].content.endswith("Caf\ufffd au lait")


def test_own_text_drops_quotes_the_wrote_line_and_the_signature() -> None:
    text = (
        "Yes, Friday works.\n\nOn Mon, 5 Oct 2026, Bob Buyer\n<bob@shop.example> wrote:\n"
        "> Does Friday work?\n>> Earlier\n\n-- \nAlice\n+49 30 1234"
    )
    assert own_text(text) == "Yes, Friday works."
    assert own_text("Hi\n-----Original Message-----\nFrom: x\nold text") == "Hi"
