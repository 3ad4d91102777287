"""A real Prometheus for the connector's tests: the binary started on a loopback port
with a rules file the test writes (and rewrites, then reloads, between syncs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.imap_server import free_port

PROMETHEUS = shutil.which("prometheus")


@dataclass
class Server:
    url: str
    rules: Path

    def write_rules(self, text: str) -> None:
        """New rules, loaded and evaluated once before this returns."""
        self.rules.write_text(text)
        reload = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        urllib.request.urlopen(reload, timeout=10).close()
        self.evaluated(text)

    def evaluated(self, text: str, timeout_s: float = 30) -> None:
        import yaml

        wanted = {
            str(rule.get("alert") or rule.get("record"))
            for group in yaml.safe_load(text)["groups"]
            for rule in group["rules"]
        }
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            groups = self.get("/api/v1/rules")["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            done = {r["name"] for r in rules if not r["lastEvaluation"].startswith("0001")}
            if done == wanted and {r["name"] for r in rules} == wanted:
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus did not evaluate {sorted(wanted)}")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return json.loads(response.read())


@contextmanager
def prometheus(rules: str) -> Iterator[Server]:
    if PROMETHEUS is None:
        pytest.skip("Prometheus is not installed: apt-get install prometheus")
    root = Path(tempfile.mkdtemp(prefix="prometheus-test-"))
    port = free_port()
    (root / "rules.yml").write_text(rules)
    (root / "prometheus.yml").write_text(
        "global:\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\n"
    )
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={root / 'data'}",
            "--web.enable-lifecycle",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found = Server(f"http://127.0.0.1:{port}", root / "rules.yml")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{found.url}/-/ready", timeout=5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("Prometheus did not start") from None
                time.sleep(0.2)
        found.evaluated(rules)
        yield found
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
