"""Client side: channels with our message-size limits and a tracing interceptor, health
checks, and reading `google.rpc.BadRequest` field violations out of an RpcError."""

from __future__ import annotations

import collections
import time

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from opentelemetry import trace

from k4d.errors import FieldViolation
from k4d.grpc_server import server_options
from k4d.telemetry import inject_trace_headers

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


class _CallDetails(collections.namedtuple(
        "_CallDetails", ["method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"]),
        grpc.ClientCallDetails):
    pass


class ClientTracingInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                               grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """A CLIENT span per call; its `traceparent` goes to the server in the metadata."""

    def _call(self, continuation, details, request):
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        span = trace.get_tracer("k4d.grpc").start_span(
            method.lstrip("/"), kind=trace.SpanKind.CLIENT, attributes={"rpc.system": "grpc"})
        headers: dict[str, bytes] = {}
        inject_trace_headers(headers, context=trace.set_span_in_context(span))
        metadata = list(details.metadata or []) + [(k, v.decode()) for k, v in headers.items()]
        new_details = _CallDetails(details.method, details.timeout, metadata, details.credentials,
                                   getattr(details, "wait_for_ready", None),
                                   getattr(details, "compression", None))
        try:
            call = continuation(new_details, request)
        except BaseException:
            span.end()
            raise

        def done(finished):
            code = finished.code()
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
            span.end()

        call.add_done_callback(done)
        return call

    intercept_unary_unary = _call
    intercept_unary_stream = _call
    intercept_stream_unary = _call
    intercept_stream_stream = _call


def create_channel(target: str, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                   tracing: bool = True) -> grpc.Channel:
    channel = grpc.insecure_channel(target, options=server_options(max_message_bytes))
    return grpc.intercept_channel(channel, ClientTracingInterceptor()) if tracing else channel


def field_violations(error: grpc.RpcError) -> list[FieldViolation]:
    """The BadRequest field violations carried by an INVALID_ARGUMENT error ([] if none)."""
    status = rpc_status.from_call(error)
    if status is None:
        return []
    violations = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations += [FieldViolation(v.field, v.description) for v in bad_request.field_violations]
    return violations


def check_health(channel: grpc.Channel, service: str = "", timeout_s: float = 2.0) -> str:
    """The health status name (SERVING, NOT_SERVING, SERVICE_UNKNOWN, or UNAVAILABLE when
    the server cannot be reached)."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.RpcError as exc:
        return "SERVICE_UNKNOWN" if exc.code() is grpc.StatusCode.NOT_FOUND else "UNAVAILABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def wait_healthy(target: str, service: str = "", timeout_s: float = 30.0,
                 should_abort=lambda: False) -> bool:
    """Poll the health service until SERVING; False on timeout or when should_abort()."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        while time.monotonic() < deadline and not should_abort():
            if check_health(channel, service, timeout_s=1.0) == "SERVING":
                return True
            time.sleep(0.1)
    return False
