"""KB sync against a real host API on a loopback port: pagination, incremental and
full syncs, failures that leave the index serving, and /health saying since when."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.config.fields import Secret
from knowledge_api.connectors.kb import Article, HostUnavailable
from knowledge_api.models import Document, KBHost, SearchFilters
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores.base import SearchRequest
from knowledge_api.usecases.kb_sync import KBSync
from knowledge_api.usecases.sources import MassDeleteRefused
from tests.cli_env import cli_home
from tests.conftest import fake_embedder, make_settings
from tests.kb_host import Host, article, closed_port_url, serve

ARTICLES = [
    article(
        "kb-001",
        "Apollo Not Hashing Troubleshooting",
        "If your Apollo shows 0 H/s, first check that your pool configuration is correct.",
        ["not_hashing", "performance_issue"],
        ["Apollo", "Apollo II", "Apollo III"],
        "2024-12-15T10:00:00Z",
    ),
    article(
        "kb-002",
        "Apollo II Hashrate Issues",
        "Apollo II devices may show 0 H/s if the Bitcoin node is not fully synced.",
        ["not_hashing"],
        ["Apollo II"],
        "2024-11-20T14:30:00Z",
    ),
    article(
        "kb-003",
        "Updating the firmware",
        "Open the dashboard, choose Update and upload the firmware image.",
        ["firmware_update"],
        ["Apollo", "Apollo II"],
        "2024-10-01T09:00:00Z",
    ),
    article(
        "kb-004",
        "Returns and warranty",
        "Devices can be returned within 30 days of delivery.",
        ["refund"],
        [],
        "2024-09-01T09:00:00Z",
    ),
    article(
        "kb-005",
        "Wi-Fi setup",
        "Connect the miner to Wi-Fi from the Network page of the dashboard.",
        ["connectivity"],
        ["Apollo"],
        "2024-08-01T09:00:00Z",
    ),
]


@pytest.fixture
def host() -> Iterator[Host]:
    with serve(Host(articles=[dict(a) for a in ARTICLES])) as running:
        yield running


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, sync_retries=0)  # a failing host fails at once


def syncer(service: KnowledgeService, url: str, page_size: int = 2) -> KBSync:
    return KBSync(service, KBHost(url, page_size=page_size, timeout=5.0), "support")


async def synced_ids(service: KnowledgeService) -> dict[str, dict[str, Any]]:
    return {d.source_id: d.metadata async for d in service.store.iter_documents("support")}


async def test_full_sync_follows_pages_and_keeps_the_metadata(
    service: KnowledgeService, host: Host
) -> None:
    report = await syncer(service, host.url).run(full=True)
    assert (report.fetched, report.indexed, report.removed) == (5, 5, 0)
    assert [r.get("offset") for r in host.requests] == ["0", "2", "4"]
    assert all(r["limit"] == "2" and "updated_since" not in r for r in host.requests)
    stored = await synced_ids(service)
    assert sorted(stored) == ["kb-001", "kb-002", "kb-003", "kb-004", "kb-005"]
    assert stored["kb-001"] == {
        "url": "https://docs.example.com/kb-001",
        "intent": ["not_hashing", "performance_issue"],
        "device": ["Apollo", "Apollo II", "Apollo III"],
        "last_updated": "2024-12-15T10:00:00Z",
        "author": "Support Team",
        "kb_host": host.url,
    }
    hits = await service.store.search(
        SearchRequest("firmware image", None, 3, SearchFilters(collection="support"))
    )
    assert hits[0].source_id == "kb-003"
    assert (
        await service.store.search(SearchRequest("firmware image", None, 3, SearchFilters())) == []
    )


async def test_incremental_sync_asks_since_the_newest_and_embeds_only_changes(
    service: KnowledgeService, host: Host
) -> None:
    sync = syncer(service, host.url)
    await sync.run(full=True)
    host.requests.clear()
    quiet = await sync.run()
    assert host.requests[0]["updated_since"] == "2024-12-15T10:00:00Z"
    assert (quiet.fetched, quiet.indexed, quiet.embedded) == (0, 0, 0)

    host.articles[2] = article(
        "kb-003",
        "Updating the firmware",
        "Firmware 2.0 updates itself overnight; no upload is needed any more.",
        ["firmware_update"],
        ["Apollo", "Apollo II"],
        "2025-01-10T08:00:00Z",
    )
    host.articles.append(
        article(
            "kb-006",
            "Fan noise",
            "A loud fan means a hot room.",
            ["noise"],
            ["Apollo"],
            "2025-01-11T08:00:00Z",
        )
    )
    before = fake_embedder(service).texts_embedded
    changed = await sync.run()
    assert (changed.fetched, changed.indexed, changed.unchanged) == (2, 2, 0)
    assert fake_embedder(service).texts_embedded - before == 2  # one passage each
    hits = await service.store.search(
        SearchRequest("overnight", None, 3, SearchFilters(collection="support"))
    )
    assert [h.source_id for h in hits] == ["kb-003"]
    assert host.requests[-1]["updated_since"] == "2024-12-15T10:00:00Z"


async def test_only_a_full_sync_removes_articles_gone_from_the_host(
    service: KnowledgeService, host: Host
) -> None:
    sync = syncer(service, host.url)
    await sync.run(full=True)
    other = Document("wiki", "handbook", "Handbook page.", "Handbook", collection="support")
    await service.ingest([other])
    del host.articles[1]
    assert (await sync.run()).removed == 0
    assert "kb-002" in await synced_ids(service)
    report = await sync.run(full=True)
    assert report.removed == 1
    remaining = await synced_ids(service)
    assert "kb-002" not in remaining and "handbook" in remaining  # not synced: not removed


async def test_a_full_sync_removing_most_articles_stops_unless_allowed(
    service: KnowledgeService, host: Host
) -> None:
    sync = syncer(service, host.url)
    await sync.run(full=True)
    assert [(s.name, s.documents) for s in await service.store.sources("support")] == [
        (host.url, 5)
    ]
    del host.articles[:3]  # 3 of 5 gone: more than KNOWLEDGE_PRUNE_MAX_FRACTION (0.5)
    with pytest.raises(MassDeleteRefused, match="would lose 3 of its 5 documents"):
        await sync.run(full=True)
    assert len(await synced_ids(service)) == 5
    assert sync.state.health()["status"] == "stale"  # the periodic sync says so in /health
    report = await sync.run(full=True, allow_mass_delete=True)
    assert report.removed == 3 and len(await synced_ids(service)) == 2


@pytest.mark.parametrize("status", [500, 503])
async def test_a_failing_host_changes_nothing_and_says_so(
    service: KnowledgeService, host: Host, status: int
) -> None:
    sync = syncer(service, host.url)
    await sync.run(full=True)
    host.fail_status = status
    with pytest.raises(HostUnavailable, match=f"answered {status}: Knowledge base unavailable"):
        await sync.run(full=True)
    assert len(await synced_ids(service)) == 5
    health = sync.state.health()
    assert health["status"] == "stale"
    assert health["stale_since"] == sync.state.last_success != ""
    assert "Knowledge base unavailable" in health["error"]
    host.fail_status = 0
    await sync.run()
    assert sync.state.health()["status"] == "ok" and "error" not in sync.state.health()


async def test_an_unreachable_host_is_reported(service: KnowledgeService) -> None:
    sync = syncer(service, closed_port_url())
    with pytest.raises(HostUnavailable, match="unreachable"):
        await sync.run()
    assert sync.state.health()["stale_since"] == "never synced"


async def test_malformed_articles_are_skipped_and_named(
    service: KnowledgeService, host: Host
) -> None:
    broken = article("kb-009", "No date", "Text.", ["x"], [])
    del broken["metadata"]["last_updated"]
    host.articles.append(broken)
    host.articles.append({"id": "kb-010", "title": "Empty", "content": "  "})
    report = await syncer(service, host.url, page_size=100).run(full=True)
    assert report.indexed == 5
    assert report.invalid == (
        "kb-009: metadata.last_updated is missing",
        "kb-010: content is missing",
    )
    assert "2 invalid skipped" in report.line()


async def test_a_host_that_ignores_offset_cannot_loop_forever(
    service: KnowledgeService, host: Host
) -> None:
    host.ignore_offset = True
    with pytest.raises(HostUnavailable, match="ignores `offset`"):
        await syncer(service, host.url).run(full=True)
    assert await synced_ids(service) == {}


def test_article_timestamps_become_utc_iso_8601() -> None:
    raw = article("a", "T", "C", ["i"], ["d"], "2024-12-15T12:00:00+02:00")
    assert Article.parse(raw).last_updated == "2024-12-15T10:00:00Z"
    raw["metadata"]["last_updated"] = "2024-01-14"
    assert Article.parse(raw).last_updated == "2024-01-14T00:00:00Z"
    raw["metadata"]["last_updated"] = "yesterday"
    with pytest.raises(ValueError, match="not ISO 8601"):
        Article.parse(raw)


def test_sync_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], host: Host
) -> None:
    cli_home(tmp_path, monkeypatch)
    monkeypatch.setenv("KNOWLEDGE_KB_SYNC_TOKEN", "host-token-123")
    monkeypatch.setenv("KNOWLEDGE_SYNC_RETRIES", "0")
    assert main(["sync", "--from", host.url, "--full"]) == 0
    assert capsys.readouterr().out.startswith("full sync: 5 articles fetched, 5 indexed")
    assert set(host.authorization) == {"Bearer host-token-123"}
    assert main(["sync", "--from", host.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("incremental sync since 2024-12-15T10:00:00Z: 0 articles fetched")
    host.fail_status = 500
    assert main(["sync", "--from", host.url]) == 1
    out = capsys.readouterr().out
    assert "answered 500: Knowledge base unavailable" in out and "keeps its 5 articles" in out
    assert "host-token-123" not in out


def wait_for(client: TestClient, predicate: Any) -> dict[str, Any]:
    """The /health body once `predicate` holds (bounded: the sync runs in the background)."""
    for _ in range(500):
        body: dict[str, Any] = client.get("/health").json()
        if predicate(body):
            return body
        time.sleep(0.02)
    raise AssertionError(f"never reached: {body}")


def test_the_service_syncs_periodically_and_health_says_since_when_it_is_stale(
    tmp_path: Path, host: Host
) -> None:
    settings = make_settings(
        tmp_path,
        kb_sync_url=host.url,
        kb_sync_interval=0.05,
        kb_sync_token=Secret("s3cret"),
        sync_retries=0,  # a failing host is stale at its first failure
    )
    with TestClient(create_app(settings)) as client:
        ok = wait_for(client, lambda b: b.get("kb_sync", {}).get("status") == "ok")
        assert ok["status"] == "healthy" and ok["store"]["documents"] == 5
        host.fail_status = 500
        stale = wait_for(client, lambda b: b["kb_sync"]["status"] == "stale")
        assert stale["status"] == "degraded"
        # since the last success: the one /health showed, or a later one (the sync runs
        # every 0.05 s, and may have worked again before the host began failing)
        since = stale["kb_sync"]["stale_since"]
        assert since == stale["kb_sync"]["last_success"] >= ok["kb_sync"]["last_success"]
        assert stale["kb_sync"]["failing_since"] >= stale["kb_sync"]["stale_since"]
        assert "s3cret" not in client.get("/health").text
        body = client.post(
            "/v1/knowledge/retrieve", json={"query": "firmware upload", "collection": "support"}
        ).json()
        assert body["retrieved_chunks"][0]["source_url"] == "https://docs.example.com/kb-003"
        host.fail_status = 0
        wait_for(client, lambda b: b["kb_sync"]["status"] == "ok")


def test_no_sync_url_means_no_sync_line(client: TestClient) -> None:
    assert "kb_sync" not in client.get("/health").json()


async def test_the_token_is_not_sent_to_another_host_a_redirect_names(
    service: KnowledgeService, host: Host
) -> None:
    """The sync drops Authorization when a redirect leaves the configured origin (and
    keeps it within that origin)."""
    with serve(Host(redirect_to=host.url)) as moved:
        host_moved = KBHost(moved.url, "host-token-123", page_size=10, timeout=5.0)
        report = await KBSync(service, host_moved, "support").run(full=True)
    assert report.fetched == 5
    assert set(moved.authorization) == {"Bearer host-token-123"}
    assert set(host.authorization) == {""}  # the other origin never saw the token
