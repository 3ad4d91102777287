"""OpenTelemetry traces: a span per stage of a request, exported over OTLP/HTTP.

Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set:
then `span()` hands out one shared object that does nothing, no middleware is added
and the SDK is never imported. On, spans go through a bounded queue to a background
thread that posts them as protobuf to `<endpoint>/v1/traces`; a collector that is down
or slow only fills the queue, and spans that do not fit (or fail to export) are
counted (`knowledge_trace_spans_dropped_total` in /metrics), never waited for.

Settings (settings.py) carry the standard variables: OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG), OTEL_EXPORTER_OTLP_HEADERS and
_TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE; they are handed to the SDK from there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncGenerator, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from knowledge_api.settings import Settings

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("knowledge_api.tracing")
T = TypeVar("T")
TRACER_NAME = "knowledge_api"
Attributes = Mapping[str, Any]


class SpanLike(Protocol):
    """What code under a span may do with it (an SDK span or NO_SPAN)."""

    def set_attribute(self, key: str, value: Any) -> Any: ...

    def set_attributes(self, attributes: Attributes) -> Any: ...

    def add_event(self, name: str, attributes: Attributes | None = None) -> Any: ...

    def is_recording(self) -> bool: ...


class NoSpan:
    """The span of a process that does not trace: every call does nothing."""

    __slots__ = ()

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Attributes) -> None:
        pass

    def add_event(self, name: str, attributes: Attributes | None = None) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def end(self) -> None:
        pass


NO_SPAN = NoSpan()


class Dropped:
    """Spans lost on the way to the collector, by reason (thread-safe counts)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = {"queue_full": 0, "export_failed": 0}

    def add(self, reason: str, count: int = 1) -> None:
        with self.lock:
            self.counts[reason] += count


DROPPED = Dropped()
"""Process-wide, like the tracer: /metrics reads it."""


class Tracing:
    """The tracer provider of the process, its tracer and what the spans may say."""

    def __init__(self, provider: Any, query_text: bool) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)
        self.query_text = query_text

    def flush(self, timeout_s: float = 5.0) -> None:
        """Export what is queued, waiting at most `timeout_s` (a collector that is down
        may hold an export for its whole timeout: the rest is left to the thread)."""
        worker = threading.Thread(target=self.provider.force_flush, daemon=True)
        worker.start()
        worker.join(timeout_s)

    def shutdown(self) -> None:
        worker = threading.Thread(target=self.provider.shutdown, daemon=True)
        worker.start()
        worker.join(5.0)


_active: Tracing | None = None


def active() -> Tracing | None:
    """The process's tracing, None when it is off."""
    return _active


def traces_endpoint(settings: Settings) -> str:
    """Where spans are posted: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
    OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; empty when tracing is off."""
    if settings.otel_sdk_disabled:
        return ""
    if settings.otel_traces_endpoint:
        return settings.otel_traces_endpoint
    if settings.otel_endpoint:
        return settings.otel_endpoint.rstrip("/") + "/v1/traces"
    return ""


def configure(settings: Settings, exporter: Any = None) -> Tracing | None:
    """Tracing for the process as `settings` say (replacing any before): exported to
    their endpoint, or to `exporter` (the SDK's in-memory exporter of tests, spans
    handed over as each ends). None, and off, without either."""
    global _active
    disable()
    endpoint = traces_endpoint(settings)
    if exporter is None and not endpoint:
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=resource(settings), sampler=sampler(settings))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(
            bounded_processor(otlp_exporter(settings, endpoint), settings.otel_bsp_max_queue_size)
        )
    _active = Tracing(provider, settings.trace_query_text)
    return _active


def disable() -> None:
    """Tracing off, what was queued flushed first."""
    global _active
    if _active is not None:
        previous, _active = _active, None
        previous.shutdown()


def otlp_exporter(settings: Settings, endpoint: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return CountingExporter(
        OTLPSpanExporter(
            endpoint=endpoint,
            headers=pairs(settings.otel_headers.get()),
            timeout=settings.otel_timeout,
            compression=Compression.NoCompression,
        )
    )


def resource(settings: Settings) -> Any:
    """The process's resource: OTEL_RESOURCE_ATTRIBUTES, service.name from
    OTEL_SERVICE_NAME (which wins, as the specification says), else knowledge-api."""
    from opentelemetry.sdk.resources import Resource

    from knowledge_api import __version__

    attributes: dict[str, Any] = {"service.version": __version__}
    attributes.update(pairs(settings.otel_resource_attributes))
    attributes["service.name"] = (
        settings.otel_service_name or attributes.get("service.name") or "knowledge-api"
    )
    return Resource.create(attributes)


def sampler(settings: Settings) -> Any:
    """OTEL_TRACES_SAMPLER with its _ARG (a ratio 0-1, 1 when not given)."""
    from opentelemetry.sdk.trace import sampling

    name = settings.otel_traces_sampler
    ratio = float(settings.otel_traces_sampler_arg or 1.0)
    root = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": sampling.TraceIdRatioBased(ratio),
    }
    if name.startswith("parentbased_"):
        return sampling.ParentBased(root[name.removeprefix("parentbased_")])
    return root[name]


def pairs(text: str) -> dict[str, str]:
    """`key=value,key=value` as W3C Baggage writes them (values percent-encoded), the
    form of OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS."""
    found = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            found[key.strip()] = unquote(value.strip())
    return found


