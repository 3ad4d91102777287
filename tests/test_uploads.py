"""Files over HTTP as jobs: POST /v1/knowledge/files with real PDF, Word, PowerPoint,
HTML and Markdown files made here; GET /v1/knowledge/jobs/{id}; bad files as errors of
their job; a restart in the middle of a job."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import queue
import subprocess
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_service
from knowledge_api.errors import BackendConnectionError
from knowledge_api.ingest import extract, pipeline
from knowledge_api.ingest.chunker import chunk_document
from knowledge_api.ledger import Job
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from knowledge_api.usecases import uploads
from tests import hostile_records
from tests.conftest import corpus, make_settings
from tests.documents import pdf_bytes, write_docx, write_pptx
from tests.hostile_office import bare_docx, repeated_slide_pptx, spanning_docx

FILES = "/v1/knowledge/files"
QUERY = "/v1/knowledge/query"
HTML = (
    "<html><head><title>Site</title></head><body><nav>Home | Next | Up</nav><main>"
    "<h1>Heron uploads</h1><p>HERON_MAX_MB bounds each heron upload.</p></main>"
    "<footer>Copyright</footer></body></html>"
)


def good_files(tmp_path: Path) -> list[tuple[str, bytes]]:
    return [
        ("manual.pdf", pdf_bytes([["The turbine manual covers blade pitch."]], "Turbine")),
        ("handbook.docx", write_docx(tmp_path / "handbook.docx").read_bytes()),
        ("review.pptx", write_pptx(tmp_path / "review.pptx").read_bytes()),
        ("heron.html", HTML.encode()),
        ("notes/kestrel.md", b"# Kestrel\n\nKestrel rotates the ingest keys weekly."),
    ]


def parts(files: list[tuple[str, bytes]]) -> list[tuple[str, tuple[str, bytes]]]:
    return [("file", (name, data)) for name, data in files]


def wait_for(
    client: TestClient,
    job_id: str,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The job once it is done or failed, asked with `headers`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/v1/knowledge/jobs/{job_id}", headers=headers).json()
        if body["status"] in ("done", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {body['status']} after {timeout} s")


def submit(client: TestClient, files: list[tuple[str, bytes]], **form: str) -> str:
    response = client.post(FILES, files=parts(files), data=form)
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/knowledge/jobs/{response.json()['job_id']}"
    return str(response.json()["job_id"])


def found(client: TestClient, text: str, collection: str = "default") -> list[str]:
    body = {"query": text, "collection": collection, "synthesize": False, "limit": 3}
    response = client.post(QUERY, json=body)
    assert response.status_code == 200, response.text
    return [r["content"] for r in response.json()["results"]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, upload_dir=str(tmp_path / "uploads"))


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_real_files_are_indexed_by_a_job(client: TestClient, tmp_path: Path) -> None:
    job_id = submit(client, good_files(tmp_path), collection="manuals", source="handbooks")
    job = wait_for(client, job_id)
    assert job["status"] == "done" and job["errors"] == [], job
    assert (job["collection"], job["source_type"], job["source"]) == (
        "manuals",
        "wiki",
        "handbooks",
    )
    assert job["files"] == {"done": 5, "total": 5}
    assert job["chunks"]["done"] == job["chunks"]["total"] >= 5
    assert job["chunks"]["embedded"] == job["chunks"]["done"]
    assert any("blade pitch" in c for c in found(client, "turbine blade pitch", "manuals"))
    assert any("HERON_MAX_MB" in c for c in found(client, "heron upload limit", "manuals"))
    assert any("weekly" in c for c in found(client, "kestrel ingest keys", "manuals"))
    assert any("Revenue grew" in c for c in found(client, "quarterly revenue", "manuals"))
    assert not (tmp_path / "uploads" / job_id).exists()  # the files are gone with the job


def test_one_file_name_uploaded_to_two_sources_is_two_documents(client: TestClient) -> None:
    """Uploads of kestrel.md to two sources: neither replaces the other's, and deleting one
    source leaves the other's."""
    for source, text in (("live", b"The live runbook of the kestrel."), ("manuals", b"Paper.")):
        job = wait_for(
            client, submit(client, [("kestrel.md", b"# Kestrel\n\n" + text)], source=source)
        )
        assert job["status"] == "done", job
    listed = client.get("/v1/knowledge/sources").json()["sources"]
    assert [(s["name"], s["documents"]) for s in listed] == [("live", 1), ("manuals", 1)]
    assert client.delete("/v1/knowledge/sources/manuals").json()["deleted"] == 1
    detail = client.get("/v1/knowledge/detail/wiki/kestrel.md")
    assert detail.status_code == 200 and "live runbook" in detail.json()["content"]


