"""Tables kept in the Postgres schema beside the postgres and supabase stores' own data,
read and written through the store's primitives (a direct connection for postgres,
PostgREST for supabase): the store's migrations made them, so there is nothing to
open or close."""

from __future__ import annotations

from typing import Any


class SchemaTables:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def open(self) -> None:
        return None  # the store's migrations made the table

    async def close(self) -> None:
        return None
