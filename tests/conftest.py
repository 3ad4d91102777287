from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.compose import build_embedder, build_service, build_store, embedder_identity
from knowledge_api.config.fields import Secret
from knowledge_api.connectors.base import Runtime
from knowledge_api.connectors.http import Retries
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.filters import Node
from knowledge_api.filters import parse as parse_filter
from knowledge_api.logs import remove_split_handlers
from knowledge_api.models import Document
from knowledge_api.routes import query as query_route
from knowledge_api.service import KnowledgeService
from knowledge_api.service.catalog import Catalog
from knowledge_api.settings import Settings
from knowledge_api.stores.base import KnowledgeStore
from knowledge_api.stores.sqlite.store import SQLiteStore
from knowledge_api.usecases import query as query_use
from knowledge_api.usecases.query import QueryParams
from knowledge_api.views import query as query_contract
from tests.pg import postgres_server, postgrest  # noqa: F401 (fixtures)
from tests.pg_replication import replicated  # noqa: F401 (fixture)
from tests.redis_server import RedisServer, redis_server  # noqa: F401 (fixture)

CORPUS = [
    Document(
        "jira",
        "SIAM-101",
        "The login page times out after 30 seconds when SSO is slow. "
        "Increase the gateway timeout to fix the login timeout.",
        "Login timeout",
        {"app_under_test": "aoma", "priority": "high"},
    ),
    Document(
        "git",
        "a1b2c3d",
        "Fix the pagination bug in the asset search endpoint. "
        "Pages beyond the tenth returned duplicate assets.",
        "Fix asset search pagination",
        {"app_under_test": "aoma"},
    ),
    Document(
        "wiki",
        "https://wiki.example.com/aoma/test-cases",
        "# Creating test cases\n\nTo create a test case in AOMA, open the Test Manager "
        "and press New Case. Every test case needs a title and at least one step.\n\n"
        "## Linking\n\nLink a test case to a Jira ticket from its Links tab.",
        "Creating test cases",
        {"app_under_test": "aoma"},
    ),
    Document(
        "knowledge",
        "kb-7",
        "Asset ingestion accepts WAV and FLAC audio files. MP3 "
        "uploads are converted to FLAC before ingestion.",
        "Supported audio formats",
        {"app_under_test": "dam"},
    ),
    Document(
        "email",
        "msg-42",
        "The release of version 4.2 moves to Friday because the "
        "metadata migration needs another day of testing.",
        "Release 4.2 date",
        {},
    ),
    Document(
        "metrics",
        "latency-weekly",
        "Median search latency last week was 180 ms, the "
        "95th percentile 420 ms, both within the service objective.",
        "Search latency",
        {},
    ),
]


@pytest.fixture(autouse=True)
def logging_as_pytest_left_it() -> Iterator[None]:
    """A test running the CLI sets the app's logging up; the next tests get pytest's
    back (a server thread logging after its test would otherwise print to the terminal)."""
    level = logging.getLogger().level
    yield
    remove_split_handlers()
    logging.getLogger().setLevel(level)


@dataclass
class Computation:
    """A cache's computation of `value` that takes `seconds`, counting its calls: what
    it gives may be kept unless it is not `cacheable` (a degraded answer)."""

    value: str
    seconds: float
    cacheable: bool = True
    calls: int = 0

    async def __call__(self) -> tuple[str, bool]:
        self.calls += 1
        await asyncio.sleep(self.seconds)
        return self.value, self.cacheable


def corpus() -> list[Document]:
    """Fresh copies: ingestion fills in chunks, so tests must not share instances."""
    return [
        Document(d.source_type, d.source_id, d.content, d.title, dict(d.metadata)) for d in CORPUS
    ]


def pairs(values: Any) -> Node | None:
    """The filter tree of metadata equalities given as (key, value) pairs."""
    return parse_filter(dict(values))


def make_settings(tmp_path: Path, **changes: object) -> Settings:
    base = Settings.from_env(environ={}, env_file=None)
    defaults = {
        "db_path": tmp_path / "knowledge.db",
        "embedder": "fake",
        "seed_on_empty": False,
        "allowed_hosts": "testserver",  # the Host Starlette's TestClient sends
    }
    return base.replace(**{**defaults, **changes})


