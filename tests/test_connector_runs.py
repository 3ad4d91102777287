"""The rules every connector's runs keep, with a fake kind whose service is a dict (and,
for the HTTP rules, a real server on loopback): the overlap of incremental windows, an
item read twice, a window written in bounded batches as its pages come, the cursor (a
run stopped midway skips nothing), dates, retries, refusals that stop a run, the warning of a
first sync that finds nothing, prunes (--full, KNOWLEDGE_PRUNE_EVERY) under the
mass-delete guard, the scheduled runs, and what /health, /metrics and the listing say."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.connectors import registry
from knowledge_api.connectors.base import Runtime, Window, secret
from knowledge_api.errors import ConnectorFailed, KnowledgeStoreError
from knowledge_api.ledger import Actor
from knowledge_api.models import ConnectorSource, Document, IndexSummary
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import connectors as use
from tests import loopback
from tests.conftest import make_settings, running
from tests.pg import postgres_settings

LONG_AGO = "2020-01-01T00:00:00+00:00"
ACTOR = Actor("test")


@dataclass
class Item:
    text: str
    updated: str = LONG_AGO
    created: str = LONG_AGO
    indexed: bool = True
    """False while the service's search does not return it yet (its index lags)."""


@dataclass
class Vendor:
    """A service holding items; what connectors asked of it."""

    items: dict[str, Item] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    listed: int = 0
    twice: list[Document] = field(default_factory=list)
    """Read again at the end of the window (a page shifted under the search)."""
    fail: str = ""
    page: int = 0
    """Items a page of its search serves, one page at a time (0: all at once)."""
    pages: int = 0
    """Pages its searches have served."""


VENDORS: dict[str, Vendor] = {}


def document(key: str, item: Item) -> Document:
    return Document(
        "jira",
        key,
        item.text,
        title=f"{key} {item.text.splitlines()[0]}",
        collection="ops",
        created_at=item.created,
        updated_at=item.updated,
    )


class FakeConnector:
    kind: ClassVar[str] = "fake"

    def __init__(self, source: ConnectorSource, collection: str, runtime: Runtime) -> None:
        self.vendor = VENDORS[source.url]

    @classmethod
    def from_settings(
        cls, source: ConnectorSource, collection: str, runtime: Runtime
    ) -> FakeConnector:
        return cls(source, collection, runtime)

    def changed(self, since: str) -> Window:
        self.vendor.asked.append(since)
        if self.vendor.fail:
            raise ConnectorFailed(self.vendor.fail)
        start = datetime.fromisoformat(since) if since else None
        found = [
            document(key, item)
            for key, item in sorted(self.vendor.items.items())
            if item.indexed and (start is None or datetime.fromisoformat(item.updated) >= start)
        ]
        if self.vendor.page:
            return Window(self.paged(found))
        return Window(found + self.vendor.twice)

    def paged(self, found: list[Document]) -> Iterator[Document]:
        """The documents a page at a time, as a service's search serves them."""
        for start in range(0, len(found), self.vendor.page):
            self.vendor.pages += 1
            yield from found[start : start + self.vendor.page]

    def visible(self) -> set[str]:
        self.vendor.listed += 1
        return set(self.vendor.items)

    def close(self) -> None:
        pass


class HTTPConnector(FakeConnector):
    """Reads GET /items of the server at the source's URL through the runtime's client."""

    kind: ClassVar[str] = "fakehttp"

    def __init__(self, source: ConnectorSource, collection: str, runtime: Runtime) -> None:
        token, password = secret(source, "token"), secret(source, "password")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        auth = (source.settings.get("user", ""), password) if password else None
        self.http = runtime.http(source.url, headers, auth)

    def changed(self, since: str) -> Window:
        body = self.http.get_json("/items")
        return Window([document(key, Item(text)) for key, text in sorted(body.items())])

    def visible(self) -> set[str]:
        return set(self.http.get_json("/items"))

    def close(self) -> None:
        self.http.close()


@pytest.fixture(autouse=True)
def kinds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(registry.connectors._targets, "fake", FakeConnector)
    monkeypatch.setitem(registry.connectors._targets, "fakehttp", HTTPConnector)
    yield
    VENDORS.clear()


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """A store of each engine the connector sources are kept in (their records, cursors
    and leases are the store's)."""
    if request.param == "postgres":
        return postgres_settings(request, tmp_path)
    return make_settings(tmp_path, db_path=tmp_path / "k.db")


