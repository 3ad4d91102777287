"""The audit trail: a record for every write through every door (HTTP, MCP, the
command line, the KB sync, key management), read back newest first over HTTP and by
`knowledge-api audit`, kept KNOWLEDGE_AUDIT_DAYS, surviving restarts on every backend."""

from __future__ import annotations

import asyncio
import getpass
import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.ledger import Actor, AuditEntry, AuditQuery, stamp
from knowledge_api.models import Document
from knowledge_api.routes import audit
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import keys
from knowledge_api.usecases.kb_sync import KBSync
from tests.cli_env import cli_home
from tests.conftest import make_settings, seeded
from tests.kb_host import Host, serve
from tests.pg import postgres_settings, supabase_settings
from tests.test_access import bearer, make_key
from tests.test_kb_sync import ARTICLES, syncer
from tests.test_mcp import connected, load, serving, text_of

USER = f"cli:{getpass.getuser()}"
DOC = {
    "source_type": "wiki",
    "source_id": "runbook",
    "content": "Restart the gateway.",
    "title": "Runbook",
}


def trail(service: KnowledgeService, **query: Any) -> list[AuditEntry]:
    return asyncio.run(service.audit_page(AuditQuery(**query)))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    settings = make_settings(tmp_path, auth="keys")
    tokens = {
        name: asyncio.run(make_key(settings, name, scopes, collections))
        for name, scopes, collections in (
            ("writer", ["read", "write"], ()),
            ("boss", ["read", "write", "admin"], ()),
            ("reader", ["read"], ()),
        )
    }
    with TestClient(create_app(settings)) as client:
        yield client, tokens


