"""An upload of several files gives each its own source type when `source_type` is sent
once per file (in the files' order); sent once, it applies to every file; sent another
number of times, or with any other field repeated, the upload is a 400 naming the field,
and nothing is kept. On SQLite and Postgres, which keep the upload jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from tests.conftest import make_settings
from tests.pg import postgres_settings
from tests.test_uploads import FILES, parts, wait_for

SENT = [
    ("ticket.md", b"# OPS-7\n\nThe nightly export times out."),
    ("commit.txt", b"Raise the export timeout to ten minutes."),
    ("thread.md", b"# Outage\n\nThe export timed out again last night."),
]


@pytest.fixture(params=["sqlite", "postgres"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    uploads = str(tmp_path / "uploads")
    if request.param == "postgres":
        settings = postgres_settings(request, tmp_path, upload_dir=uploads)
    else:
        settings = make_settings(tmp_path, upload_dir=uploads)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def uploaded(client: TestClient, **form: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The finished job of SENT uploaded with `form`, and the stored source type of
    each file's document, by the file's name."""
    response = client.post(FILES, files=parts(SENT), data=form)
    assert response.status_code == 202, response.text
    job = wait_for(client, response.json()["job_id"])
    assert job["status"] == "done", job
    listed = client.get("/v1/knowledge/documents?collection=default").json()["documents"]
    return job, {doc["source_id"]: doc["source_type"] for doc in listed}


def refusal(client: TestClient, **form: Any) -> dict[str, Any]:
    response = client.post(FILES, files=parts(SENT), data=form)
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_each_file_takes_the_source_type_sent_in_its_place(client: TestClient) -> None:
    job, types = uploaded(client, source_type=["jira", "git", "chat"])
    assert types == {"ticket.md": "jira", "commit.txt": "git", "thread.md": "chat"}
    assert job["source_types"] == ["jira", "git", "chat"]
    assert job["source_type"] == "jira"  # the first file's


def test_one_source_type_applies_to_every_file(client: TestClient) -> None:
    job, types = uploaded(client, source_type="email")
    assert set(types.values()) == {"email"} and len(types) == 3
    assert job["source_type"] == "email" and "source_types" not in job


def test_a_count_of_source_types_that_is_not_the_files_is_a_400(client: TestClient) -> None:
    error = refusal(client, source_type=["jira", "git"])
    assert error["details"]["field"] == "source_type"
    assert "sent 2 times for 3 files" in error["message"]
    bad = refusal(client, source_type=["jira", "blog", "chat"])
    assert bad["details"]["field"] == "source_type[1]"
    twice = refusal(client, collection=["default", "other"])
    assert twice["details"]["field"] == "collection"
    assert client.get("/v1/knowledge/collections").json()["collections"] == []
