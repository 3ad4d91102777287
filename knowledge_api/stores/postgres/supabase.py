"""The `supabase` store: the production schema through supabase-py (PostgREST).

Search and writes are RPCs of the SQL functions `knowledge-api migrate` installs (the
same ones the `postgres` store calls); documents are read and deleted through the
table API. Transient failures (5xx, 429, timeouts, network errors) are retried with
exponential backoff; then, like a refused key or a missing schema, they surface as a
503 naming the cause. The service role key is sent as a header and never shown:
not in reprs, logs, /health or error messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from knowledge_api.config.fields import Secret
from knowledge_api.errors import BackendConnectionError, ConfigurationError, KnowledgeStoreError
from knowledge_api.registry import import_extra
from knowledge_api.stores.fusion import DEFAULT_TUNING, SearchTuning
from knowledge_api.stores.postgres.replicas import Reading
from knowledge_api.stores.postgres.rows import (
    Condition,
    FunctionCall,
    Row,
    Selection,
    vector_literal,
)
from knowledge_api.stores.postgres.siam import SiamStore

try:
    import httpx
except ImportError as e:  # httpx comes with supabase-py
    raise ConfigurationError(
        "KNOWLEDGE_STORE=supabase needs supabase-py: pip install 'knowledge-api[supabase]'"
    ) from e

FILTERS = {"eq": "eq", "in": "in_", "gt": "gt", "ilike": "ilike"}


class Unavailable(Exception):
    """A transient HTTP answer (5xx, 429): worth another attempt."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")


class SupabaseStore(SiamStore):
    name = "supabase"

    def __init__(
        self,
        url: str,
        key: Secret,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        tuning: SearchTuning = DEFAULT_TUNING,
        ef_search: int = 100,
    ) -> None:
        super().__init__(tuning, ef_search)
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._client: Any = None
        self._http: httpx.AsyncClient | None = None

    settings_fields = (
        "supabase_url supabase_service_role_key supabase_timeout supabase_retries supabase_backoff"
    )

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        if settings.database_read_urls:
            raise ConfigurationError(
                "KNOWLEDGE_DATABASE_READ_URLS needs KNOWLEDGE_STORE=postgres: the supabase "
                "store reads through its project's REST API; serve a Supabase project with "
                "read replicas with the postgres store, its database's connection string in "
                "KNOWLEDGE_DATABASE_URL and its replicas' in KNOWLEDGE_DATABASE_READ_URLS"
            )
        return super().configured(settings, *context)

    def __repr__(self) -> str:
        return f"SupabaseStore({self.url!r})"

    def location(self) -> dict[str, Any]:
        return {"url": self.url}

    # -- client -----------------------------------------------------------------------

    async def open(self) -> None:
        supabase = import_extra("supabase", "supabase")
        if not self.url or not self.key:
            raise BackendConnectionError(
                "KNOWLEDGE_STORE=supabase needs SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY",
                backend=self.name,
            )
        http = httpx.AsyncClient(timeout=self.timeout, event_hooks={"response": [check_status]})
        options = supabase.AsyncClientOptions(
            httpx_client=http,
            postgrest_client_retry=False,  # retried here, with backoff, for every method
            auto_refresh_token=False,
            persist_session=False,
        )
        try:
            self._client = await supabase.acreate_client(self.url, self.key.get(), options)
        except supabase.SupabaseException as e:
            await http.aclose()
            raise BackendConnectionError(
                f"SUPABASE_URL {self.url!r} is not usable: {e.message}", backend=self.name
            ) from e
        self._http = http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        self._client = self._http = None

    async def _rest(self) -> Any:
        if self._client is None:
            await self.open()
        return self._client

    async def _send(self, build: Callable[[Any], Any], error: type[KnowledgeStoreError]) -> Any:
        """The data of a PostgREST request; transient failures are retried with backoff."""
        postgrest = import_extra("postgrest", "supabase")
        client = await self._rest()
        attempt = 0
        while True:
            try:
                return (await build(client).execute()).data
            except postgrest.APIError as e:
                raise error(
                    f"Supabase refused the request: {e.message} (code {e.code})",
                    backend=self.name,
                ) from e
            except (Unavailable, httpx.TransportError) as e:
                if attempt == self.retries:
                    raise BackendConnectionError(
                        f"Supabase at {self.url} is unavailable after {attempt + 1} "
                        f"attempts: {self.describe(e)}",
                        backend=self.name,
                    ) from e
            await asyncio.sleep(self.backoff * 2**attempt)
            attempt += 1

    def describe(self, error: Exception) -> str:
        if isinstance(error, httpx.TimeoutException):
            return f"no answer within {self.timeout:g}s"
        if isinstance(error, httpx.TransportError):
            return f"{type(error).__name__}: {error}"
        return str(error)

    # -- the primitives SiamStore builds on ---------------------------------------------

    async def run_function(self, call: FunctionCall, on: Reading | None) -> list[Row]:
        body = {
            name: vector_literal(value) if isinstance(value, np.ndarray) else value
            for name, value in call.params.items()
        }
        rpc = call.function
        rows: list[Row] = await self._send(lambda client: client.rpc(rpc, body), call.error)
        return rows

    async def read_rows(self, selection: Selection, on: Reading | None) -> list[Row]:
        def build(client: Any) -> Any:
            query = client.table(selection.table).select(selection.columns)
            query = filtered(query, selection.conditions)
            if selection.order:
                query = query.order(selection.order)
            if selection.limit:
                query = query.limit(selection.limit)
            return query

        rows: list[Row] = await self._send(build, KnowledgeStoreError)
        return rows

    async def delete_rows(self, table: str, *conditions: Condition) -> int:
        deleted = await self._send(
            lambda client: filtered(client.table(table).delete(), conditions), KnowledgeStoreError
        )
        return len(deleted)


def filtered(query: Any, conditions: tuple[Condition, ...]) -> Any:
    for column, op, value in conditions:
        query = getattr(query, FILTERS[op])(column, value)
    return query


async def check_status(response: httpx.Response) -> None:
    """Turn the answers no retry can fix into clear errors, and flag the transient ones."""
    status = response.status_code
    if status < 400:
        return
    await response.aread()
    detail = error_detail(response)
    if status in (401, 403):
        raise BackendConnectionError(
            f"Supabase refused the service role key (HTTP {status}: {detail}); "
            "check SUPABASE_SERVICE_ROLE_KEY",
            backend="supabase",
        )
    if status == 404:
        raise BackendConnectionError(
            f"the Supabase project lacks the knowledge schema (HTTP 404: {detail}); "
            "apply it with `knowledge-api migrate`",
            backend="supabase",
        )
    if status == 429 or status >= 500:
        raise Unavailable(status, detail)


def error_detail(response: httpx.Response) -> str:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:200]
    return response.reason_phrase
