"""Does `pm2 reload` drop requests? Starts the service under PM2 (ecosystem.config.cjs,
only its log files moved) with 2 instances on a free port, in a PM2 home of its own,
sends requests in a loop, each on a new connection, while `pm2 reload knowledge-api`
runs, and reports refused connections, other connection errors and 5xx answers.

    .venv/bin/python scripts/pm2_reload_check.py [--instances 2] [--reloads 1] [--parallel N]

Exit status 0 when every request was answered without a 5xx. The fake embedder and a
temporary SQLite file keep the start to about a second.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = "knowledge-api"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ecosystem(workdir: Path, env: dict[str, str]) -> Path:
    """The project's PM2 config, read in `env`, with its log files in `workdir`."""
    script = "console.log(JSON.stringify(require(process.argv[1])))"
    config = json.loads(
        subprocess.run(
            ["node", "-e", script, str(ROOT / "ecosystem.config.cjs")],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
    )
    app = config["apps"][0]
    app.update(
        script=str(ROOT / app["script"]),
        out_file=str(workdir / "out.log"),
        error_file=str(workdir / "err.log"),
    )
    path = workdir / "ecosystem.json"
    path.write_text(json.dumps(config))
    return path


def environment(workdir: Path, port: int, instances: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_")}
    env.update(
        PM2_HOME=str(workdir / "pm2"),
        KNOWLEDGE_API_HOST="127.0.0.1",
        KNOWLEDGE_API_PORT=str(port),
        KNOWLEDGE_API_INSTANCES=str(instances),
        KNOWLEDGE_EMBEDDER="fake",
        KNOWLEDGE_SYNTHESIZER="extractive",
        KNOWLEDGE_DB_PATH=str(workdir / "knowledge.db"),
        KNOWLEDGE_SEED_ON_EMPTY="false",
    )
    return env


def pm2(env: dict[str, str], *args: str, timeout: float = 60) -> None:
    subprocess.run(["pm2", *args], env=env, check=True, capture_output=True, timeout=timeout)


def wait_until_up(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if request(port) == "200":
            return
        time.sleep(0.1)
    raise SystemExit(f"the service did not answer on port {port} within {seconds:g} s")


def log_tail(workdir: Path) -> str:
    return "".join(
        f"--- {name}\n" + "".join((workdir / name).read_text().splitlines(True)[-20:])
        for name in ("out.log", "err.log")
        if (workdir / name).exists()
    )


def request(port: int) -> str:
    """One request on a new connection: its status, or what went wrong."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/readyz")
        return str(connection.getresponse().status)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, http.client.HTTPException) as e:
        return f"error: {type(e).__name__}"
    finally:
        connection.close()


class Load(threading.Thread):
    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.outcomes: Counter[str] = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.outcomes[request(self.port)] += 1


def check(instances: int, reloads: int, parallel: int | None) -> Counter[str]:
    if not (ROOT / ".venv" / "bin" / "knowledge-api").exists():
        raise SystemExit("run `make install` first: PM2 starts .venv/bin/knowledge-api")
    with tempfile.TemporaryDirectory(prefix="pm2-reload-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        env = environment(workdir, port, instances)
        config = ecosystem(workdir, env)
        try:
            pm2(env, "start", str(config))
            try:
                wait_until_up(port, 30)
            except SystemExit as e:
                raise SystemExit(f"{e}\n{log_tail(workdir)}") from None
            load = Load(port)
            load.start()
            time.sleep(0.5)
            for _ in range(reloads):
                pm2(env, "reload", APP, *(["--parallel", str(parallel)] if parallel else []))
            time.sleep(0.5)
            load.stopping.set()
            load.join()
            return load.outcomes
        finally:
            subprocess.run(["pm2", "kill"], env=env, capture_output=True, timeout=30)


MIGRATE_REQ = Path("/proc/sys/net/ipv4/tcp_migrate_req")


def kernel_migrates() -> bool:
    """Whether Linux hands the connections queued on a closing listener to another
    listener of its SO_REUSEPORT group (`net.ipv4.tcp_migrate_req = 1`). Without it, a
    connection that reaches a stopping process's listener in the microseconds between
    its last accept and its close is reset: at most about one per listener closed."""
    try:
        return MIGRATE_REQ.read_text().strip() == "1"
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--reloads", type=int, default=1)
    parser.add_argument(
        "--parallel", type=int, help="processes PM2 replaces at once (PM2's default: 1 of 2)"
    )
    args = parser.parse_args()
    outcomes = check(args.instances, args.reloads, args.parallel)
    refused = outcomes["refused"]
    resets = outcomes["error: ConnectionResetError"]
    errors = sum(n for outcome, n in outcomes.items() if outcome.startswith("error")) - resets
    server_errors = sum(n for outcome, n in outcomes.items() if outcome.startswith("5"))
    migrates = kernel_migrates()
    tolerated = 0 if migrates else args.instances * args.reloads
    print(
        f"{sum(outcomes.values())} requests during {args.reloads} reload(s) of "
        f"{args.instances} instances: {refused} refused, {resets} reset, {errors} other "
        f"connection errors, {server_errors} 5xx ({dict(outcomes)}); "
        f"tcp_migrate_req={int(migrates)}, so {tolerated} reset(s) tolerated"
    )
    return 0 if refused == errors == server_errors == 0 and resets <= tolerated else 1


if __name__ == "__main__":
    sys.exit(main())
