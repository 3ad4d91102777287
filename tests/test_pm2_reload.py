"""Replicas on one port, and `pm2 reload` of two dropping no request
(scripts/pm2_reload_check.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from knowledge_api.cli.serve import Draining, shared_socket, tell_pm2_ready

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "pm2_reload_check.py"
INSTALLED = ROOT / ".venv" / "bin" / "knowledge-api"


@pytest.mark.skipif(
    shutil.which("pm2") is None or shutil.which("node") is None,
    reason="pm2 is not on PATH: npm install -g pm2",
)
@pytest.mark.skipif(not INSTALLED.exists(), reason="PM2 runs .venv/bin/knowledge-api: make install")
def test_a_reload_refuses_no_connection_and_answers_no_5xx() -> None:
    check = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--instances", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = check.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        check.send_signal(signal.SIGINT)  # the script stops its PM2 daemon on the way out
        output, _ = check.communicate(timeout=20)
        pytest.fail(f"the reload check took over 50 s:\n{output}")
    assert check.returncode == 0, output
    assert " 0 refused, " in output and ", 0 other connection errors, 0 5xx " in output
    # a reset only where the kernel does not migrate a closing listener's queue, and
    # at most one per listener closed (the script's exit status says so)


def test_replicas_bind_one_port_and_listen_only_when_started() -> None:
    first = shared_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = shared_socket("127.0.0.1", port)  # no "address in use"
    try:
        with pytest.raises(ConnectionRefusedError):  # bound, not listening yet
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        second.listen()
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        first.close()
        second.close()


def test_ready_is_sent_on_the_pm2_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    monkeypatch.setenv("NODE_CHANNEL_FD", str(write))
    try:
        tell_pm2_ready()
        assert os.read(read, 100) == b'"ready"\n'
    finally:
        os.close(read)
        os.close(write)
    monkeypatch.delenv("NODE_CHANNEL_FD")
    tell_pm2_ready()  # without PM2: nothing to tell


async def test_draining_answers_close_the_connection_and_others_are_the_apps_own() -> None:
    sent: list[dict[str, object]] = []

    async def app(scope: dict[str, object], receive: object, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"1")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request"}

    draining = Draining(app)
    http = {"type": "http"}
    await draining(http, receive, send)
    assert sent[0]["headers"] == [(b"a", b"1")] and sent[1]["body"] == b"ok"
    draining.on = True
    sent.clear()
    await draining(http, receive, send)
    assert sent[0]["headers"] == [(b"a", b"1"), (b"connection", b"close")]
    sent.clear()
    await draining({"type": "lifespan"}, receive, send)  # only HTTP answers say it
    assert sent[0]["headers"] == [(b"a", b"1")]
