"""GET /metrics: Prometheus text format, from a registry of the app's own.

Request durations are labelled by route template, method and status; the service's
timings arrive through the Observer it is given; cache counters, circuit states and
document counts are read from the service when a scraper asks. No label carries a raw
path or a query.

Access: with KNOWLEDGE_METRICS_TOKEN set, `Authorization: Bearer <token>` opens the
route (the request observer sets `request.state.metrics_token_ok`; the access control
takes it instead of a key with the admin scope). Without a token, the route needs the
admin scope like any other admin route.
"""

from __future__ import annotations

import bisect
import hmac
import time
from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import tracing
from knowledge_api.errors import KnowledgeAPIError
from knowledge_api.models import ConnectorSource, SourceInfo
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings

METRICS_PATH = "/metrics"
MODEL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class MetricsRefused(KnowledgeAPIError, status=401, type="unauthorized"): ...


def metrics_token_ok(settings: Settings, authorization: str | None) -> bool:
    token = settings.metrics_token.get()
    if not token or not authorization:
        return False
    scheme, _, offered = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(offered.strip(), token)


class PrometheusObserver:
    """The service's Observer, as histograms and a counter."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.embedding_seconds = Histogram(
            "knowledge_embedding_seconds",
            "Model calls embedding a query or a batch of documents.",
            ["kind"],
            registry=registry,
            buckets=MODEL_BUCKETS,
        )
        self.search_seconds = Histogram(
            "knowledge_search_seconds",
            "Store searches (vector, keyword and fusion).",
            registry=registry,
            buckets=MODEL_BUCKETS,
        )
        self.synthesis_seconds = Histogram(
            "knowledge_synthesis_seconds",
            "One synthesis link's attempt at an answer, failed or not.",
            ["provider"],
            registry=registry,
        )
        self.provider_failures = Counter(
            "knowledge_provider_failures",
            "Failed attempts of a synthesis provider.",
            ["provider"],
            registry=registry,
        )

    def embedding(self, kind: str, seconds: float) -> None:
        self.embedding_seconds.labels(kind).observe(seconds)

    def search(self, seconds: float) -> None:
        self.search_seconds.observe(seconds)

    def synthesis(self, provider: str, seconds: float) -> None:
        self.synthesis_seconds.labels(provider).observe(seconds)

    def provider_failure(self, provider: str) -> None:
        self.provider_failures.labels(provider).inc()


class ServiceState:
    """Values the service keeps anyway, read at scrape time."""

    def __init__(self, service: KnowledgeService) -> None:
        self.service = service
        self.documents: dict[str, int] = {}
        self.connectors: list[tuple[SourceInfo, ConnectorSource]] = []

    async def refresh(self) -> None:
        """Document counts (one grouped count in the store) and the connector sources'
        records, only when scraped."""
        try:
            self.documents = await self.service.collections()
            self.connectors = await self.service.catalog.connector_sources()
        except KnowledgeAPIError:
            self.documents, self.connectors = {}, []

    def collect(self) -> Iterator[Metric]:
        caches = self.service.caches
        hits = CounterMetricFamily("knowledge_cache_hits", "Cache hits by tier.", labels=["tier"])
        misses = CounterMetricFamily(
            "knowledge_cache_misses", "Cache misses by tier.", labels=["tier"]
        )
        for tier, cache in (("responses", caches.responses), ("embeddings", caches.embeddings)):
            hits.add_metric([tier], cache.hits)
            misses.add_metric([tier], cache.misses)
        yield hits
        yield misses
        if caches.shared is not None:
            yield GaugeMetricFamily(
                "knowledge_cache_redis_up",
                "1 while the shared cache's Redis answers; 0 while each replica serves from "
                "its own memory.",
                value=float(caches.shared.up),
            )
            yield CounterMetricFamily(
                "knowledge_cache_redis_errors",
                "Redis calls of the shared cache that failed (each answered from memory).",
                value=caches.shared.errors,
            )
        circuits = GaugeMetricFamily(
            "knowledge_provider_circuit_open",
            "1 while a synthesis provider is skipped after failures in a row, else 0.",
            labels=["provider"],
        )
        chain = self.service.synthesizer
        for link in chain.links:
            circuits.add_metric([link.name], float(chain.circuit_open(link.name)))
        yield circuits
        if tracing.recording():
            yield dropped_spans()
        reads = self.service.store.reads()
        if reads:
            yield store_reads(reads)
        documents = GaugeMetricFamily(
            "knowledge_documents", "Documents by collection.", labels=["collection"]
        )
        for collection, count in sorted(self.documents.items()):
            documents.add_metric([collection], count)
        yield documents
        if self.connectors:
            yield from connector_metrics(self.connectors)


def connector_metrics(found: list[tuple[SourceInfo, ConnectorSource]]) -> Iterator[Metric]:
    """Each connector source's documents, last finished sync and prune (seconds since
    the epoch, 0: never) and whether its last run stopped on an error."""
    labels = ["collection", "source", "kind"]
    documents = GaugeMetricFamily(
        "knowledge_connector_documents", "Documents of each connector source.", labels=labels
    )
    synced = GaugeMetricFamily(
        "knowledge_connector_last_sync_timestamp_seconds",
        "When each connector source's last run finished without an error (0: never).",
        labels=labels,
    )
    pruned = GaugeMetricFamily(
        "knowledge_connector_last_prune_timestamp_seconds",
        "When each connector source was last pruned (0: never).",
        labels=labels,
    )
    failing = GaugeMetricFamily(
        "knowledge_connector_failing",
        "1 while a connector source's last run stopped on an error (its last_error), else 0.",
        labels=labels,
    )
    for info, source in found:
        key = [info.collection, info.name, source.kind]
        documents.add_metric(key, info.documents)
        synced.add_metric(key, epoch(source.last_sync))
        pruned.add_metric(key, epoch(source.last_prune))
        failing.add_metric(key, float(source.last_error is not None))
    yield from (documents, synced, pruned, failing)


def epoch(when: str) -> float:
    return datetime.fromisoformat(when).timestamp() if when else 0.0


def store_reads(reads: dict[str, int]) -> Metric:
    counter = CounterMetricFamily(
        "knowledge_store_reads",
        "Store reads (searches, listings, facets, documents) by where they were served: "
        "the primary or a read replica (host:port).",
        labels=["target", "replica"],
    )
    for replica, count in sorted(reads.items()):
        counter.add_metric(["replica" if replica else "primary", replica], count)
    return counter


def dropped_spans() -> Metric:
    dropped = CounterMetricFamily(
        "knowledge_trace_spans_dropped",
        "Spans never delivered to the collector: queue_full (the export queue was full, "
        "the collector slow or down) or export_failed (the collector refused or was "
        "unreachable).",
        labels=["reason"],
    )
    with tracing.DROPPED.lock:
        counts = dict(tracing.DROPPED.counts)
    for reason, count in sorted(counts.items()):
        dropped.add_metric([reason], count)
    return dropped


class Series:
    """One label set's observations: a count per bucket (not cumulated), their sum."""

    __slots__ = ("counts", "created", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0.0] * buckets
        self.total = 0.0
        self.created = time.time()