def test_http_writes_are_recorded_with_key_route_collection_changes_and_request_id(
    secured: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = secured
    batch = {"documents": [DOC, {**DOC, "source_id": "faq", "collection": "ops"}]}
    headers = {**bearer(tokens["writer"]), "X-Request-ID": "write-1"}
    created = client.post("/v1/knowledge/documents", json=batch, headers=headers)
    assert created.status_code == 201
    ids = created.json()["ids"]
    single = client.post(
        "/v1/knowledge/documents", json={**DOC, "collection": "ops"}, headers=bearer(tokens["boss"])
    )
    gone = client.delete(
        f"/v1/knowledge/documents/{single.json()['ids'][0]}", headers=bearer(tokens["boss"])
    )
    assert gone.status_code == 200
    page = client.get("/v1/knowledge/audit", headers=bearer(tokens["boss"])).json()
    deleted, created_one, created_two = page["entries"][:3]
    assert created_two["key"] == "writer" and created_two["request_id"] == "write-1"
    assert created_two["action"] == "POST /v1/knowledge/documents"
    assert created_two["collection"] is None  # two collections: both named in the changes
    assert created_two["changes"]["collections"] == ["default", "ops"]
    assert created_two["changes"]["ids"] == ids and created_two["changes"]["documents"] == 2
    assert created_two["changes"]["indexed"] == 2 and created_two["changes"]["chunks"] >= 2
    assert created_one["key"] == "boss" and created_one["collection"] == "ops"
    assert created_one["request_id"]  # the service's own id when the caller gave none
    assert deleted["action"] == "DELETE /v1/knowledge/documents/{id}"
    assert deleted["changes"] == {"ids": [single.json()["ids"][0]], "documents": 1, "deleted": 1}
    assert deleted["at"] > created_one["at"] > created_two["at"]
    assert page["next_cursor"] is None


def test_the_trail_pages_newest_first_and_filters_by_key_collection_and_time(
    secured: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = secured
    admin = bearer(tokens["boss"])
    for n in range(5):
        who = "writer" if n % 2 else "boss"
        body = {**DOC, "source_id": f"doc-{n}", "collection": "ops" if n < 2 else "default"}
        client.post("/v1/knowledge/documents", json=body, headers=bearer(tokens[who]))
    first = client.get("/v1/knowledge/audit?limit=2", headers=admin).json()
    second = client.get(
        f"/v1/knowledge/audit?limit=2&cursor={first['next_cursor']}", headers=admin
    ).json()
    third = client.get(
        f"/v1/knowledge/audit?limit=2&cursor={second['next_cursor']}", headers=admin
    ).json()
    paged = [e for p in (first, second, third) for e in p["entries"]]
    everything = client.get("/v1/knowledge/audit", headers=admin).json()["entries"]
    assert [e["id"] for e in paged] == [e["id"] for e in everything[:6]]
    assert len({e["id"] for e in paged}) == 6  # no entry twice across pages
    writes = [e for e in everything if e["action"] == "POST /v1/knowledge/documents"]
    assert len(writes) == 5 and everything[:5] == writes  # the keys were made first
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    by_writer = client.get("/v1/knowledge/audit?key=writer", headers=admin).json()["entries"]
    assert len(by_writer) == 2 and {e["key"] for e in by_writer} == {"writer"}
    in_ops = client.get("/v1/knowledge/audit?collection=ops", headers=admin).json()["entries"]
    assert len(in_ops) == 2
    later = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    assert client.get(f"/v1/knowledge/audit?since={later}", headers=admin).json()["entries"] == []
    earlier = client.get(f"/v1/knowledge/audit?until={later}", headers=admin).json()["entries"]
    assert len(earlier) == len(everything)
    cut = writes[2]["at"]
    since = client.get(f"/v1/knowledge/audit?since={cut}", headers=admin).json()["entries"]
    assert [e["id"] for e in since] == [e["id"] for e in everything if e["at"] >= cut]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("cursor=zzz", "cursor"),
        ("since=yesterday", "since"),
        ("collection=../x", "collection"),
        ("since=9999-12-31T23:59:59-14:00", "since"),  # past year 9999 in UTC
        ("until=0001-01-01T00:00:00%2B14:00", "until"),  # before year 1 in UTC
        (f"cursor={audit.cursor_of(2**63)}", "cursor"),  # past a 64-bit id
        ("colection=ops", "colection"),
    ],
)
def test_bad_audit_parameters_are_400_naming_the_field(
    secured: tuple[TestClient, dict[str, str]], query: str, field: str
) -> None:
    client, tokens = secured
    refused = client.get(f"/v1/knowledge/audit?{query}", headers=bearer(tokens["boss"]))
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["field"] == field