async def add(service: KnowledgeService, name: str, vendor: Vendor, **settings: str) -> None:
    VENDORS[name] = vendor
    await use.add_source(service, "ops", name, ConnectorSource("fake", name, settings))


async def run(service: KnowledgeService, name: str, **options: bool) -> use.SyncResult:
    info, source = await use.find_source(service, name, "ops")
    return await use.sync_source(service, info, source, ACTOR, **options)


async def synced(service: KnowledgeService, count: int = 4) -> Vendor:
    """Source `jira` of a vendor with the issues OPS-1 to OPS-`count`, synced once."""
    vendor = Vendor({f"OPS-{n}": Item(f"Issue {n}") for n in range(1, count + 1)})
    await add(service, "jira", vendor)
    await run(service, "jira")
    return vendor


async def record(service: KnowledgeService, name: str) -> ConnectorSource:
    return (await use.find_source(service, name, "ops"))[1]


async def stored(service: KnowledgeService, name: str) -> dict[str, Document]:
    owned = await service.store.source_documents("ops", name)
    found = [await service.store.get_by_id(doc_id) for doc_id in owned]
    return {doc.source_id: doc for doc in found if doc is not None}


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat(timespec="seconds")


# -- incremental windows ---------------------------------------------------------------


@pytest.mark.parametrize(("overlap", "picked_up"), [(600.0, True), (0.0, False)])
async def test_an_item_the_search_returned_late_is_read_by_the_next_run(
    settings: Settings, overlap: float, picked_up: bool
) -> None:
    """OPS-2 was updated two minutes before the first run began, but the service's
    search did not return it then; the next run's window starts ten minutes before
    the cursor and reads it (with no overlap it would be missed for good). OPS-1, read
    again in the overlap, is neither embedded nor written again."""
    service = build_service(settings.replace(sync_overlap=overlap))
    await service.start()
    try:
        vendor = Vendor({"OPS-1": Item("Heron export fails", updated=ago(seconds=30))})
        await add(service, "jira", vendor)
        first = await run(service, "jira")
        assert first.error is None and first.plan is not None and len(first.plan.added) == 1
        cursor = (await record(service, "jira")).cursor
        began = datetime.fromisoformat(cursor)
        assert datetime.now(UTC) - began < timedelta(minutes=1)
        lagging = (began - timedelta(minutes=2)).isoformat()
        vendor.items["OPS-2"] = Item("Kestrel keys rotate weekly", updated=lagging)
        second = await run(service, "jira")
        assert vendor.asked[1] == (began - timedelta(seconds=overlap)).isoformat()
        assert second.report is not None and second.plan is not None
        if picked_up:
            assert "OPS-2" in await stored(service, "jira")
            assert (len(second.plan.added), second.plan.unchanged) == (1, 1)
            assert second.report.indexed.embedded == 1  # OPS-2's passage only
        else:
            assert "OPS-2" not in await stored(service, "jira")
        assert (await record(service, "jira")).cursor >= cursor
    finally:
        await service.stop()


async def test_an_item_read_twice_in_a_window_is_stored_once_as_updated_last(
    service: KnowledgeService,
) -> None:
    newer = Item("Heron export fails on long playlists", updated="2024-03-02T00:00:00+00:00")
    older = document("OPS-1", Item("Heron export fails", updated="2024-03-01T00:00:00+00:00"))
    await add(service, "jira", Vendor({"OPS-1": newer}, twice=[older]))
    result = await run(service, "jira")
    assert result.plan is not None and len(result.plan.added) == 1
    (doc,) = (await stored(service, "jira")).values()
    assert doc.content == newer.text and doc.updated_at == newer.updated


async def test_only_the_changed_passages_of_an_edited_item_are_embedded(
    service: KnowledgeService,
) -> None:
    text = "# Symptom\n\nThe heron export drops tracks.\n\n# Fix\n\nUpgrade to 2.1."
    vendor = Vendor({"OPS-1": Item(text, updated=ago(hours=1))})
    await add(service, "jira", vendor)
    assert (await run(service, "jira")).report.indexed.embedded == 2  # type: ignore[union-attr]
    vendor.items["OPS-1"] = Item(text.replace("2.1", "2.2"), updated=ago(seconds=1))
    edited = await run(service, "jira")
    assert edited.plan is not None and len(edited.plan.updated) == 1
    assert edited.report is not None and edited.report.indexed.embedded == 1


