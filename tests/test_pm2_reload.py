"""Replicas on one port, and `pm2 reload` of two dropping no request
(scripts/pm2_reload_check.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge_api.cli import shared_socket, tell_pm2_ready

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pm2_reload_check.py"


@pytest.mark.skipif(
    shutil.which("pm2") is None or shutil.which("node") is None,
    reason="pm2 is not on PATH: npm install -g pm2",
)
def test_a_reload_refuses_no_connection_and_answers_no_5xx() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--instances", "2"],
        capture_output=True,
        text=True,
        timeout=55,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 refused, 0 other connection errors, 0 5xx " in result.stdout


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
