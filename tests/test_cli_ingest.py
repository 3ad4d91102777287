"""`knowledge-api ingest` and `ingest-git`: summaries, skipped files, exit statuses, and
arguments checked before the service (and its model) starts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from knowledge_api.cli import main
from knowledge_api.cli.ingest import skipped_summary
from knowledge_api.cli.progress import progress
from knowledge_api.service import KnowledgeService
from tests import hostile_records
from tests.cli_env import cli_home
from tests.documents import PNG, commit, git_repo, pdf_bytes, write_docx


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch)


@pytest.fixture
def no_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the model would load (the store alone may open)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(KnowledgeService, "start", refuse)
    monkeypatch.setattr(KnowledgeService, "load_embedder", refuse)


def test_each_bad_record_of_a_jsonl_file_is_named_the_rest_indexed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ingest x.jsonl` holds each record to the rules of POST /v1/knowledge/documents."""
    (tmp_path / "corpus.jsonl").write_text("\n".join(hostile_records.corpus_lines()) + "\n")
    assert main(["ingest", "corpus.jsonl"]) == 1
    out, err = capsys.readouterr()
    assert "2 documents indexed" in out
    assert "skipped corpus.jsonl:2: bad record (metadata.team: must be a string" in err
    assert "skipped corpus.jsonl:5: bad record (metadata: keys must be" in err
    assert main(["query", "--collection", "default", "kestrel ingest keys"]) == 0
    assert "weekly" in capsys.readouterr().out