async def test_documents_carry_their_items_dates(service: KnowledgeService) -> None:
    item = Item("Heron", created="2023-01-02T03:04:05+00:00", updated="2023-02-03T04:05:06+00:00")
    await add(service, "jira", Vendor({"OPS-1": item}))
    await run(service, "jira")
    (doc,) = (await stored(service, "jira")).values()
    assert (doc.created_at, doc.updated_at) == (item.created, item.updated)


async def disk_full(*args: Any, **kwargs: Any) -> IndexSummary:
    raise KnowledgeStoreError("the disk is full")


async def test_the_cursor_moves_only_once_the_window_is_stored(settings: Settings) -> None:
    failing = build_service(settings)
    failing.catalog.ingest = disk_full  # type: ignore[method-assign]
    await failing.start()
    try:
        await add(failing, "jira", Vendor({"OPS-1": Item("Heron", updated=ago(days=1))}))
        result = await run(failing, "jira")
        assert result.error is not None and "the disk is full" in result.error
        source = await record(failing, "jira")
        assert source.cursor == "" and source.last_error == result.error
        assert await stored(failing, "jira") == {}
    finally:
        await failing.stop()
    service = build_service(settings)
    await service.start()
    try:
        assert (await run(service, "jira")).error is None
        source = await record(service, "jira")
        assert source.cursor and source.last_error is None
        assert list(await stored(service, "jira")) == ["OPS-1"]
    finally:
        await service.stop()