def seeded(client: TestClient) -> None:
    """The seed of an empty store runs in the background: wait for its end."""
    client.portal.call(client.app.state.service.seeded)  # type: ignore[attr-defined]


def seeded_at(url: str, key: str = "", timeout_s: float = 300) -> None:
    """The same, for a service running at `url`: /health shows `seeding` until then
    (to a caller who may read: `key` where keys are required)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def health() -> dict[str, Any]:  # urllib: respx, where a test has it on, lets it by
        request = urllib.request.Request(f"{url}/health", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    while seeding := health().get("seeding"):
        assert "error" not in seeding and time.monotonic() < deadline, seeding
        time.sleep(0.1)


def connectors_reported(
    client: TestClient, ready: Callable[[dict[str, Any]], object], timeout_s: float = 30
) -> dict[str, Any]:
    """The connectors part of /health once `ready` holds of it: the runner in the
    background reports after the app has started."""
    deadline = time.monotonic() + timeout_s
    while not ready(report := client.get("/health").json()["connectors"]):
        assert time.monotonic() < deadline, report
        time.sleep(0.05)
    return report


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    """Every HTTP request must match a route of the test's; none reaches the network."""
    from tests import providers  # it builds its settings with this module's make_settings

    yield from providers.mocked()


@asynccontextmanager
async def replicas_sharing(
    tmp_path: Path, server: RedisServer, prefix: str
) -> AsyncIterator[tuple[KnowledgeService, KnowledgeService]]:
    """Two services on one SQLite file in `tmp_path` that share the cache on `server`
    under `prefix`, started, as two processes of one deployment run."""
    settings = make_settings(
        tmp_path, cache="redis", redis_url=Secret(server.url), redis_prefix=prefix
    )
    first, second = build_service(settings), build_service(settings)
    for service in (first, second):
        await service.start()
    try:
        yield first, second
    finally:
        for service in (first, second):
            await service.stop()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[KnowledgeService]:
    """The service on `settings`, started until the block ends."""
    service = build_service(settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[KnowledgeService]:
    async with running(settings) as svc:
        yield svc


@pytest.fixture
async def loaded(service: KnowledgeService) -> KnowledgeService:
    await service.ingest(corpus())
    return service


def ingested_client(settings: Settings, documents: list[Document]) -> Iterator[TestClient]:
    """A client of the app on `settings` whose store holds `documents`, for a fixture to
    yield from."""
    app = create_app(settings)
    with TestClient(app) as test_client:
        test_client.portal.call(app.state.service.ingest, documents)  # type: ignore[union-attr]
        yield test_client


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    yield from ingested_client(settings, corpus())


def fake_embedder(service: KnowledgeService) -> FakeEmbedder:
    assert isinstance(service.embedder, FakeEmbedder)
    return service.embedder


def query_params(payload: dict[str, Any]) -> QueryParams:
    """A query as POST /v1/knowledge/query parses it."""
    return query_contract.parse(payload)[0]


async def ask(service: KnowledgeService, params: QueryParams) -> dict[str, Any]:
    """A query's response body, as POST /v1/knowledge/query renders it."""
    return query_contract.render(await query_use.query(service, params))


async def query_events(
    service: KnowledgeService, params: QueryParams
) -> AsyncIterator[tuple[str, Any]]:
    """A streamed query's events, as POST /v1/knowledge/query sends them."""
    async for name, data in query_use.events(service, params):
        yield query_route.sse_event(name, data)


async def opened_sqlite(path: Path, embedder: str, dimension: int, **options: Any) -> SQLiteStore:
    """A SQLite store in the file `path` (with `options`), open, that holds vectors of
    `embedder`."""
    store = SQLiteStore(path, **options)
    await store.open()
    await store.check_embedder(embedder, dimension)
    return store


def make_store(backend: str, settings: Settings) -> KnowledgeStore:
    """A store of `backend` for the embedder `settings` configure, as the app builds it."""
    return build_store(settings, embedder_identity(build_embedder(settings)), backend)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between a connector's tries, recorded instead of slept (every
    connector the service builds, with KNOWLEDGE_SYNC_RETRIES tries)."""
    found: list[float] = []

    def recorded(catalog: Catalog) -> Runtime:
        attempts = catalog.engine.settings.sync_retries
        return Runtime(Retries(attempts=attempts, sleep=found.append))

    monkeypatch.setattr(Catalog, "connector_runtime", recorded)
    return found