class RequestDurations:
    """`http_request_duration_seconds`, a histogram by route template, method and
    status, kept as plain numbers that a scrape turns into the samples a
    prometheus_client Histogram would give (the same names, labels, buckets and
    values): every request adds to it, and a Histogram's locks and value objects
    cost more than the rest of a cache hit's bookkeeping. Only the event loop's
    thread writes it."""

    NAME = "http_request_duration_seconds"
    HELP = "HTTP requests by route template, method and status."
    LABELS = ("route", "method", "status")
    BOUNDS = tuple(float(b) for b in Histogram.DEFAULT_BUCKETS)
    """Upper bounds, the last one +Inf."""
    LE = tuple(floatToGoString(bound) for bound in BOUNDS)  # type: ignore[no-untyped-call]
    """The bounds as their `le` labels say them."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, int], Series] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        series = self.series.get((route, method, status))
        if series is None:
            series = self.series[(route, method, status)] = Series(len(self.BOUNDS))
        series.counts[bisect.bisect_left(self.BOUNDS, seconds)] += 1.0
        series.total += seconds

    def describe(self) -> Iterator[Metric]:
        yield Metric(self.NAME, self.HELP, "histogram")

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.NAME, self.HELP, "histogram")
        created = prometheus_metrics._use_created  # prometheus_client's switch for them
        for (route, method, status), series in list(self.series.items()):
            labels = {"route": route, "method": method, "status": str(status)}
            cumulated = 0.0
            for bound, count in zip(self.LE, series.counts, strict=True):
                cumulated += count
                metric.add_sample(f"{self.NAME}_bucket", {**labels, "le": bound}, cumulated)
            metric.add_sample(f"{self.NAME}_count", labels, cumulated)
            metric.add_sample(f"{self.NAME}_sum", labels, series.total)
            if created:
                metric.add_sample(f"{self.NAME}_created", labels, series.created)
        yield metric


class Metrics:
    """The app's registry: what the middleware, the service and a scrape record."""

    def __init__(self, service: KnowledgeService) -> None:
        self.registry = CollectorRegistry()
        self.observer = PrometheusObserver(self.registry)
        self.durations = RequestDurations()
        self.registry.register(self.durations)
        self.request = self.durations.observe
        """(route, method, status, seconds): one request answered."""
        self.state = ServiceState(service)
        self.registry.register(self.state)

    async def exposition(self) -> bytes:
        await self.state.refresh()
        exposed: bytes = generate_latest(self.registry)
        return exposed


async def metrics(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    if settings.metrics_token and not granted(request):
        raise MetricsRefused("GET /metrics needs the metrics token or a key with the admin scope")
    exposition: Metrics = request.app.state.metrics
    return Response(await exposition.exposition(), media_type=CONTENT_TYPE_LATEST)


def granted(request: Request) -> bool:
    """The metrics token, or an admin key: with keys required the access control let
    only those through. With keys off, only the token opens the route once it is set."""
    settings: Settings = request.app.state.settings
    return bool(getattr(request.state, "metrics_token_ok", False)) or settings.auth_required