def pages_left(vendor: Vendor) -> int:
    return -(-len(vendor.items) // vendor.page) - vendor.pages


async def test_a_window_is_written_in_bounded_batches_while_it_is_read(
    service: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window of 40 items served 4 a page: the store is written batch by batch (at
    most READ_BATCH documents a write) while the service still has pages to serve, so
    a run never holds a whole project."""
    monkeypatch.setattr(registry, "READ_BATCH", 6)
    vendor = Vendor({f"OPS-{n}": Item(f"Issue {n}", updated=ago(hours=1)) for n in range(40)})
    vendor.page = 4
    writes: list[tuple[int, int]] = []
    index = service.store.index_documents

    async def recorded(documents: Any) -> None:
        writes.append((len(documents), pages_left(vendor)))
        await index(documents)

    monkeypatch.setattr(service.store, "index_documents", recorded)
    await add(service, "jira", vendor)
    result = await run(service, "jira")
    assert result.error is None and result.plan is not None and len(result.plan.added) == 40
    assert len(writes) >= 40 // 6 and all(size <= 6 for size, _ in writes)
    assert writes[0][1] > 0  # written while pages were still to be read
    assert len(await stored(service, "jira")) == 40


async def test_a_run_stopped_midway_keeps_its_cursor_and_skips_nothing_next_time(
    service: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails on the second batch of a window: the first batch stays written,
    the cursor stays where it was, and the next run reads the window again and writes
    the rest (the first batch, unchanged, is not embedded again)."""
    monkeypatch.setattr(registry, "READ_BATCH", 5)
    vendor = Vendor({f"OPS-{n:02}": Item(f"Old issue {n}", updated=ago(days=3)) for n in range(3)})
    vendor.page = 5
    await add(service, "jira", vendor)
    assert (await run(service, "jira")).error is None
    cursor = (await record(service, "jira")).cursor
    vendor.items |= {
        f"OPS-{n:02}": Item(f"New issue {n}", updated=ago(seconds=1)) for n in range(3, 20)
    }
    index, writes = service.store.index_documents, []

    async def failing(documents: Any) -> None:
        writes.append(len(documents))
        if len(writes) == 2:
            raise KnowledgeStoreError("the disk is full")
        await index(documents)

    monkeypatch.setattr(service.store, "index_documents", failing)
    stopped = await run(service, "jira")
    assert stopped.error is not None and "the disk is full" in stopped.error
    assert (await record(service, "jira")).cursor == cursor
    assert 3 < len(await stored(service, "jira")) < 20
    monkeypatch.setattr(service.store, "index_documents", index)
    again = await run(service, "jira")
    assert again.error is None and again.report is not None
    assert sorted(await stored(service, "jira")) == sorted(vendor.items)
    assert again.plan is not None and again.plan.unchanged == writes[0]
    assert again.report.indexed.embedded == 20 - 3 - writes[0]
    moved = await record(service, "jira")
    assert moved.last_error is None and moved.cursor >= cursor


# -- prunes ----------------------------------------------------------------------------


async def test_an_incremental_run_lists_no_ids_and_full_prunes(service: KnowledgeService) -> None:
    vendor = await synced(service)
    assert vendor.listed == 0  # nothing was stored: nothing to prune
    assert (await record(service, "jira")).last_prune  # and the prune is not due
    del vendor.items["OPS-4"]
    again = await run(service, "jira")
    assert vendor.listed == 0 and again.report is not None and again.report.deleted == 0
    assert "OPS-4" in await stored(service, "jira")
    dry = await run(service, "jira", full=True, dry_run=True)
    assert dry.plan is not None and list(dry.plan.deleted.values()) == ["OPS-4"]
    assert "OPS-4" in await stored(service, "jira")
    full = await run(service, "jira", full=True)
    assert full.report is not None and full.report.deleted == 1
    assert sorted(await stored(service, "jira")) == ["OPS-1", "OPS-2", "OPS-3"]
    assert vendor.asked[-1] == ""  # --full reads every item


async def test_a_prune_runs_when_the_last_one_is_older_than_prune_every(
    service: KnowledgeService,
) -> None:
    vendor = await synced(service)
    del vendor.items["OPS-4"]
    source = await record(service, "jira")
    old = replace(source, last_prune=ago(days=2))
    await service.store.record_source("ops", "jira", connector=old.to_json())
    pruned = await run(service, "jira")
    assert vendor.listed == 1 and pruned.report is not None and pruned.report.deleted == 1
    assert (await record(service, "jira")).last_prune > old.last_prune
    await run(service, "jira")
    assert vendor.listed == 1  # not due again for 24 hours


async def test_prune_every_0_leaves_pruning_to_full(settings: Settings) -> None:
    async with running(settings.replace(prune_every=0.0)) as service:
        vendor = await synced(service)
        assert (await record(service, "jira")).last_prune == ""
        del vendor.items["OPS-4"]
        await run(service, "jira")
        assert vendor.listed == 0 and len(await stored(service, "jira")) == 4
        await run(service, "jira", full=True)
        assert vendor.listed == 1 and len(await stored(service, "jira")) == 3


async def test_a_prune_of_most_of_a_source_needs_allow_mass_delete(
    service: KnowledgeService,
) -> None:
    vendor = await synced(service)
    vendor.items = {"OPS-1": vendor.items["OPS-1"]}
    refused = await run(service, "jira", full=True)
    assert refused.error is not None and "--allow-mass-delete" in refused.error
    assert len(await stored(service, "jira")) == 4
    assert (await record(service, "jira")).last_error == refused.error
    allowed = await run(service, "jira", full=True, allow_mass_delete=True)
    assert allowed.report is not None and allowed.report.deleted == 3


async def test_a_run_that_would_empty_most_of_a_source_empties_nothing(
    service: KnowledgeService,
) -> None:
    """Every item lost its text (a changed API, a field renamed): the documents that
    would be emptied are held back while the window streams by, and the guard refuses
    them; the stored text stays until the run is allowed."""
    vendor = await synced(service)
    vendor.items = {key: Item(" ", updated=ago(seconds=1)) for key in vendor.items}
    refused = await run(service, "jira", full=True)
    assert refused.error is not None and "(4 of them emptied)" in refused.error
    kept = await stored(service, "jira")
    assert sorted(doc.content for doc in kept.values()) == [f"Issue {n}" for n in range(1, 5)]
    allowed = await run(service, "jira", full=True, allow_mass_delete=True)
    assert allowed.error is None and allowed.plan is not None
    assert any("(emptied: no text left)" in line for line in allowed.plan.lines())
    assert all(not doc.content.strip() for doc in (await stored(service, "jira")).values())


# -- failures and warnings -------------------------------------------------------------


async def test_a_failing_run_deletes_nothing_and_keeps_its_cursor(
    service: KnowledgeService,
) -> None:
    vendor = await synced(service, 2)
    cursor = (await record(service, "jira")).cursor
    vendor.items.clear()
    vendor.fail = "GET /rest/api/2/search: the endpoint is gone (410)"
    result = await run(service, "jira", full=True, allow_mass_delete=True)
    assert result.error == vendor.fail and "sync stopped" in result.line()
    source = await record(service, "jira")
    assert source.cursor == cursor and source.last_error == vendor.fail
    assert len(await stored(service, "jira")) == 2


def test_a_first_sync_that_finds_nothing_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    VENDORS["empty"] = vendor = Vendor()
    add = ["sources", "add", "empty", "--kind", "fake", "--url", "empty", "--collection", "ops"]
    assert main(add) == 0
    capsys.readouterr()
    assert main(["sources", "sync", "empty"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("ops/empty: 0 added, 0 updated, 0 unchanged, 0 deleted; warning: ")
    assert "the first sync found nothing" in line
    assert main(["sources", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["sources"]
    assert "the first sync found nothing" in listed["warning"] and listed["last_error"] is None
    assert main(["sources"]) == 0
    assert "\twarning the first sync found nothing" in capsys.readouterr().out
    vendor.items["OPS-1"] = Item("Heron", updated=ago(seconds=1))
    assert main(["sources", "sync", "empty"]) == 0
    assert "warning" not in capsys.readouterr().out
    assert main(["sources", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sources"][0]["warning"] is None


def test_sync_all_exits_1_when_any_run_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    VENDORS["good"] = Vendor({"OPS-1": Item("Heron")})
    VENDORS["bad"] = Vendor(fail="GET /search: the credentials were refused (401)")
    for name in ("good", "bad"):
        assert main(["sources", "add", name, "--kind", "fake", "--url", name]) == 0
    capsys.readouterr()
    assert main(["sources", "sync", "--all"]) == 1
    out = capsys.readouterr().out
    assert "default/good: 1 added, 0 updated, 0 unchanged, 0 deleted" in out
    assert "default/bad: sync stopped: GET /search: the credentials were refused (401)" in out
    assert main(["sources", "sync", "good"]) == 0
    assert main(["sources", "sync", "bad"]) == 1


# -- HTTP: retries and refusals ---------------------------------------------------------


class Script:
    """What the fake service answers, in turn; the last answer repeats."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str]]] = [(200, {})]
        self.body: dict[str, str] = {}
        self.calls = 0
        self.headers: list[str] = []
        self.echo = False
        """Errors repeat the request's headers, credentials included."""

    def next(self) -> tuple[int, dict[str, str]]:
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def service_http() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(loopback.Handler):
        def do_GET(self) -> None:
            script.headers.append(self.headers.get("Authorization", ""))
            status, body = script.next()
            if script.echo:
                body = {"message": f"refused, request headers: {dict(self.headers)}"}
            payload = json.dumps(body if status != 200 else script.body).encode()
            self.respond(status, payload, {"Content-Type": "application/json"})

    with loopback.serving(Handler) as url:
        yield url, script


async def add_http(service: KnowledgeService, url: str) -> None:
    await use.add_source(service, "ops", "vendor", ConnectorSource("fakehttp", url))


@pytest.mark.parametrize(("retries", "stops"), [(1, True), (3, False)])
async def test_sync_retries_bound_the_tries_of_every_call(
    tmp_path: Path, service_http: tuple[str, Script], retries: int, stops: bool
) -> None:
    url, script = service_http
    script.body = {"OPS-1": "Heron export fails"}
    script.answers = [(503, {}), (502, {}), (200, {})]
    service = build_service(make_settings(tmp_path, sync_retries=retries))
    await service.start()
    try:
        await add_http(service, url)
        result = await run(service, "vendor")
        if stops:
            assert result.error is not None and "answered 502, 2 tries" in result.error
            assert url in result.error and script.calls == 2
        else:
            assert result.error is None and list(await stored(service, "vendor")) == ["OPS-1"]
    finally:
        await service.stop()


@pytest.mark.parametrize("status", [401, 403, 404, 410])
async def test_a_refusal_stops_the_run_with_its_reason_and_deletes_nothing(
    service: KnowledgeService, service_http: tuple[str, Script], status: int
) -> None:
    url, script = service_http
    script.body = {"OPS-1": "Heron", "OPS-2": "Kestrel"}
    await add_http(service, url)
    assert (await run(service, "vendor")).error is None
    script.answers = [(status, {"message": "no"})]
    result = await run(service, "vendor", full=True, allow_mass_delete=True)
    assert result.error is not None and f"({status})" in result.error
    assert script.calls == 2  # not tried again
    assert (await record(service, "vendor")).last_error == result.error
    assert sorted(await stored(service, "vendor")) == ["OPS-1", "OPS-2"]


def test_no_password_leaves_the_process(
    tmp_path: Path,
    service_http: tuple[str, Script],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A source logging in with a user and a password (basic auth), at a service that
    echoes the request's headers in its errors: neither the password nor the header
    made of it is in the store, the log, the CLI's output or the listing."""
    password = "pw-9c2e-Hunter2"
    url, script = service_http
    script.body = {"OPS-1": "Heron"}
    monkeypatch.setenv("KNOWLEDGE_EMBEDDER", "fake")
    monkeypatch.setenv("KNOWLEDGE_DB_PATH", str(tmp_path / "k.db"))
    monkeypatch.setenv("KNOWLEDGE_SYNC_RETRIES", "0")
    monkeypatch.setenv("VENDOR_PASSWORD", password)
    caplog.set_level("DEBUG")
    add = ["sources", "add", "vendor", "--kind", "fakehttp", "--url", url, "--set",
           "user=ops", "--secret", "password=VENDOR_PASSWORD"]  # fmt: skip
    assert main(add) == 0
    assert main(["sources", "sync", "vendor"]) == 0
    script.answers, script.echo = [(500, {})], True
    assert main(["sources", "sync", "vendor"]) == 1
    assert main(["sources", "--json"]) == 0
    out = capsys.readouterr().out
    basic = script.headers[0].removeprefix("Basic ")
    assert script.headers[0].startswith("Basic ") and "request headers" in out
    store = b"".join(path.read_bytes() for path in tmp_path.glob("k.db*"))
    for text in (out, caplog.text, store.decode("utf-8", "replace")):
        assert password not in text and basic not in text


# -- the service's schedule, /health, /metrics ---------------------------------------------


def wait(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_no_interval_and_no_every_runs_no_sync_and_no_prune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(use, "TICK", 0.1)
    settings = make_settings(tmp_path, db_path=tmp_path / "k.db", sync_interval=0.0)
    VENDORS["jira"] = vendor = Vendor({"OPS-1": Item("Heron")})
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service  # type: ignore[attr-defined]
        client.portal.call(add, service, "jira", vendor)
        wait(lambda: client.get("/health").json()["connectors"]["checked_at"])
        time.sleep(0.3)  # a few ticks
        assert client.get("/health").json()["connectors"]["runs"] == {}
    assert vendor.asked == [] and vendor.listed == 0


def test_scheduled_runs_show_in_health_metrics_and_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(use, "TICK", 0.1)
    settings = make_settings(tmp_path, db_path=tmp_path / "k.db", sync_interval=900.0)
    VENDORS["jira"] = Vendor({"OPS-1": Item("Heron")})
    VENDORS["wiki"] = Vendor(fail="GET /wiki/rest/api/search: access was refused (403)")
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service  # type: ignore[attr-defined]
        client.portal.call(add, service, "jira", VENDORS["jira"])
        client.portal.call(add, service, "wiki", VENDORS["wiki"])
        wait(lambda: len(client.get("/health").json()["connectors"]["runs"]) == 2)
        health = client.get("/health").json()["connectors"]
        metrics = client.get("/metrics").text
        listed = {s["name"]: s for s in client.get("/v1/knowledge/sources").json()["sources"]}
    assert health["status"] == "failing" and health["failing"] == ["ops/wiki"]
    assert "access was refused (403)" in health["runs"]["ops/wiki"]["summary"]
    assert 'knowledge_connector_failing{collection="ops",kind="fake",source="wiki"} 1.0' in metrics
    assert 'knowledge_connector_failing{collection="ops",kind="fake",source="jira"} 0.0' in metrics
    assert 'knowledge_connector_documents{collection="ops",kind="fake",source="jira"} 1.0' in (
        metrics
    )
    assert "knowledge_connector_last_sync_timestamp_seconds" in metrics
    jira, wiki = listed["jira"], listed["wiki"]
    assert (jira["kind"], jira["last_error"], jira["documents"]) == ("fake", None, 1)
    assert jira["cursor"] and jira["next_run"] and jira["last_prune"]
    assert "access was refused (403)" in wiki["last_error"] and wiki["cursor"] == ""
