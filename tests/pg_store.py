"""The fixtures a test module of the Postgres or Supabase store stands on: `settings`
(a fresh database of the session's server), `store` (that store, open) and `db` (a
direct connection to its database, to look behind the store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from knowledge_api.settings import Settings
from knowledge_api.stores.postgres.codecs import register_codecs
from tests.conftest import make_store
from tests.pg import postgres_settings, supabase_settings

SETTINGS: dict[str, Callable[[pytest.FixtureRequest, Path], Settings]] = {
    "postgres": postgres_settings,
    "supabase": supabase_settings,
}


def store_fixtures(backend: str) -> tuple[Any, Any, Any]:
    """`settings`, `store` and `db` of the `backend` store ("postgres" or "supabase"),
    to assign in the test module under those names."""

    @pytest.fixture(name="settings")
    def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
        return SETTINGS[backend](request, tmp_path)

    @pytest.fixture(name="store")
    async def store(settings: Settings) -> AsyncIterator[Any]:
        opened = make_store(backend, settings)
        await opened.open()
        yield opened
        await opened.close()

    @pytest.fixture(name="db")
    async def db(store: Any, settings: Settings) -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(settings.database_url.get())
        await register_codecs(conn)
        yield conn
        await conn.close()

    return settings, store, db