def test_the_same_file_twice_embeds_nothing_the_second_time(
    client: TestClient, tmp_path: Path
) -> None:
    files = good_files(tmp_path)[:2]
    first = wait_for(client, submit(client, files))
    second = wait_for(client, submit(client, files))
    assert first["chunks"]["embedded"] > 0
    assert second["status"] == "done" and second["chunks"]["embedded"] == 0
    assert second["chunks"]["done"] == first["chunks"]["done"]


def encrypted_pdf() -> bytes:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=io.BytesIO(pdf_bytes([["Secret plans."]])))
    writer.encrypt("secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def zip_bomb(tmp_path: Path) -> bytes:
    bomb = write_docx(tmp_path / "bomb.docx")
    archive = zipfile.ZipFile(bomb, "a", zipfile.ZIP_DEFLATED)
    with archive, archive.open("word/media/zeros.bin", "w") as part:
        for _ in range(4):
            part.write(bytes(2**20))
    return bomb.read_bytes()


def test_each_bad_file_is_an_error_of_its_job_and_the_rest_is_indexed(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(extract, "MAX_UNZIPPED_BYTES", 2**20)
    client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
    before = client.get("/v1/knowledge/detail/jira/SIAM-101").json()
    bad = [
        ("broken.pdf", b"%PDF-1.4 truncated"),
        ("locked.pdf", encrypted_pdf()),
        ("bomb.docx", zip_bomb(tmp_path)),
        ("empty.md", b""),
        ("latin1.md", "# Caf\xe9\n\nCr\xe8me br\xfbl\xe9e.".encode("latin-1")),
        ("../escape.md", b"# Escape\n\nOut of the folder."),
        ("/etc/passwd.md", b"# Root\n\nAn absolute path."),
        ("C:/Windows/win.md", b"# Win\n\nA drive path."),
        ("tool.exe", b"MZ\x00\x00binary"),
        ("data.xyz", b"plain words in an unknown format"),
    ]
    job = wait_for(client, submit(client, [*bad, ("ok.md", b"# Osprey\n\nOsprey nests early.")]))
    assert job["status"] == "done" and job["files"] == {"done": 11, "total": 11}
    reasons = {error["file"]: error["reason"] for error in job["errors"]}
    assert sorted(reasons) == sorted(name for name, _ in bad)
    assert reasons["broken.pdf"].startswith("unreadable PDF")
    assert reasons["locked.pdf"] == "encrypted PDF"
    assert reasons["bomb.docx"].startswith("zip bomb: its parts expand to 4 MiB")
    assert reasons["empty.md"] == "empty file: 0 bytes"
    assert reasons["latin1.md"].startswith("not UTF-8")
    for unsafe in ("../escape.md", "/etc/passwd.md", "C:/Windows/win.md"):
        assert reasons[unsafe].startswith("unsafe file name"), reasons[unsafe]
    assert reasons["tool.exe"].startswith("binary")
    assert reasons["data.xyz"] == "unknown type: .xyz: not a supported document format"
    assert any("Osprey nests early." in c for c in found(client, "osprey nests"))
    assert client.get("/v1/knowledge/detail/jira/SIAM-101").json() == before
    assert not (tmp_path.parent / "escape.md").exists()


def test_a_job_with_nothing_indexed_failed(client: TestClient) -> None:
    job = wait_for(client, submit(client, [("empty.txt", b""), ("x.bin", b"\x00\x01")]))
    assert job["status"] == "failed"
    assert job["reason"] == "none of the 2 files could be indexed"
    assert len(job["errors"]) == 2


def test_a_file_over_the_limit_is_an_error_the_others_are_indexed(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_file_mb=1, upload_dir=str(tmp_path / "up"))
    big = b"# Big\n\n" + b"word " * (2**20 // 4)
    with TestClient(create_app(settings)) as client:
        job = wait_for(client, submit(client, [("big.md", big), ("small.md", b"# Small\n\nTern.")]))
    assert job["status"] == "done"
    assert job["errors"] == [
        {"file": "big.md", "reason": "too large: over the 1 MB limit (KNOWLEDGE_MAX_FILE_MB)"}
    ]
    assert job["files"] == {"done": 2, "total": 2}


def test_a_mailbox_with_a_broken_message_is_indexed_and_the_message_listed(
    client: TestClient,
) -> None:
    separator = b"From MAILER-DAEMON Thu Jan  1 00:00:00 2026\n"
    good = (
        b"From: alice@vendor.example\nSubject: Renewal\nMessage-ID: <r1@vendor.example>\n\n"
        b"Herons renew in March.\n"
    )
    broken = b"From: x@y\nSubject: Broken\nContent-Type: multipart/mixed\n\nno boundary\n"
    box = separator + good + b"\n" + separator + broken + b"\n"
    job = wait_for(client, submit(client, [("INBOX.mbox", box)], source_type="email"))
    assert job["status"] == "done" and job["files"] == {"done": 1, "total": 1}
    assert job["errors"] == [
        {"file": "INBOX.mbox", "reason": "broken MIME: message 2: NoBoundaryInMultipartDefect"}
    ]
    assert any("Herons renew in March." in c for c in found(client, "herons renew"))


def test_hostile_office_files_make_bounded_text_or_an_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    """A Word cell spanning 10,000,000 columns, a deck listing one slide 100,000 times,
    a file of empty paragraphs past KNOWLEDGE_MAX_FILE_CHARS and a file of more
    passages than KNOWLEDGE_MAX_FILE_PASSAGES: each file a few kilobytes."""
    settings = make_settings(
        tmp_path, max_file_chars=200_000, max_file_passages=50, upload_dir=str(tmp_path / "up")
    )
    files = [
        ("span.docx", spanning_docx(tmp_path / "span.docx", 10_000_000).read_bytes()),
        ("deck.pptx", repeated_slide_pptx(tmp_path / "deck.pptx", 100_000).read_bytes()),
        ("empty.docx", bare_docx(tmp_path / "e.docx", "<w:p/>" * 200_000).read_bytes()),
        ("sections.md", "".join(f"# Part {n}\n\nTern {n}.\n\n" for n in range(60)).encode()),
    ]
    with TestClient(create_app(settings)) as client:
        job = wait_for(client, submit(client, files))
    assert job["status"] == "done"
    assert job["errors"] == [
        {
            "file": "empty.docx",
            "reason": "too long: its text is longer than 200,000 characters "
            "(KNOWLEDGE_MAX_FILE_CHARS)",
        },
        {
            "file": "sections.md",
            "reason": "too many passages: its text makes 60 passages, more than 50 "
            "(KNOWLEDGE_MAX_FILE_PASSAGES)",
        },
    ]
    assert job["chunks"]["done"] == 2  # one passage from each of the two bombs


def test_queries_are_answered_while_a_file_is_cut_into_passages(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time the job cuts a document into passages, the cutting waits until the
    test has had a query answered: on the event loop it would hold the query up (the
    wait gives up after a while and says so), on a worker thread it does not."""
    turns: queue.Queue[threading.Event] = queue.Queue()
    held_up: list[str] = []

    def waiting_chunker(doc: Document, *args: Any, **kwargs: Any) -> Any:
        turn = threading.Event()
        turns.put(turn)
        if not turn.wait(timeout=15):
            held_up.append(doc.source_id)
        return chunk_document(doc, *args, **kwargs)

    monkeypatch.setattr(pipeline, "chunk_document", waiting_chunker)
    job_id = submit(client, [("kestrel.md", b"# Kestrel\n\nKestrel rotates the keys.")])
    cut = 0
    while client.get(f"/v1/knowledge/jobs/{job_id}").json()["status"] not in ("done", "failed"):
        try:
            turn = turns.get(timeout=0.05)
        except queue.Empty:
            continue
        found(client, "how are keys rotated")
        turn.set()
        cut += 1
    assert held_up == []
    assert cut >= 1  # read for its job (and cut again as the ingest plans its writes)
    assert any("rotates" in c for c in found(client, "kestrel keys"))


@pytest.mark.parametrize(
    ("number", "case"),
    list(enumerate(hostile_records.BAD)),
    ids=[c[0] for c in hostile_records.BAD],
)
def test_posting_refuses_what_a_jsonl_upload_leaves_out(
    client: TestClient, number: int, case: tuple[str, dict[str, Any], str, str]
) -> None:
    """The route's refusal names the same field (under its own name) and the same rule
    as the loaders' (the JSON-lines door, below)."""
    _, given, field, rule = case
    response = client.post(
        "/v1/knowledge/documents", json=hostile_records.as_document(given, number)
    )
    assert response.status_code == 400, response.text
    head, _, rest = field.partition(".")
    named = hostile_records.POSTED_NAMES.get(head, head) + (f".{rest}" if rest else "")
    error = response.json()["error"]
    assert error["details"]["field"] == named and rule in error["message"], error


def test_a_jsonl_upload_leaves_out_each_bad_record_naming_it_and_indexes_the_rest(
    client: TestClient,
) -> None:
    lines = hostile_records.corpus_lines()
    corpus = ("\n".join(lines) + "\n").encode()
    job = wait_for(client, submit(client, [("corpus.jsonl", corpus)]))
    assert job["status"] == "done" and job["chunks"]["done"] == 2, job
    ((error),) = job["errors"]
    bad = len(lines) - 2
    assert error["file"] == "corpus.jsonl"
    assert error["reason"].startswith(f"{bad} records left out: line 2: metadata.team: ")
    assert error["reason"].endswith(f"; and {bad - 10} more")
    assert any("weekly" in c for c in found(client, "kestrel ingest keys"))


def test_a_nul_in_a_file_name_is_an_error_of_its_file(client: TestClient) -> None:
    """Sent as it is (httpx would write it `%00`): no store keeps a NUL in a text, so on
    Postgres the job's record could not be written (503)."""
    body = b"".join(
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="%b"\r\n\r\n%b\r\n'
        % (name, data)
        for name, data in ((b"a\x00b.md", b"# A"), (b"c.md", b"# C\n\nTern."))
    )
    headers = {"content-type": "multipart/form-data; boundary=b"}
    response = client.post(FILES, content=body + b"--b--\r\n", headers=headers)
    assert response.status_code == 202, response.text
    job = wait_for(client, response.json()["job_id"])
    assert job["status"] == "done"
    assert job["errors"] == [
        {"file": "a\\x00b.md", "reason": "unsafe file name: it holds the NUL character"}
    ]


@pytest.mark.parametrize(
    ("send", "status", "field"),
    [
        ({"json": {"file": "x"}}, 415, None),
        ({"files": [("document", ("a.md", b"# A"))]}, 400, "document"),
        ({"data": {"collection": "default"}, "files": []}, 415, None),
        ({"files": [("file", ("a.md", b"# A"))], "data": {"colection": "x"}}, 400, "colection"),
        ({"files": [("file", ("a.md", b"# A"))], "data": {"source_type": "blog"}}, 400, None),
        ({"files": [("file", ("a.md", b"# A"))], "data": {"collection": "../x"}}, 400, None),
        ({"files": [("file", ("a.md", b"# A"))], "data": {"source": " "}}, 400, "source"),
        ({"files": [("file", ("a.md", b"# A"))], "data": {"source": ""}}, 400, "source"),
    ],
)
def test_a_bad_upload_is_refused_and_leaves_nothing_behind(
    client: TestClient, settings: Settings, send: dict[str, Any], status: int, field: str | None
) -> None:
    response = client.post(FILES, **send)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if field is not None:
        assert error["details"]["field"] == field
    assert list(settings.uploads_path.glob("*")) == []


def test_a_form_without_files_is_refused(client: TestClient) -> None:
    body = b'--b\r\nContent-Disposition: form-data; name="collection"\r\n\r\ndefault\r\n--b--\r\n'
    headers = {"content-type": "multipart/form-data; boundary=b"}
    response = client.post(FILES, content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["details"]["field"] == "file"


def test_a_body_cut_short_keeps_no_truncated_file(client: TestClient, settings: Settings) -> None:
    whole = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.md"\r\n\r\n'
    body = whole + b"# Half\n\nThe first half of a file whose end never came"
    headers = {"content-type": "multipart/form-data; boundary=b"}
    response = client.post(FILES, content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert "closing boundary" in response.json()["error"]["message"]
    assert list(settings.uploads_path.glob("*")) == []


def test_an_unknown_job_is_a_404(client: TestClient) -> None:
    response = client.get("/v1/knowledge/jobs/nope")
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found"


def test_a_document_of_the_longest_content_fits_the_body(client: TestClient) -> None:
    """60,000 characters of non-ASCII text are 120 KB of JSON: over the 64 KiB limit."""
    doc = {"source_type": "wiki", "source_id": "long", "content": "é" * 59_990 + " end"}
    response = client.post("/v1/knowledge/documents", json=doc)
    assert response.status_code == 201, response.text


class Stalled:
    """The service's ingest, held before it indexes its `after`-th file."""

    def __init__(self, ingest: Any, after: int) -> None:
        self.ingest = ingest
        self.calls = 0
        self.after = after
        self.reached = asyncio.Event()

    async def __call__(self, documents: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls > self.after:
            self.reached.set()
            await asyncio.Event().wait()  # until the service stops
        return await self.ingest(documents, *args, **kwargs)


def stopped_mid_job(settings: Settings, files: list[tuple[str, bytes]], after: int) -> str:
    """A job whose service stopped while it ran, `after` of its files indexed."""
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service  # type: ignore[attr-defined]
        stalled = Stalled(service.ingest, after)
        service.ingest = stalled
        job_id = submit(client, files)
        deadline = time.monotonic() + 30
        while not stalled.reached.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        job = client.get(f"/v1/knowledge/jobs/{job_id}").json()
        assert job["status"] == "running" and job["chunks"]["done"] > 0, job
    return job_id


def test_a_job_cut_by_a_restart_is_resumed(settings: Settings, tmp_path: Path) -> None:
    files = good_files(tmp_path)
    job_id = stopped_mid_job(settings, files, after=2)
    with TestClient(create_app(settings)) as client:
        job = wait_for(client, job_id)
        assert job["status"] == "done" and job["errors"] == []
        assert job["files"] == {"done": 5, "total": 5}
        assert job["chunks"]["done"] == job["chunks"]["total"]
        assert any("weekly" in c for c in found(client, "kestrel ingest keys"))


def test_a_job_whose_files_are_gone_fails_saying_why(settings: Settings, tmp_path: Path) -> None:
    import shutil

    job_id = stopped_mid_job(settings, good_files(tmp_path), after=1)
    shutil.rmtree(settings.uploads_path / job_id)
    with TestClient(create_app(settings)) as client:
        job = client.get(f"/v1/knowledge/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert job["reason"] == "the service restarted and the job's files are gone"


async def another_services_job(settings: Settings) -> None:
    service = build_service(settings)
    await service.open_storage()
    try:
        await service.jobs.save(Job("theirs", "default", "wiki", "upload", "gone-host:/up"))
    finally:
        await service.stop()


@pytest.mark.parametrize("stale", [True, False])
def test_a_job_its_service_abandoned_fails_no_other(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, stale: bool
) -> None:
    """A replica removed for good leaves its jobs: another one fails them once they have
    not moved for ABANDONED_AFTER, and leaves a job that still moves to its service."""
    asyncio.run(another_services_job(settings))
    if stale:
        monkeypatch.setattr(uploads, "ABANDONED_AFTER", timedelta(0))
    with TestClient(create_app(settings)) as client:
        job = client.get("/v1/knowledge/jobs/theirs").json()
    if stale:
        assert job["status"] == "failed"
        assert job["reason"].startswith("abandoned: the service holding its files (gone-host:/up)")
    else:
        assert job["status"] == "queued" and "reason" not in job


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real file system of 1 MiB (tmpfs), where writes fail with ENOSPC once it is full."""
    disk = tmp_path / "tiny"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(
            "mounting a tmpfs needs root (or CAP_SYS_ADMIN): run as root, or in a container "
            f"started with --cap-add SYS_ADMIN ({mounted.stderr.decode().strip()})"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_full_disk_during_an_upload_is_a_503_naming_it(tiny_disk: Path, tmp_path: Path) -> None:
    """ENOSPC while the body is written to disk was a 500 "this is a bug"; JSON writes
    that meet a full disk are answered 503 naming it, and so is an upload now. What was
    written is removed, so the next upload that fits is taken."""
    settings = make_settings(tmp_path, upload_dir=str(tiny_disk / "uploads"))
    with TestClient(create_app(settings)) as client:
        full = client.post(FILES, files=parts([("big.md", b"# Big\n\n" + b"word " * 400_000)]))
        assert full.status_code == 503, full.text
        error = full.json()["error"]
        assert error["type"] == "indexing_failed"
        assert error["message"].startswith(
            f"the upload could not be kept in {tiny_disk / 'uploads'}: the disk is full"
        )
        assert list((tiny_disk / "uploads").iterdir()) == []
        job = wait_for(client, submit(client, [("tern.md", b"# Tern\n\nTerns dive.")]))
        assert job["status"] == "done"


def test_a_job_stopped_by_a_full_disk_goes_on_once_there_is_room(
    tiny_disk: Path, tmp_path: Path
) -> None:
    """The store's disk fills while a job runs: its writes fail (SQLITE_FULL), the job
    stays queued with its files, and is tried again until they succeed, not until a
    restart."""
    settings = make_settings(
        tmp_path, db_path=tiny_disk / "knowledge.db", upload_dir=str(tmp_path / "uploads")
    )
    with TestClient(create_app(settings)) as client:
        client.app.state.uploads.retry_after = 0.2  # type: ignore[attr-defined]
        filler = tiny_disk / "filler"
        with contextlib.suppress(OSError), filler.open("wb", buffering=0) as out:
            while True:
                out.write(bytes(4096))
        # room for the job's record, not for its passages
        os.truncate(filler, filler.stat().st_size - 32 * 1024)
        text = "# Heron\n\n" + "Herons wade in the shallows at dawn. " * 2000
        job_id = submit(client, [("heron.md", text.encode())])
        time.sleep(1)  # a few tries, each refused by the full disk
        assert client.get(f"/v1/knowledge/jobs/{job_id}").json()["status"] in ("queued", "running")
        filler.unlink()
        job = wait_for(client, job_id)
    assert job["status"] == "done" and job["errors"] == [], job


class Unwritable:
    """A job store whose writes fail, as a store that went away."""

    def __init__(self, jobs: Any) -> None:
        self.jobs = jobs
        self.broken = False
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jobs, name)

    async def save(self, job: Any) -> None:
        if self.broken and job.status != "queued":
            self.refused += 1
            raise BackendConnectionError("upload jobs unavailable: disk I/O error")
        await self.jobs.save(job)


def test_a_job_store_gone_mid_job_keeps_the_files_and_the_worker(
    settings: Settings, tmp_path: Path
) -> None:
    with TestClient(create_app(settings)) as client:
        uploads_of = client.app.state.uploads  # type: ignore[attr-defined]
        store = Unwritable(uploads_of.jobs)
        uploads_of.jobs = client.app.state.service.jobs = store  # type: ignore[attr-defined]
        store.broken = True
        uploads_of.retry_after = 0.2
        stuck = submit(client, [("a.md", b"# A\n\nAlbatross.")])
        deadline = time.monotonic() + 10
        while not store.refused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (settings.uploads_path / stuck).is_dir()  # kept for its next try
        assert client.get(f"/v1/knowledge/jobs/{stuck}").json()["status"] == "queued"
        store.broken = False
        done = wait_for(client, submit(client, [("b.md", b"# B\n\nBittern.")]))
        assert done["status"] == "done"  # the worker went on
        retried = wait_for(client, stuck)  # and tried the stopped job again, no restart
        assert retried["status"] == "done" and retried["errors"] == []
        assert any("Albatross" in c for c in found(client, "albatross"))


def form_head(name: str = "slow.md") -> bytes:
    return (
        b'--drip\r\nContent-Disposition: form-data; name="file"; filename="%b"\r\n\r\n'
        % name.encode()
    )


FORM_TAIL = b"\r\n--drip--\r\n"
FORM_TYPE = {"content-type": "multipart/form-data; boundary=drip"}


async def posted(app: Any, client: str, body: AsyncIterator[bytes]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=(client, 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        return await http.post(FILES, content=body, headers=FORM_TYPE)


async def test_an_upload_dripping_a_byte_at_a_time_gets_408(tmp_path: Path) -> None:
    """1,500 uploads sending a byte every 8 s held 3,031 descriptors as long as they
    liked, as each byte reset the wait: past its first KNOWLEDGE_BODY_TIMEOUT seconds,
    a body must keep KNOWLEDGE_UPLOAD_MIN_RATE on average. (The drip ends after 40
    bytes, so without the rule the upload is taken.)"""
    settings = make_settings(  # 2 s: no 0.1 s pause stretches to a stall, however loaded
        tmp_path, body_timeout=2.0, upload_min_rate=1, upload_dir=str(tmp_path / "up")
    )
    app = create_app(settings)

    async def drip() -> AsyncIterator[bytes]:
        yield form_head()
        for _ in range(40):
            await asyncio.sleep(0.1)  # each byte well within KNOWLEDGE_BODY_TIMEOUT
            yield b"a"
        yield FORM_TAIL

    async with app.router.lifespan_context(app):
        response = await posted(app, "10.0.0.1", drip())
    assert response.status_code == 408, response.text
    error = response.json()["error"]
    assert error["type"] == "request_timeout"
    assert "slower than 1 KiB/s (KNOWLEDGE_UPLOAD_MIN_RATE)" in error["message"]
    assert not any((tmp_path / "up").glob("*/*"))


async def test_uploads_at_once_are_capped_per_caller_and_per_process(tmp_path: Path) -> None:
    """Without keys a caller is its client address."""
    settings = make_settings(
        tmp_path, max_uploads=2, max_uploads_per_key=1, upload_dir=str(tmp_path / "up")
    )
    app = create_app(settings)
    release = asyncio.Event()

    def held(started: asyncio.Event) -> AsyncIterator[bytes]:
        async def body() -> AsyncIterator[bytes]:
            yield form_head()
            started.set()  # the route is reading the body: its slot is taken
            await release.wait()
            yield b"# Slow\n\nSlow herons." + FORM_TAIL

        return body()

    async def whole() -> AsyncIterator[bytes]:
        yield form_head("quick.md") + b"# Quick\n\nQuick terns." + FORM_TAIL

    async with app.router.lifespan_context(app):
        first_started, other_started = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(posted(app, "10.0.0.1", held(first_started)))
        await first_started.wait()
        same_caller = await posted(app, "10.0.0.1", whole())
        other = asyncio.create_task(posted(app, "10.0.0.2", held(other_started)))
        await other_started.wait()
        third_caller = await posted(app, "10.0.0.3", whole())
        release.set()
        settled = [await first, await other]
        again = await posted(app, "10.0.0.1", whole())
    for refused, setting in (
        (same_caller, "KNOWLEDGE_MAX_UPLOADS_PER_KEY"),
        (third_caller, "KNOWLEDGE_MAX_UPLOADS"),
    ):
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "5"
        assert f"({setting})" in refused.json()["error"]["message"]
    assert [r.status_code for r in settled] == [202, 202]
    assert again.status_code == 202