def test_meta_is_held_to_the_rules_of_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nAlpha.")
    assert main(["ingest", "a.md", "--meta", "$team=qa"]) == 2
    assert "--meta: keys must be" in capsys.readouterr().err


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """A folder `docs` whose a.md says Alpha rotates the keys every month."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nAlpha rotates the keys every month.")
    return folder


def test_skipped_files_are_named_and_exit_1(docs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (docs / "b.pdf").write_bytes(pdf_bytes([["Beta handles invoices."]]))
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    (docs / "logo.ico").write_bytes(PNG)
    assert main(["ingest", "docs"]) == 1
    out, err = capsys.readouterr()
    summary, skipped = out.splitlines()
    assert summary.startswith("2 documents indexed (2 chunks, 2 embedded), 0 unchanged skipped")
    assert skipped == "2 files skipped: docs/broken.pdf (unreadable PDF), docs/logo.ico (binary)"
    assert "skipped docs/logo.ico: binary (NUL bytes in its content)" in err.splitlines()
    assert "skipped docs/broken.pdf: unreadable PDF (" in err


def test_a_folder_of_markdown_html_pdf_and_word_is_read_whole(
    docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (docs / "b.html").write_text(
        "<html><body><nav>Home | Next</nav><main><h1>Beta</h1>"
        "<p>Set BETA_MAX_MB before the upload.</p></main></body></html>"
    )
    (docs / "c.pdf").write_bytes(pdf_bytes([["Gamma handles invoices."]]))
    write_docx(docs / "d.docx")
    assert main(["ingest", "docs"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("4 documents indexed")
    assert "skipped" not in out.replace("0 unchanged skipped", "")
    assert main(["query", "--collection", "default", "BETA_MAX_MB upload"]) == 0
    assert "Set BETA_MAX_MB before the upload." in capsys.readouterr().out


def test_nothing_skipped_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.md").write_text("# Alpha\n\nText.")
    assert main(["ingest", "a.md"]) == 0
    assert "skipped:" not in capsys.readouterr().out


def test_only_skipped_files_do_not_start_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_service: None
) -> None:
    (tmp_path / "logo.ico").write_bytes(PNG)
    assert main(["ingest", "logo.ico"]) == 1
    summary, skipped = capsys.readouterr().out.splitlines()
    assert summary.startswith("0 documents indexed (0 chunks, 0 embedded), 0 unchanged skipped")
    assert skipped == "1 file skipped: logo.ico (binary)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ingest", "a.md", "missing"], "error: missing: no such file or folder"),
        (["ingest", "a.md", "--collection", "Bad Name!"], "error: --collection"),
        (["ingest", "a.md", "--meta", "team"], "error: --meta: takes KEY=VALUE, got 'team'"),
        (["ingest-git", "a.md"], "no such folder"),
        (["ingest-git", "."], "not a git repository"),
        (["ingest-git", ".", "--since", "yesterday"], "--since: takes an ISO date"),
    ],
)
def test_usage_errors_exit_2_before_the_model_loads(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_service: None,
    argv: list[str],
    message: str,
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nText.")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert message in err and out == ""


def test_ingest_git_indexes_new_commits_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = git_repo(tmp_path / "billing")
    commit(repo, "Fix invoice rounding", {"src/invoice.py": "1"}, "2026-02-10T09:30:00Z")
    commit(repo, "Add the refund endpoint", {"src/refund.py": "1"}, "2026-02-11T09:30:00Z")
    url = ["--base-url", "https://git.example.com/billing/commit/{hash}"]
    assert main(["ingest-git", "billing", *url]) == 0
    assert capsys.readouterr().out.startswith("2 documents indexed (2 chunks, 2 embedded)")
    commit(repo, "Refunds are queued", {"src/refund.py": "2"}, "2026-02-12T09:30:00Z")
    assert main(["ingest-git", "billing", *url]) == 0
    assert "1 documents indexed (1 chunks, 1 embedded), 2 unchanged skipped" in (
        capsys.readouterr().out
    )
    assert main(["query", "refund endpoint", "--sources", "git", "--no-synthesize", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["metadata"]["title"] == "Add the refund endpoint"
    assert result["metadata"]["url"].startswith("https://git.example.com/billing/commit/")
    assert result["metadata"]["paths"] == ["src/refund.py"]


def test_a_rerun_with_nothing_new_leaves_the_model_unloaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = git_repo(tmp_path / "billing")
    commit(repo, "Fix invoice rounding", {"src/invoice.py": "1"}, "2026-02-10T09:30:00Z")
    (tmp_path / "a.md").write_text("# Alpha\n\nText.")
    assert main(["ingest-git", "billing"]) == 0
    assert main(["ingest", "a.md"]) == 0
    capsys.readouterr()
    started: list[object] = []
    real = KnowledgeService.load_embedder

    async def load(service: KnowledgeService) -> None:
        started.append(1)
        await real(service)

    monkeypatch.setattr(KnowledgeService, "load_embedder", load)
    assert main(["ingest-git", "billing"]) == 0
    assert main(["ingest", "a.md"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(
        line.startswith("0 documents indexed (0 chunks, 0 embedded), 1 unchanged skipped, in ")
        for line in lines
    )
    assert started == []
    (tmp_path / "a.md").write_text("# Alpha\n\nNew text.")
    assert main(["ingest", "a.md"]) == 0
    assert capsys.readouterr().out.startswith("1 documents indexed (1 chunks, 1 embedded)")
    assert started == [1]


def test_plain_progress_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with progress(total=500, stream=stream, every=0.0) as update:
        update(256)
        update(244)
    assert stream.getvalue().splitlines() == [
        "indexed 256/500 documents",
        "indexed 500/500 documents",
    ]
    quiet = io.StringIO()
    with progress(total=500, stream=quiet, every=3600.0) as update:
        update(500)
    assert quiet.getvalue() == ""  # a run shorter than the interval prints only its summary


def test_a_terminal_gets_a_named_bar() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with progress(total=3, stream=stream) as update:
        update(3)
    assert "indexing: 100%" in stream.getvalue() and "3/3" in stream.getvalue()
    assert "document/s" in stream.getvalue() or "s/document" in stream.getvalue()


def test_skipped_summary_is_bounded() -> None:
    from knowledge_api.ingest.loaders import Skipped

    many = [Skipped(f"f{n}.bin", "binary") for n in range(12)]
    line = skipped_summary(many, shown=2)
    assert line == "12 files skipped: f0.bin (binary), f1.bin (binary), and 10 more"


def test_a_mailbox_is_indexed_as_threads_and_its_broken_message_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mail = tmp_path / "mail"
    mail.mkdir()
    opening = (
        b"From: Alice <alice@vendor.example>\nTo: bob@shop.example\nSubject: Renewal\n"
        b"Message-ID: <r1@vendor.example>\nDate: Tue, 06 Oct 2026 09:30:00 +0000\n\n"
        b"The renewal price for 2027 is 12,000 EUR a year.\n"
    )
    reply = (
        b"From: bob@shop.example\nTo: Alice <alice@vendor.example>\nSubject: Re: Renewal\n"
        b"Message-ID: <r2@shop.example>\nIn-Reply-To: <r1@vendor.example>\n"
        b"Date: Wed, 07 Oct 2026 10:00:00 +0000\n\nCan we sign for three years?\n"
        b"> The renewal price for 2027 is 12,000 EUR a year.\n"
    )
    broken = b"From: x@y\nSubject: Broken\nContent-Type: multipart/mixed\n\nno boundary\n"
    separator = b"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n"
    (mail / "INBOX.mbox").write_bytes(
        separator + opening + b"\n" + separator + broken + b"\n" + separator + reply + b"\n"
    )
    assert main(["ingest", "mail"]) == 1
    out, err = capsys.readouterr()
    summary, skipped = out.splitlines()
    assert summary.startswith("1 documents indexed")
    assert skipped == "1 file skipped: mail/INBOX.mbox (broken MIME)"
    assert "skipped mail/INBOX.mbox: broken MIME (message 2: NoBoundaryInMultipartDefect)" in (err)
    assert main(["query", "--sources", "email", "what is the renewal price for 2027?"]) == 0
    found = capsys.readouterr().out
    assert "12,000 EUR" in found and "email: r1@vendor.example" in found