def test_an_empty_bound_is_no_bound_as_the_document_allows(
    secured: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = secured
    admin = bearer(tokens["boss"])
    everything = client.get("/v1/knowledge/audit", headers=admin).json()["entries"]
    assert everything  # the keys made
    for query in ("until=", "since=", "since=&until="):
        page = client.get(f"/v1/knowledge/audit?{query}", headers=admin)
        assert page.status_code == 200 and page.json()["entries"] == everything


def test_the_trail_is_for_admins_only(secured: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = secured
    assert client.get("/v1/knowledge/audit", headers=bearer(tokens["writer"])).status_code == 403
    assert client.get("/v1/knowledge/audit").status_code == 401


async def test_an_mcp_write_is_recorded_with_its_key_and_request(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    await load(settings)
    async with serving(settings) as app, connected(app) as client:
        added = await client.call_tool("add_document", {**DOC, "collection": "ops"})
        assert not added.is_error, text_of(added)
        service: KnowledgeService = app.state.service
        [entry] = await service.audit_page(AuditQuery(collection="ops"))
    assert entry.action == "mcp add_document" and entry.actor == "-"  # keys off
    assert entry.request_id and entry.changes["ids"] == [json.loads(text_of(added))["id"]]


def test_command_line_writes_and_key_management_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    (tmp_path / "notes.md").write_text("# Notes\n\nThe gateway timeout is 30 s.")
    assert main(["ingest", "notes.md", "--collection", "ops"]) == 0
    assert main(["keys", "create", "--name", "bot", "--scopes", "read"]) == 0
    assert main(["keys", "revoke", "bot"]) == 0
    capsys.readouterr()
    assert main(["audit"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["key"], e["action"]) for e in lines] == [
        (USER, "keys revoke"),
        (USER, "keys create"),
        (USER, "cli ingest"),
    ]
    assert lines[0]["changes"] == {"key": "bot"}
    assert lines[1]["changes"] == {"key": "bot", "scopes": ["read"], "collections": []}
    assert lines[2]["collection"] == "ops" and lines[2]["changes"]["indexed"] == 1
    assert main(["audit", "--limit", "1", "--collection", "ops"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0])["action"] == "cli ingest" and out[1].startswith("next_cursor: ")
    assert main(["audit", "--since", "tomorrow"]) == 2
    assert "since: must be an ISO 8601 date" in capsys.readouterr().err
    assert main(["audit", "--since", "9999-12-31T23:59:59-14:00"]) == 2
    [said] = capsys.readouterr().err.splitlines()
    assert said.startswith("error: ") and "since: must be a moment of the years 1 to 9999" in said


async def test_a_kb_sync_records_what_it_indexed_and_removed(
    service: KnowledgeService,
) -> None:
    with serve(Host(articles=[dict(a) for a in ARTICLES])) as host:
        sync = syncer(service, host.url)
        await sync.run(full=True)
        await sync.run()  # nothing new: nothing written, nothing recorded
        del host.articles[0]
        await KBSync(service, sync.host, "support", Actor("cli:ops")).run(full=True)
    removal, first = await service.audit_page(AuditQuery())
    assert (first.actor, first.action, first.collection) == ("kb-sync", "kb sync full", "support")
    assert first.changes["indexed"] == 5 and first.changes["removed"] == 0
    assert (removal.actor, removal.changes["removed"]) == ("cli:ops", 1)
    assert removal.changes["removed_ids"] and removal.changes["indexed"] == 0


async def test_records_older_than_the_kept_days_are_forgotten(tmp_path: Path) -> None:
    service = build_service(make_settings(tmp_path, audit_days=30))
    await service.open_storage()
    try:
        old = datetime.now(UTC) - timedelta(days=31)
        recent = datetime.now(UTC) - timedelta(days=29)
        for moment, action in ((old, "old"), (recent, "recent")):
            await service.audit_log.append(AuditEntry("x", action, None, {}, None, stamp(moment)))
        await service.audit(Actor("x"), "now", None, {})
        kept = [e.action for e in await service.audit_page(AuditQuery())]
    finally:
        await service.stop()
    assert kept == ["now", "recent"]


BACKENDS = {
    "sqlite": lambda request, tmp: make_settings(tmp),
    "postgres": postgres_settings,
    "supabase": supabase_settings,
    "chroma": lambda request, tmp: make_settings(tmp, store="chroma", chroma_path=tmp / "chroma"),
    "qdrant": lambda request, tmp: make_settings(
        tmp, store="qdrant", qdrant_path=str(tmp / "qdrant")
    ),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_the_trail_survives_a_restart_on_every_backend(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    settings: Settings = BACKENDS[backend](request, tmp_path)
    for n in range(2):  # a process, then another one
        service = build_service(settings)
        await service.open_storage()
        try:
            await service.audit(
                Actor("writer", f"req-{n}"),
                "POST /v1/knowledge/documents",
                "ops",
                {"ids": [f"d{n}"], "documents": 1},
            )
            entries = await service.audit_page(AuditQuery(limit=10))
            since = await service.audit_page(
                AuditQuery(since=entries[-1].at, actor="writer", collection="ops")
            )
        finally:
            await service.stop()
    assert [e.request_id for e in entries] == ["req-1", "req-0"]
    assert entries[0].changes == {"ids": ["d1"], "documents": 1}
    assert entries[0].at > entries[1].at and entries[0].at.endswith("Z")
    assert len(since) == 2


def test_a_key_created_over_the_service_records_who(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)

    async def run() -> list[AuditEntry]:
        service = build_service(settings)
        await service.open_storage()
        try:
            await keys.create(service, "svc", ["read"], ["ops"], Actor("boss", "req-9"))
            return await service.audit_page(AuditQuery())
        finally:
            await service.stop()

    [entry] = asyncio.run(run())
    assert (entry.actor, entry.request_id, entry.action) == ("boss", "req-9", "keys create")
    assert entry.changes == {"key": "svc", "scopes": ["read"], "collections": ["ops"]}


def test_seeding_the_empty_store_is_recorded(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.md").write_text("# A\n\nAlpha.")
    settings = make_settings(tmp_path, seed_on_empty=True, seed_path=str(seed))
    with TestClient(create_app(settings)) as client:
        service: KnowledgeService = client.app.state.service  # type: ignore[attr-defined]
        seeded(client)
        [entry] = client.portal.call(service.audit_page, AuditQuery())
    assert (entry.actor, entry.action, entry.changes["indexed"]) == ("service", "seed", 1)


def test_a_store_migration_is_recorded_in_the_targets_trail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in {
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_DB_PATH": str(tmp_path / "k.db"),
        "KNOWLEDGE_QDRANT_PATH": str(tmp_path / "qdrant"),
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "notes.md").write_text("# Notes\n\nThe gateway timeout is 30 s.")
    assert main(["ingest", "notes.md"]) == 0
    assert main(["migrate-store", "--from", "sqlite", "--to", "qdrant"]) == 0
    assert main(["migrate-store", "--from", "sqlite", "--to", "qdrant"]) == 0  # nothing new
    capsys.readouterr()
    assert main(["audit", "--limit", "5"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["action"] for e in lines] == ["cli migrate-store --from sqlite", "cli ingest"]
    assert lines[0]["key"] == USER and lines[0]["changes"]["indexed"] == 1


def runbooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Commands run from `tmp_path`, where a folder holds the runbooks a, b and c: the folder."""
    cli_home(tmp_path, monkeypatch)
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nThe {name} runbook restarts the gateway.")
    return docs


def test_a_mirror_an_import_and_a_source_delete_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = runbooks(tmp_path, monkeypatch)
    assert main(["ingest", "docs", "--name", "runbooks"]) == 0
    (docs / "c.md").unlink()
    assert main(["ingest", "docs", "--name", "runbooks", "--prune"]) == 0
    assert main(["ingest", "docs", "--name", "runbooks", "--prune"]) == 0  # nothing changed
    assert main(["export", "--collection", "default", "--output", "backup.jsonl"]) == 0
    assert main(["import", "backup.jsonl", "--collection", "copy"]) == 0
    capsys.readouterr()
    assert main(["audit"]) == 0
    imported, pruned, mirrored = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (mirrored["key"], mirrored["action"], mirrored["collection"]) == (
        USER,
        "cli ingest",
        "default",
    )
    assert mirrored["changes"]["documents"] == 3 and mirrored["changes"]["removed"] == 0
    assert pruned["action"] == "cli ingest" and pruned["changes"]["removed"] == 1
    assert len(pruned["changes"]["removed_ids"]) == 1
    assert set(pruned["changes"]["removed_ids"]) <= set(mirrored["changes"]["ids"])
    assert (imported["action"], imported["collection"]) == ("cli import", "copy")
    assert imported["changes"]["documents"] == 2 and imported["changes"]["embedded"] == 0


def test_a_source_deleted_over_http_is_recorded(
    secured: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = secured
    service: KnowledgeService = client.app.state.service  # type: ignore[attr-defined]
    docs = [
        Document("wiki", f"{name}.md", f"The {name} page.", name, collection="ops")
        for name in ("one", "two")
    ]
    client.portal.call(lambda: service.ingest(docs, source="/srv/wiki"))  # type: ignore[union-attr]
    headers = {**bearer(tokens["writer"]), "X-Request-ID": "purge-1"}
    gone = client.delete("/v1/knowledge/sources//srv/wiki?collection=ops", headers=headers)
    assert gone.status_code == 200 and gone.json()["deleted"] == 2
    [entry] = client.get(
        "/v1/knowledge/audit?collection=ops", headers=bearer(tokens["boss"])
    ).json()["entries"]
    assert (entry["key"], entry["action"], entry["request_id"]) == (
        "writer",
        "DELETE /v1/knowledge/sources/{name}",
        "purge-1",
    )
    assert entry["changes"] == {
        "source": "/srv/wiki",
        "ids": sorted(d.id for d in docs),
        "documents": 2,
    }


def test_an_upload_and_its_job_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path, upload_dir=str(tmp_path / "uploads"))
    files = [
        ("file", ("kestrel.md", b"# Kestrel\n\nKestrel rotates the ingest keys weekly.")),
        ("file", ("heron.md", b"# Heron\n\nHeron keeps uploads for a day.")),
    ]
    with TestClient(create_app(settings)) as client:
        service: KnowledgeService = client.app.state.service  # type: ignore[attr-defined]
        append = service.audit_log.append

        async def slow_append(entry: AuditEntry) -> None:  # a trail on a busy disk
            await asyncio.sleep(0.3)
            await append(entry)

        monkeypatch.setattr(service.audit_log, "append", slow_append)
        accepted = client.post(
            "/v1/knowledge/files",
            files=files,
            data={"collection": "manuals"},
            headers={"X-Request-ID": "up-1"},
        )
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]

        def recorded() -> list[AuditEntry]:
            return client.portal.call(service.audit_page, AuditQuery(collection="manuals"))

        deadline = time.monotonic() + 30
        while client.get(f"/v1/knowledge/jobs/{job_id}").json()["status"] != "done":
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.01)
        indexed, sent = recorded()[:2]  # the job's own record is there once it shows done
    assert (sent.actor, sent.action, sent.request_id) == ("-", "POST /v1/knowledge/files", "up-1")
    assert sent.changes == {"job_id": job_id, "files": ["kestrel.md", "heron.md"]}
    assert (indexed.actor, indexed.action) == (f"job:{job_id}", "upload job")
    assert indexed.changes["documents"] == 2 and indexed.changes["job_id"] == job_id


def test_an_import_lists_every_document_of_the_file_it_stored_after_a_killed_run_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runbooks(tmp_path, monkeypatch)
    assert main(["ingest", "docs"]) == 0
    assert main(["export", "--collection", "default", "--output", "backup.jsonl"]) == 0
    header, first, *_ = Path("backup.jsonl").read_text().splitlines()
    Path("first.jsonl").write_text(f"{header}\n{first}\n")

    async def killed(*args: Any) -> None:
        """The import was killed once its document was committed, before its record."""

    with monkeypatch.context() as inside:
        inside.setattr(KnowledgeService, "audit", killed)
        assert main(["import", "first.jsonl", "--collection", "copy"]) == 0
    assert main(["import", "backup.jsonl", "--collection", "copy"]) == 0  # the rerun
    capsys.readouterr()
    assert main(["audit", "--limit", "1"]) == 0
    [rerun] = [json.loads(line) for line in capsys.readouterr().out.splitlines()[:1]]
    with sqlite3.connect(tmp_path / "k.db") as conn:
        stored = {r[0] for r in conn.execute("SELECT id FROM documents WHERE collection = 'copy'")}
    assert (rerun["action"], rerun["collection"]) == ("cli import", "copy")
    assert len(stored) == 3 and set(rerun["changes"]["ids"]) == stored
    changes = rerun["changes"]
    assert (changes["documents"], changes["indexed"], changes["unchanged"]) == (3, 2, 1)
