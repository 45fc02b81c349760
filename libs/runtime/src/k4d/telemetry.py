"""OpenTelemetry tracing setup, W3C `traceparent` propagation through message headers,
the Prometheus `/metrics` endpoint (the shared logger is `k4d.logs`).

Exporters follow the standard env vars: an OTLP exporter only when
OTEL_EXPORTER_OTLP_ENDPOINT is set or OTEL_TRACES_EXPORTER=otlp; none otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["exporter_from_config", "extract_trace_context",
           "inject_trace_headers", "setup_tracing", "start_metrics_server",
           "tracer"]

# Explicit W3C propagator: headers look the same whatever OTEL_PROPAGATORS says.
_PROPAGATOR = TraceContextTextMapPropagator()


def tracer(name: str = "k4d") -> trace.Tracer:
    return trace.get_tracer(name)


def _sdk_provider(service_name: str):
    """The process's SDK TracerProvider, created and installed on first use (OTel allows
    only one global provider, so later calls add processors to it)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    trace.set_tracer_provider(provider)
    return provider


def exporter_from_config(config):
    """The span exporter the standard OTEL_* settings ask for, or None (no export)."""
    choice = (config.otel_traces_exporter or "").lower()
    if choice == "otlp" or (not choice and config.otel_exporter_otlp_endpoint):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=config.otel_exporter_otlp_endpoint or None)
    if choice == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    return None


def setup_tracing(config, span_exporter=None):
    """Install the SDK tracer provider (trace ids in logs even without export) and the
    exporter the config asks for; `span_exporter` (tests) is added with a synchronous
    processor. Returns the provider."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = _sdk_provider(config.service_name)
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    configured = exporter_from_config(config)
    if configured is not None:
        provider.add_span_processor(BatchSpanProcessor(configured))
    return provider


def inject_trace_headers(headers: MutableMapping[str, bytes], context=None) -> MutableMapping[str, bytes]:
    """Write `traceparent` (and `tracestate`) of the current span into bus headers (bytes)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    for key, value in carrier.items():
        headers[key] = value.encode()
    return headers


def extract_trace_context(headers: Mapping[str, bytes | str]) -> otel_context.Context:
    """The remote parent context carried by bus headers or gRPC metadata."""
    carrier = {k.lower(): (v.decode(errors="replace") if isinstance(v, bytes) else v)
               for k, v in headers.items()}
    return _PROPAGATOR.extract(carrier)


def start_metrics_server(port: int, addr: str = "127.0.0.1"):
    """Serve Prometheus `/metrics` on `port` in a daemon thread; port 0 disables it.
    Returns the HTTP server (call .shutdown() to stop) or None."""
    if not port:
        return None
    from prometheus_client import start_http_server

    from k4d.errors import Unavailable

    try:
        server, _thread = start_http_server(port, addr=addr)
    except OSError as exc:
        raise Unavailable(f"cannot serve /metrics on {addr}:{port}: {exc.strerror or exc}") from None
    return server
