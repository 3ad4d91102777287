"""Small real documents made in tests: a PDF written byte by byte, DOCX and PPTX files
written with python-docx and python-pptx, a git repository with commits, and e-mail
messages (hostile Office files: tests/hostile_office.py)."""

from __future__ import annotations

import os
import subprocess
from email.message import EmailMessage
from pathlib import Path

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")


def pdf_bytes(pages: list[list[str]], title: str = "") -> bytes:
    """A valid PDF with one page per entry, each line of text shown in Helvetica."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    pages_ref = 2 + 2 * len(pages) + 1  # catalog, pages tree and info come after
    kids = []
    for lines in pages:
        text = b"".join(
            b"BT /F1 12 Tf 72 %d Td (%s) Tj ET\n" % (720 - 20 * i, line.encode("latin-1"))
            for i, line in enumerate(lines)
        )
        stream = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text))
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
                b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                % (pages_ref, font, stream)
            )
        )
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_ref)
    refs = b" ".join(b"%d 0 R" % kid for kid in kids)
    assert add(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))) == pages_ref
    info = add(b"<< /Title (%s) >>" % title.encode("latin-1"))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\n" % (
        len(objects) + 1,
        catalog,
        info,
    )
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def write_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_heading("Release Handbook", level=0)
    document.add_paragraph("How a release goes out.")
    document.add_heading("Install", level=1)
    document.add_paragraph("Run the installer on every node.")
    document.add_heading("Linux", level=2)
    document.add_paragraph("Use the tarball on Linux hosts.")
    document.add_paragraph("Check the checksum first", style="List Bullet")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "port"
    table.rows[0].cells[1].text = "8080"
    document.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    import pptx

    presentation = pptx.Presentation()
    for title, body, notes in (
        ("Quarterly review", "Revenue grew in every region.", "Mention the new office."),
        ("Roadmap", "Search ships in March.", ""),
    ):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    presentation.save(str(path))
    return path


def git_repo(path: Path) -> Path:
    path.mkdir()
    run_git(path, "init", "-q", "-b", "main")
    return path


def run_git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=git_env()
    ).stdout


def commit(repo: Path, message: str, files: dict[str, str], date: str, author: str = "Ann") -> str:
    """A commit of these files (relative path -> content) at an ISO date; its hash."""
    for name, content in files.items():
        file = repo / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content)
        run_git(repo, "add", "--", name)
    environment = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    identity = ["-c", f"user.name={author}", "-c", "user.email=dev@example.com"]
    subprocess.run(
        ["git", "-C", str(repo), *identity, "commit", "-q", "--allow-empty", "-m", message],
        check=True,
        capture_output=True,
        env={**git_env(), **environment},
    )
    return run_git(repo, "rev-parse", "HEAD").strip()


def git_env() -> dict[str, str]:
    """The environment without the user's git configuration (hooks, signing)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {key: os.environ[key] for key in keep if key in os.environ} | {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


def many_commits(repo: Path, count: int, start: int = 1767225600) -> None:
    """`count` commits on main in one `git fast-import` (a process per commit would take
    longer than the test), each changing one of 40 files, one second apart."""
    stream = bytearray()
    for n in range(count):
        message = f"Change {n}\n\nTouches module {n % 40}.\n".encode()
        stamp = f"Ann <dev@example.com> {start + n} +0000".encode()
        content = f"{n}\n".encode()
        stream += b"commit refs/heads/main\nauthor %s\ncommitter %s\n" % (stamp, stamp)
        stream += b"data %d\n%s" % (len(message), message)
        stream += b"M 644 inline m%d.py\ndata %d\n%s\n" % (n % 40, len(content), content)
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input=bytes(stream),
        check=True,
        capture_output=True,
        env=git_env(),
    )
    run_git(repo, "reset", "-q", "--hard", "main")


def email_message(
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
    """A message as a mail client writes it: the headers given, a plain text body, and an
    HTML alternative when `html` is given."""
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
