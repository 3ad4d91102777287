"""Tracing settings: OpenTelemetry's own variables, read here like every other."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_api.config.fields import RATIO, Secret, setting

SAMPLERS = tuple(
    f"{parent}{name}"
    for parent in ("", "parentbased_")
    for name in ("always_on", "always_off", "traceidratio")
)
"""OTEL_TRACES_SAMPLER's names: the parentbased ones follow the caller's decision first."""


@dataclass(frozen=True)
class TraceSettings:
    otel_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "",
        "OTLP/HTTP collector base URL (spans to <url>/v1/traces as protobuf); empty = no "
        "tracing, at no cost.",
    )
    otel_traces_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "",
        "Full URL spans are posted to, in place of OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces.",
    )
    otel_headers: Secret = setting(
        "OTEL_EXPORTER_OTLP_HEADERS",
        Secret(""),
        "Headers of every export, key=value,key=value (a vendor's API key, say).",
    )
    otel_timeout: float = setting(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        10.0,
        "Seconds one export may take, retries included.",
        positive=True,
    )
    otel_service_name: str = setting(
        "OTEL_SERVICE_NAME",
        "",
        "service.name of the spans (empty = service.name of OTEL_RESOURCE_ATTRIBUTES, else "
        "knowledge-api).",
    )
    otel_resource_attributes: str = setting(
        "OTEL_RESOURCE_ATTRIBUTES",
        "",
        "Resource attributes of the spans, key=value,key=value (deployment.environment.name=prod).",
    )
    otel_traces_sampler: str = setting(
        "OTEL_TRACES_SAMPLER",
        "parentbased_always_on",
        "Which traces are kept; the parentbased_ samplers follow the caller's decision first.",
        choices=SAMPLERS,
    )
    otel_traces_sampler_arg: str = setting(
        "OTEL_TRACES_SAMPLER_ARG",
        "",
        "Ratio 0-1 of the traceidratio samplers (empty = 1).",
        choices=("",),
        form=RATIO,
    )
    otel_bsp_max_queue_size: int = setting(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        2048,
        "Spans waiting for export at most; past it they are dropped and counted in /metrics.",
        positive=True,
    )
    otel_sdk_disabled: bool = setting(
        "OTEL_SDK_DISABLED", False, "true turns tracing off whatever the endpoint."
    )
    trace_query_text: bool = setting(
        "KNOWLEDGE_TRACE_QUERY_TEXT",
        False,
        "Put the query's text on its spans (knowledge.query.text); off, spans never carry it.",
    )
