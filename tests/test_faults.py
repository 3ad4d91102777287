"""Faults injected into a running service: it degrades visibly, answers 503 instead of
freezing, and never acknowledges a write it then loses."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from tests.cli_env import serve_process
from tests.conftest import make_settings

pytestmark = pytest.mark.fault
DOCUMENTS = "/v1/knowledge/documents"


def document(n: int) -> dict[str, Any]:
    return {"source_type": "wiki", "source_id": f"page-{n}", "content": f"Page {n} text."}


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the database's write lock (BEGIN IMMEDIATE)."""
    code = (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        f"time.sleep({seconds})\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_a_lock_held_by_another_process_blocks_neither_reads_nor_health(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post(DOCUMENTS, json=document(0)).status_code == 201
        ask = {"query": "page text", "synthesize": False}
        assert client.post("/v1/knowledge/query", json=ask).status_code == 200
        holder = hold_lock(settings.db_path, 30)
        try:
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.post, DOCUMENTS, json=document(1))
                health = client.get("/health")  # answered while the write waits
                cached = client.post("/v1/knowledge/query", json=ask)
                assert not waiting.done()
                assert health.status_code == 200 and cached.json()["metrics"]["cache_hit"]
                refused = waiting.result(timeout=30)
            assert refused.status_code == 503
            assert "locked" in refused.json()["error"]["message"]
            degraded = client.get("/health").json()
            assert degraded["status"] == "degraded"
            assert "writes are failing" in degraded["store"]["error"]
        finally:
            holder.kill()
            holder.wait()
            assert holder.stdout is not None
            holder.stdout.close()
        assert client.post(DOCUMENTS, json=document(1)).status_code == 201
        assert client.get("/health").json()["status"] == "healthy"


def test_a_removed_database_file_refuses_writes_and_says_so(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post(DOCUMENTS, json=document(0)).status_code == 201
        for suffix in ("", "-wal", "-shm"):
            Path(f"{settings.db_path}{suffix}").unlink(missing_ok=True)
        refused = client.post(DOCUMENTS, json=document(1))
        health = client.get("/health")
    assert refused.status_code == 503
    assert "removed or replaced" in refused.json()["error"]["message"]
    assert health.status_code == 503 and health.json()["store"]["status"] == "unavailable"
    assert "removed or replaced" in health.json()["store"]["error"]


def test_a_full_disk_is_named_as_such_not_as_a_lock(tmp_path: Path) -> None:
    """It said "(another process holds a lock?)". SQLite answers a database at its
    max_page_count as it answers a full disk: SQLITE_FULL."""
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post(DOCUMENTS, json=document(0)).status_code == 201
        writer = client.app.state.service.store.file._writer_db()  # type: ignore[attr-defined]
        pages = writer.execute("PRAGMA page_count").fetchone()[0]
        writer.execute(f"PRAGMA max_page_count = {pages}")
        big = {**document(1), "content": "A long page. " * 4000}
        refused = client.post(DOCUMENTS, json=big)
        health = client.get("/health").json()
        writer.execute("PRAGMA max_page_count = 1073741823")
        assert client.post(DOCUMENTS, json=big).status_code == 201
        recovered = client.get("/health").json()
    assert refused.status_code == 503
    for message in (refused.json()["error"]["message"], health["store"]["error"]):
        assert "the disk is full" in message and "SQLITE_FULL" in message, message
        assert "lock" not in message
    assert health["status"] == "degraded" and recovered["status"] == "healthy"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(tmp_path: Path, port: int, **settings: str) -> subprocess.Popen[str]:
    more = {"KNOWLEDGE_SEED_ON_EMPTY": "false", "KNOWLEDGE_SYNTHESIZER": "extractive"}
    server = serve_process(tmp_path, port, **{**more, **settings})
    deadline = time.monotonic() + 60  # a guard against hanging: a loaded start is slow
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.05)
    server.kill()
    raise AssertionError("the service did not start")


def test_kill_9_during_concurrent_writes_loses_no_acknowledged_write(tmp_path: Path) -> None:
    port = free_port()
    server = serve(tmp_path, port)
    acknowledged: list[int] = []
    lock = threading.Lock()

    def writer(start: int) -> None:
        for n in range(start, start + 10_000, 4):
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}{DOCUMENTS}", json=document(n), timeout=5
                )
            except httpx.TimeoutException:
                continue  # a slow host: this write is not acknowledged, the next may be
            except httpx.HTTPError:
                return  # the server is gone
            if response.status_code == 201:
                with lock:
                    acknowledged.append(n)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while len(acknowledged) < 40:
        assert time.monotonic() < deadline, f"only {len(acknowledged)} writes acknowledged"
        time.sleep(0.01)
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    for thread in threads:
        thread.join(timeout=30)
    restarted = serve(tmp_path, port)
    try:
        stored = httpx.get(f"http://127.0.0.1:{port}/health").json()["store"]["documents"]
        for n in acknowledged:
            found = httpx.get(f"http://127.0.0.1:{port}/v1/knowledge/detail/wiki/page-{n}")
            assert found.status_code == 200, n
    finally:
        restarted.terminate()
        restarted.wait(timeout=10)
    assert stored >= len(acknowledged) >= 40


def read_to_end(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes (headers and body may come apart)."""
    received = b""
    while part := connection.recv(4096):
        received += part
    return received


def test_a_body_that_stops_arriving_is_a_408_and_frees_the_connection(tmp_path: Path) -> None:
    """2,000 clients holding half a body once kept their connections 70 s each."""
    port = free_port()
    server = serve(tmp_path, port, KNOWLEDGE_BODY_TIMEOUT="0.5")
    try:
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(
                b"POST /v1/knowledge/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                b'{"query": "half'
            )
            slow.settimeout(10)
            answer = read_to_end(slow).decode()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert answer.startswith("HTTP/1.1 408")
    assert '"type":"request_timeout"' in answer


def test_kill_9_during_an_ingest_leaves_whole_documents_and_a_rerun_finishes(
    tmp_path: Path,
) -> None:
    """Each document is written in one transaction: after kill -9 the file is sound,
    every stored document has all its chunks, and running the ingest again completes."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(400):
        sections = "\n\n".join(f"## Part {p}\n\n" + f"Sentence {n}.{p}. " * 40 for p in range(4))
        (folder / f"page-{n}.md").write_text(f"# Page {n}\n\n{sections}")
    env = {
        **os.environ,
        "KNOWLEDGE_EMBEDDER": "fake",
        "KNOWLEDGE_DB_PATH": str(tmp_path / "k.db"),
    }
    command = [sys.executable, "-m", "knowledge_api", "ingest", str(folder)]
    run = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL)
    database = tmp_path / "k.db"
    stored = 0
    deadline = time.monotonic() + 60  # a guard against hanging: a loaded start is slow
    while time.monotonic() < deadline:
        if database.exists():
            with sqlite3.connect(database) as probe:
                try:
                    stored = probe.execute("SELECT count(*) FROM documents").fetchone()[0]
                except sqlite3.OperationalError:
                    stored = 0
        if stored >= 20 or run.poll() is not None:
            break
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL and 20 <= stored < 400  # killed mid-run
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        partial = db.execute(
            """SELECT d.id FROM documents d LEFT JOIN chunks c ON c.document_id = d.id
               GROUP BY d.id HAVING count(c.id) = 0 OR count(c.id) != max(c.chunk_count)"""
        ).fetchall()
        assert partial == []
    again = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT count(*) FROM documents").fetchone()[0] == 400
