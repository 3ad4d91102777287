"""A running Prometheus as a connector source, against the real binary: one document per
rule with its expression, labels, annotations and an alert's current state; rules
changed, added and removed between syncs."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.models import Document
from knowledge_api.usecases import connectors
from tests.cli_env import cli_home, listed_sources, source_documents, sync_source
from tests.conftest import connectors_reported, make_settings, make_store
from tests.prometheus_server import Server, prometheus
from tests.test_access import bearer, error_of, make_key
from tests.test_uploads import wait_for

SOURCES = "/v1/knowledge/sources"
RULES = """groups:
  - name: checkout
    rules:
      - alert: CheckoutLatencyHigh
        expr: vector(1) > 0
        labels:
          severity: page
        annotations:
          summary: Checkout p99 latency is above 2 seconds
          runbook_url: https://runbooks.example.com/checkout-latency
      - alert: CheckoutErrorsHigh
        expr: vector(0) > 1
        for: 5m
        annotations:
          summary: More than 1% of checkouts fail
      - record: job:checkout_requests:rate5m
        expr: vector(3)
"""


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch)


@pytest.fixture
def server() -> object:
    with prometheus(RULES) as found:
        yield found


def stored(tmp_path: Path) -> dict[str, Document]:
    """The documents of the source, by rule name."""
    docs = source_documents(make_settings(tmp_path, db_path=tmp_path / "k.db"), "ops", "alerts")
    return {doc.metadata["name"]: doc for doc in docs.values()}


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "alerts", *more)


def test_the_rules_of_a_running_prometheus_become_documents(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add = ["sources", "add", "alerts", "--kind", "prometheus", "--url", server.url]
    assert main([*add, "--collection", "ops"]) == 0
    assert sync(capsys) == (0, "ops/alerts: 3 added, 0 updated, 0 unchanged, 0 deleted")
    docs = stored(tmp_path)
    assert sorted(docs) == [
        "CheckoutErrorsHigh",
        "CheckoutLatencyHigh",
        "job:checkout_requests:rate5m",
    ]
    latency = docs["CheckoutLatencyHigh"]
    assert latency.source_type == "metrics"
    assert latency.metadata["state"] == "firing"
    assert latency.metadata["url"] == "https://runbooks.example.com/checkout-latency"
    assert latency.metadata["group"] == "checkout" and latency.metadata["rule"] == "alerting"
    assert "vector(1) > 0" in latency.content and "State: firing." in latency.content
    assert "Checkout p99 latency is above 2 seconds" in latency.content
    assert "severity=page" in latency.content
    errors = docs["CheckoutErrorsHigh"]
    assert errors.metadata["state"] == "inactive" and errors.metadata["for"] == "5m"
    assert "state" not in docs["job:checkout_requests:rate5m"].metadata

    assert sync(capsys) == (0, "ops/alerts: 0 added, 0 updated, 3 unchanged, 0 deleted")

    # a rule edited, one removed, one added
    server.write_rules(
        RULES.replace("above 2 seconds", "above 3 seconds").replace(
            "      - record: job:checkout_requests:rate5m\n        expr: vector(3)\n", ""
        )
        + "  - name: payments\n    rules:\n      - alert: PaymentsDown\n"
        "        expr: vector(0) > 1\n"
    )
    assert sync(capsys) == (0, "ops/alerts: 1 added, 1 updated, 1 unchanged, 1 deleted")
    docs = stored(tmp_path)
    assert sorted(docs) == ["CheckoutErrorsHigh", "CheckoutLatencyHigh", "PaymentsDown"]
    assert "above 3 seconds" in docs["CheckoutLatencyHigh"].content
    assert docs["PaymentsDown"].metadata["group"] == "payments"


def test_an_unreachable_server_stops_the_run_and_deletes_nothing(
    server: Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KNOWLEDGE_SYNC_RETRIES", "1")
    url = server.url
    assert main(["sources", "add", "alerts", "--kind", "prometheus", "--url", url,
                 "--collection", "ops"]) == 0  # fmt: skip
    assert sync(capsys)[0] == 0
    gone = "http://127.0.0.1:9"
    assert main(["sources", "add", "gone", "--kind", "prometheus", "--url", gone,
                 "--collection", "ops"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["sources", "sync", "--all"]) == 1
    out = capsys.readouterr().out
    assert "ops/alerts: 0 added, 0 updated, 3 unchanged, 0 deleted" in out
    stop = "ops/gone: sync stopped: GET http://127.0.0.1:9/api/v1/rules: unreachable"
    assert f"{stop} (ConnectError), 2 tries" in out
    assert len(stored(tmp_path)) == 3
    listed = {s["name"]: s for s in listed_sources(capsys)}
    assert "unreachable" in listed["gone"]["last_error"]
    assert listed["alerts"]["last_error"] is None and listed["alerts"]["cursor"]


def test_a_source_is_added_and_synced_over_http(server: Server, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, auth="keys", upload_dir=str(tmp_path / "uploads"))
    tokens = {
        name: asyncio.run(make_key(settings, name, scopes))
        for name, scopes in (("writer", ["read", "write"]), ("admin", ["admin"]))
    }
    body = {"name": "alerts", "kind": "prometheus", "url": server.url, "collection": "ops"}
    with TestClient(create_app(settings)) as client:
        writer, admin = bearer(tokens["writer"]), bearer(tokens["admin"])
        assert client.post(SOURCES, json=body, headers=writer).status_code == 403
        wrong = client.post(SOURCES, json={**body, "kind": "gopher"}, headers=admin)
        assert error_of(wrong, 400)["details"]["field"] == "kind"
        secret = {**body, "secrets": {"token": "s3cr3t value"}}
        refused = error_of(client.post(SOURCES, json=secret, headers=admin), 400)
        assert refused["details"]["field"] == "secrets.token"
        created = client.post(SOURCES, json=body, headers=admin)
        assert created.status_code == 201, created.text
        assert created.json()["kind"] == "prometheus" and created.json()["cursor"] == ""
        assert client.post(SOURCES, json=body, headers=admin).status_code == 409

        assert client.post(f"{SOURCES}/nothing/sync", headers=writer).status_code == 404
        accepted = client.post(f"{SOURCES}/alerts/sync", headers=writer)
        assert accepted.status_code == 202, accepted.text
        done = wait_for(client, accepted.json()["job_id"], headers=writer)
        assert done["status"] == "done" and done["source"] == "alerts", done
        listed = client.get(SOURCES, params={"collection": "ops"}, headers=admin).json()
        (alerts,) = listed["sources"]
        assert alerts["documents"] == 3 and alerts["last_error"] is None and alerts["cursor"]
        # added without an acl: closed, so to a key that is not admin the collection
        # holds nothing it may read
        closed = client.get(SOURCES, params={"collection": "ops"}, headers=writer)
        assert error_of(closed, 404)["type"] == "collection_not_found"


def test_the_service_syncs_each_source_on_its_schedule(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connectors, "TICK", 0.1)
    add = ["sources", "add", "--kind", "prometheus", "--url", server.url, "--collection", "ops"]
    assert main([add[0], add[1], "alerts", *add[2:]]) == 0  # never synced: due at start
    assert main([add[0], add[1], "paused", *add[2:], "--set", "every=0"]) == 0
    assert main([add[0], add[1], "later", *add[2:], "--set", "every=1h30m"]) == 0
    assert main([add[0], add[1], "bad", *add[2:], "--set", "every=soon"]) == 2
    settings = make_settings(tmp_path, db_path=tmp_path / "k.db", sync_interval=900.0)
    with TestClient(create_app(settings)) as client:
        report = connectors_reported(client, lambda report: len(report["runs"]) >= 2)
        assert report["status"] == "ok" and report["failing"] == []
        assert sorted(report["runs"]) == ["ops/alerts", "ops/later"]
        listed = client.get(SOURCES, params={"collection": "ops"}).json()["sources"]
        shown = {source["name"]: source for source in listed}
    assert shown["alerts"]["documents"] == 3 and shown["paused"]["documents"] == 0
    assert shown["paused"]["next_run"] is None
    after = {name: datetime.fromisoformat(shown[name]["last_run"]) for name in ("alerts", "later")}
    assert datetime.fromisoformat(shown["alerts"]["next_run"]) == after["alerts"] + timedelta(
        seconds=900
    )
    assert datetime.fromisoformat(shown["later"]["next_run"]) == after["later"] + timedelta(
        hours=1, minutes=30
    )


def test_no_schedule_syncs_nothing(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connectors, "TICK", 0.1)
    add = ["sources", "add", "alerts", "--kind", "prometheus", "--url", server.url]
    assert main(add) == 0
    settings = make_settings(tmp_path, db_path=tmp_path / "k.db", sync_interval=0.0)
    with TestClient(create_app(settings)) as client:
        connectors_reported(client, lambda report: report["checked_at"])
        assert client.get("/health").json()["connectors"]["runs"] == {}
        (alerts,) = client.get(SOURCES).json()["sources"]
    assert alerts["documents"] == 0 and alerts["next_run"] is None


def test_a_source_another_process_syncs_is_left_to_it(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add = ["sources", "add", "alerts", "--kind", "prometheus", "--url", server.url]
    assert main([*add, "--collection", "ops"]) == 0

    async def lease(holder: str, seconds: float) -> bool:
        store = make_store("sqlite", make_settings(tmp_path, db_path=tmp_path / "k.db"))
        await store.open()
        try:
            return await store.lease_source("ops", "alerts", holder, seconds)
        finally:
            await store.close()

    assert asyncio.run(lease("replica-2", 300))
    status, line = sync(capsys)
    assert status == 1 and "another process is syncing this source now" in line
    assert stored(tmp_path) == {}
    assert asyncio.run(lease("replica-2", 0))
    assert sync(capsys) == (0, "ops/alerts: 3 added, 0 updated, 0 unchanged, 0 deleted")
    assert asyncio.run(lease("replica-2", 300))  # the run let its lease go
