"""Trace export: opentelemetry-sdk with an OTLP exporter, installed at a process's start when the standard
`OTEL_*` variables ask for traces (docs/operations.md "Tracing", decision 0066).

Nothing here runs unless a process calls `configure`: `reach router`, `reach gateway`, `reach agent run`,
`reach channels run` and `Agent.run` do, with their `service.name`. Without an OTLP endpoint (or
`OTEL_TRACES_EXPORTER`) no SDK is installed, the API stays a no-op, and Reach's span calls cost a check of a
flag (reach.tracing.recording). The exporter, its endpoint and headers (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`,
`..._HEADERS`, `..._TIMEOUT`), the sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`), the batch
processor (`OTEL_BSP_*`) and the resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) are read by the SDK
itself, as the specification says; `OTEL_SDK_DISABLED=true` turns it all off.

A root span (the gateway's intake, a `reach send`) takes its W3C trace id from the envelope's `trace_id`
(`EnvelopeTraceIds`), so a trace found in the collector is the one `reach trace` shows, and every record of it,
with or without trace headers, lands in that trace."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from reach.errors import ConfigError

log = logging.getLogger(__name__)

WANTED_TRACE: contextvars.ContextVar[int] = contextvars.ContextVar("reach_wanted_trace_id", default=0)
"""The W3C trace id the next root span should have (set by reach.tracing around a root span's start)."""


class TracingConfigError(ConfigError):
    """The OTEL_* variables ask for something this process cannot export (an unknown exporter or protocol)."""


class EnvelopeTraceIds(RandomIdGenerator):
    """Random span ids; a root span's trace id is the envelope's when one is wanted (WANTED_TRACE), else random."""

    def generate_trace_id(self) -> int:
        return WANTED_TRACE.get() or super().generate_trace_id()


def exporters_asked(env: Mapping[str, str]) -> list[str]:
    """The trace exporters the environment asks for: OTEL_TRACES_EXPORTER (comma separated), else `otlp` when an
    OTLP endpoint is set, else none. `OTEL_SDK_DISABLED=true` asks for none."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not named:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        named = ["otlp"] if endpoint else []
    return [n for n in named if n != "none"]


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER names {name!r}; this process exports `otlp` or `console`")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol != "http/protobuf":
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; Reach exports OTLP over HTTP (http/protobuf): point "
            "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318) and unset the protocol")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*


def configure(service: str, env: Mapping[str, str]) -> bool:
    """Install the SDK with the exporters OTEL_* asks for, `service.name` = `service` unless OTEL_SERVICE_NAME
    or OTEL_RESOURCE_ATTRIBUTES names one. False (nothing installed) when no exporter is asked for, or the
    application installed a tracer provider of its own (it keeps it). Spans still open at exit are flushed by
    the SDK's own exit hook. `env` is the entry point's environment: it decides whether anything is installed
    (the SDK then reads its own settings, endpoint to sampler, from the process's environment)."""
    names = exporters_asked(env)
    if not names:
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the application's own provider (or ours, installed already)
    exporters = [_exporter(n, env) for n in names]
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    resource = Resource.create({} if named else {SERVICE_NAME: service})
    provider = TracerProvider(resource=resource, id_generator=EnvelopeTraceIds())  # sampler: OTEL_TRACES_SAMPLER
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing: %s spans exported (%s)", resource.attributes.get(SERVICE_NAME), ", ".join(names))
    return True


def ours() -> bool:
    """Whether the installed provider is one `configure` made (its root spans take the envelope's trace id)."""
    provider = trace.get_tracer_provider()
    return isinstance(provider, TracerProvider) and isinstance(provider.id_generator, EnvelopeTraceIds)
