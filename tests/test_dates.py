"""A document's dates are its item's: posted with it, given to an upload, a file's
modification time, a commit's date; filters, recency and listings use them."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from knowledge_api.ingest.git_source import GitOptions, load_git
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from tests.documents import commit, git_repo
from tests.test_uploads import submit, wait_for

DOCUMENTS = "/v1/knowledge/documents"
QUERY = "/v1/knowledge/query"
TICKET = {
    "source_type": "jira",
    "source_id": "OPS-1234",
    "title": "OPS-1234 Heron exporter drops tracks",
    "content": "The heron exporter drops the last tracks of a long playlist.",
}


def results(client: TestClient, **body: Any) -> list[dict[str, Any]]:
    body = {"query": "heron exporter drops tracks", "synthesize": False, **body}
    response = client.post(QUERY, json=body)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["results"]
    return found


def test_a_posted_ticket_keeps_its_own_dates(client: TestClient) -> None:
    ticket = {**TICKET, "created_at": "2024-03-01T09:30:00+02:00", "updated_at": "2024-03-05"}
    created = client.post(DOCUMENTS, json=ticket)
    assert created.status_code == 201, created.text
    doc_id = created.json()["ids"][0]
    stored = client.get(f"{DOCUMENTS}/{doc_id}").json()
    assert stored["created_at"] == "2024-03-01T07:30:00+00:00"
    assert stored["updated_at"] == "2024-03-05T00:00:00+00:00"
    # filtered by when the ticket was created, not when it was posted
    old = {"source_id": "OPS-1234", "created_at": {"$lt": "2025-01-01"}}
    assert [r["source_id"] for r in results(client, filters=old)] == ["OPS-1234"]
    new = {"source_id": "OPS-1234", "created_at": {"$gte": "2025-01-01"}}
    assert results(client, filters=new) == []


def test_recency_ranks_a_posted_item_by_its_own_date(client: TestClient) -> None:
    today = datetime.now(UTC).date().isoformat()
    twin = {**TICKET, "source_id": "OPS-1235", "title": "OPS-1235 Heron exporter drops tracks"}
    assert client.post(DOCUMENTS, json={**TICKET, "created_at": "2019-01-01"}).status_code == 201
    assert client.post(DOCUMENTS, json={**twin, "created_at": today}).status_code == 201
    ranked = results(client, ranking={"recency": {"field": "created_at", "half_life_days": 30}})
    ids = [r["source_id"] for r in ranked if r["source_id"].startswith("OPS-")]
    assert ids == ["OPS-1235", "OPS-1234"]
    plain = [r for r in results(client) if r["source_id"].startswith("OPS-")]
    assert plain[0]["similarity"] == plain[1]["similarity"]  # only the dates differ


def test_a_bad_date_is_a_400_naming_the_field(client: TestClient) -> None:
    for field, value, rule in [
        ("created_at", "yesterday", "ISO 8601"),
        ("updated_at", 20240301, "ISO 8601"),
        ("created_at", "2024-13-01", "ISO 8601"),
    ]:
        response = client.post(DOCUMENTS, json={**TICKET, field: value})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["details"]["field"] == field and rule in error["message"]
    backwards = {**TICKET, "created_at": "2024-03-05", "updated_at": "2024-03-01"}
    response = client.post(DOCUMENTS, json={"documents": [backwards]})
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "updated_at"
    assert "must not be before created_at" in response.json()["error"]["message"]


def test_an_upload_dates_its_documents_and_a_record_its_own(client: TestClient) -> None:
    records = [
        {"_id": "rec-1", "text": "Heron exporter record one.", "created_at": "2021-06-01"},
        {"_id": "rec-2", "text": "Heron exporter record two."},
    ]
    corpus = "\n".join(json.dumps(r) for r in records).encode()
    note = b"# Heron\n\nThe heron exporter note."
    job = submit(
        client,
        [("corpus.jsonl", corpus), ("note.md", note)],
        created_at="2022-01-01",
        updated_at="2022-02-01T12:00:00Z",
    )
    assert wait_for(client, job)["status"] == "done"
    listed = client.get(DOCUMENTS, params={"collection": "default", "limit": 100}).json()
    dates = {
        d["source_id"]: (d["created_at"], d["updated_at"])
        for d in listed["documents"]
        if d["source_id"] in ("rec-1", "rec-2", "note.md")
    }
    assert dates == {
        "rec-1": ("2021-06-01T00:00:00+00:00", "2022-02-01T12:00:00+00:00"),
        "rec-2": ("2022-01-01T00:00:00+00:00", "2022-02-01T12:00:00+00:00"),
        "note.md": ("2022-01-01T00:00:00+00:00", "2022-02-01T12:00:00+00:00"),
    }
    response = client.post(
        "/v1/knowledge/files", files=[("file", ("a.md", b"# A\n\ntext"))], data={"updated_at": "no"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "updated_at"


def test_a_file_is_updated_at_its_modification_time(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "heron.md"
    page.parent.mkdir()
    page.write_text("# Heron\n\nThe heron exporter.")
    when = datetime(2023, 5, 4, 3, 2, 1, tzinfo=UTC).timestamp()
    os.utime(page, (when, when))
    (doc,) = load_paths([page.parent], LoadOptions()).documents
    assert doc.updated_at == "2023-05-04T03:02:01+00:00"
    assert doc.created_at == ""  # the store stamps when it first holds it


def test_a_commit_is_dated_by_its_commit(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "billing")
    commit(repo, "Add the invoice service", {"src/invoice.py": "1"}, "2026-01-05T10:00:00+02:00")
    (doc,) = load_git(repo, GitOptions())
    assert (doc.created_at, doc.updated_at) == ("2026-01-05T08:00:00+00:00",) * 2


def test_a_mail_thread_is_dated_by_its_first_and_last_message(tmp_path: Path) -> None:
    first = (
        "From: ann@example.com\nTo: ops@example.com\nSubject: Heron export\n"
        "Date: Mon, 05 Jan 2026 10:00:00 +0100\nMessage-ID: <a@example.com>\n\nIt drops tracks.\n"
    )
    reply = (
        "From: bob@example.com\nTo: ops@example.com\nSubject: Re: Heron export\n"
        "Date: Wed, 07 Jan 2026 08:15:00 +0000\nMessage-ID: <b@example.com>\n"
        "In-Reply-To: <a@example.com>\nReferences: <a@example.com>\n\nFixed in 2.1.\n"
    )
    (tmp_path / "1.eml").write_text(first)
    (tmp_path / "2.eml").write_text(reply)
    (thread,) = load_paths([tmp_path], LoadOptions()).documents
    assert thread.created_at == "2026-01-05T09:00:00+00:00"
    assert thread.updated_at == "2026-01-07T08:15:00+00:00"
