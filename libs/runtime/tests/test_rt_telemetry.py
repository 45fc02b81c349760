import io
import json
import logging
import urllib.request

from k4d.config import load_config
from k4d.local_servers import free_port
from k4d.logs import configure_logging, get_logger, log_context
from k4d.metrics import runtime_metrics
from k4d.telemetry import (
    exporter_from_config,
    extract_trace_context,
    inject_trace_headers,
    start_metrics_server,
)
from opentelemetry import trace


def test_exporter_only_when_configured():
    assert exporter_from_config(load_config(env={})) is None
    assert exporter_from_config(load_config(env={"OTEL_TRACES_EXPORTER": "none",
                                                 "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317"})) is None
    otlp = exporter_from_config(load_config(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}))
    assert type(otlp).__name__ == "OTLPSpanExporter"
    otlp.shutdown()
    assert type(exporter_from_config(load_config(env={"OTEL_TRACES_EXPORTER": "otlp"}))).__name__ \
        == "OTLPSpanExporter"


def test_traceparent_round_trip_through_headers(span_exporter):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("producer") as span:
        headers = inject_trace_headers({"k4d-attempt": b"1"})
        trace_id = span.get_span_context().trace_id
    assert headers["traceparent"].decode().split("-")[1] == format(trace_id, "032x")
    with tracer.start_as_current_span("consumer", context=extract_trace_context(headers)) as child:
        assert child.get_span_context().trace_id == trace_id
    # no active span -> nothing injected
    assert inject_trace_headers({}) == {}


def test_json_logs_carry_job_and_trace_ids(span_exporter):
    stream = io.StringIO()
    configure_logging("INFO", "svc-test", stream=stream)
    try:
        log = get_logger("k4d.test")
        with trace.get_tracer("t").start_as_current_span("work") as span, log_context("job-7"):
            log.info("step done", extra={"frames": 49})
        log.debug("hidden at INFO")
        entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root = logging.getLogger()
        for handler in list(root.handlers):
            if handler.get_name() == "k4d-json":
                root.removeHandler(handler)
    [entry] = entries
    assert entry["message"] == "step done" and entry["service"] == "svc-test"
    assert entry["job_id"] == "job-7" and entry["frames"] == 49
    assert entry["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_metrics_endpoint_serves_runtime_metrics():
    assert start_metrics_server(0) is None  # 0 = disabled
    runtime_metrics().stage_messages.labels("k4d.test", "ok").inc()
    port = free_port()
    server = start_metrics_server(port, addr="127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'k4d_stage_messages_total{outcome="ok",topic="k4d.test"}' in body


def test_metrics_port_in_use_is_a_clear_error():
    import socket

    import pytest
    from k4d.errors import Unavailable

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(Unavailable, match="cannot serve /metrics"):
            start_metrics_server(busy.getsockname()[1], addr="127.0.0.1")


def test_extract_ignores_binary_and_missing_headers():
    ctx = extract_trace_context({"trace-bin": b"\xff\xfe", "k4d-attempt": b"2"})
    assert not trace.get_current_span(ctx).get_span_context().is_valid