class CountingExporter:
    """An exporter that counts the spans it failed to deliver."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.exporter.export(spans)
        except Exception:
            log.exception("exporting %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            DROPPED.add("export_failed", len(spans))
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


def bounded_processor(exporter: Any, max_queue: int) -> Any:
    """The SDK's batch processor, refusing (and counting) a span that finds the queue
    full, instead of logging a warning for each one it drops."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class Bounded(BatchSpanProcessor):
        def on_end(self, span: Any) -> None:
            queue = getattr(self._batch_processor, "_queue", None)
            if queue is not None and len(queue) >= max_queue:
                if span.context.trace_flags.sampled:
                    DROPPED.add("queue_full")
                return
            super().on_end(span)

    return Bounded(exporter, max_queue_size=max_queue, max_export_batch_size=min(512, max_queue))


# -- spans ---------------------------------------------------------------------------


def span(
    name: str, attributes: Attributes | None = None, kind: str = "internal"
) -> AbstractContextManager[SpanLike]:
    """A span around a stage, current inside it; NO_SPAN when tracing is off. An
    exception leaving it marks it failed."""
    tracing = _active
    if tracing is None:
        return NO_SPAN
    return tracing.tracer.start_as_current_span(  # type: ignore[no-any-return]
        name, attributes=attributes, kind=span_kind(kind)
    )


def span_kind(kind: str) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[kind.upper()]


def start(name: str, attributes: Attributes | None = None) -> Any:
    """A span that is not made current: code that yields between its parts (a stream)
    makes it current only while it works (`current`), and ends it itself."""
    tracing = _active
    if tracing is None:
        return NO_SPAN
    return tracing.tracer.start_span(name, attributes=attributes)


@contextmanager
def current(started: Any) -> Iterator[None]:
    """`started` (from `start`) is the current span inside."""
    if started is NO_SPAN:
        yield
        return
    from opentelemetry import trace

    with trace.use_span(started, end_on_exit=False):
        yield


def pulled(started: Any, pieces: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """`pieces`, with `started` (from `start`) current while each one is made: a
    stream's work (its provider's HTTP calls) is traced under it, its reader's not."""
    if started is NO_SPAN:
        return pieces
    return _pulled(started, pieces)


async def _pulled(started: Any, pieces: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    from opentelemetry import trace

    try:
        while True:
            with trace.use_span(started, end_on_exit=False):
                try:
                    piece = await anext(pieces)
                except StopAsyncIteration:
                    return
            yield piece
    finally:
        with trace.use_span(started, end_on_exit=False):
            await pieces.aclose()


def failed(started: Any, reason: str) -> None:
    """Mark a span (from `span` or `start`) failed, saying why."""
    if started is NO_SPAN or not started.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    started.set_status(Status(StatusCode.ERROR, reason))


def query_attributes(text: str) -> dict[str, Any]:
    """The query's text as an attribute, only with KNOWLEDGE_TRACE_QUERY_TEXT=true."""
    tracing = _active
    if tracing is None or not tracing.query_text:
        return {}
    return {"knowledge.query.text": text}


def recording() -> bool:
    """Whether spans are recorded at all (to skip work done only for them)."""
    return _active is not None


# -- propagation ---------------------------------------------------------------------


def extract(headers: Mapping[str, str]) -> Any:
    """The caller's context from a W3C `traceparent` (and `tracestate`) header."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(headers)


def inject(headers: MutableMapping[str, str]) -> None:
    """The current span's `traceparent` (and `tracestate`) into outgoing headers."""
    if _active is None:
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    TraceContextTextMapPropagator().inject(headers)


def context_now() -> Any:
    """The current context, to continue it elsewhere (another task)."""
    if _active is None:
        return None
    from opentelemetry import context

    return context.get_current()


@contextmanager
def within(parent: Any) -> Iterator[None]:
    """Spans started inside continue `parent` (from `context_now`)."""
    if parent is None or _active is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


# -- outgoing HTTP -------------------------------------------------------------------


C = TypeVar("C")


def traced_client(client: C) -> C:
    """An httpx.AsyncClient whose requests carry `traceparent`, each in a client span
    (HTTP semantic conventions), through the transports it chose itself (proxies
    included); the client as it is when tracing is off."""
    if _active is None:
        return client
    own: Any = client
    own._transport = traced_transport(own._transport)
    own._mounts = {
        pattern: None if mounted is None else traced_transport(mounted)
        for pattern, mounted in own._mounts.items()
    }
    return client


def traced_transport(inner: httpx.AsyncBaseTransport) -> Any:
    """`inner`, each request in a client span and carrying `traceparent`."""
    import httpx

    class Traced(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            url = request.url
            attributes = {
                "http.request.method": request.method,
                "server.address": url.host,
                "server.port": url.port or (443 if url.scheme == "https" else 80),
                "url.full": safe_url(str(url)),
            }
            with span(request.method, attributes, kind="client") as client:
                inject(request.headers)
                try:
                    response = await inner.handle_async_request(request)
                except httpx.HTTPError as e:
                    client.set_attribute("error.type", type(e).__name__)
                    raise
                client.set_attribute("http.response.status_code", response.status_code)
                if response.status_code >= 400:
                    client.set_attribute("error.type", str(response.status_code))
                    failed(client, f"HTTP {response.status_code}")
                return response

        async def aclose(self) -> None:
            await inner.aclose()

    return Traced()


def safe_url(url: str) -> str:
    """A URL without its query and credentials (keys travel there at times)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
