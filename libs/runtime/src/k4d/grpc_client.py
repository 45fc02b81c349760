"""Client side: channels with our message-size limits, TLS and bearer token
(`ClientSecurity`) and a tracing interceptor, health checks, and reading
`google.rpc.BadRequest` field violations out of an RpcError."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from opentelemetry import trace

from k4d.auth import AUTHORIZATION, BEARER, read_token_file
from k4d.errors import FieldViolation
from k4d.grpc_server import server_options
from k4d.telemetry import inject_trace_headers
from k4d.tls import channel_credentials

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


class _CallDetails(collections.namedtuple(
        "_CallDetails", ["method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"]),
        grpc.ClientCallDetails):
    pass


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a server: TLS when `tls_ca` names the CA to trust (with a
    client certificate when `cert` and `key` are set: mutual TLS), and the bearer token
    it sends ("" = none). The default is plaintext without a token."""

    tls_ca: str = ""
    token: str = ""
    cert: str = ""
    key: str = ""

    @classmethod
    def from_config(cls, config, *, tls_ca: str | None = None,
                    token_file: str | None = None) -> ClientSecurity:
        """K4D_TLS_CA / K4D_TOKEN (and K4D_TLS_CERT / K4D_TLS_KEY as the client
        certificate), overridden by the CLI's --tls-ca and --token-file."""
        token = read_token_file(token_file) if token_file else config.token
        return cls(tls_ca=tls_ca or config.tls_ca, token=token, cert=config.tls_cert,
                   key=config.tls_key)

    def describe(self) -> str:
        return f"TLS {'on' if self.tls_ca else 'off'}, token {'set' if self.token else 'none'}"


class _Metadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds fixed metadata (the bearer token) to every call: an interceptor, not call
    credentials, so that a token also travels on a plaintext channel when asked to."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = pairs

    def _call(self, continuation, details, request):
        return continuation(_CallDetails(
            details.method, details.timeout, [*(details.metadata or ()), *self.pairs],
            details.credentials, getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None)), request)

    intercept_unary_unary = _call
    intercept_unary_stream = _call
    intercept_stream_unary = _call
    intercept_stream_stream = _call


def _secure(target: str, security: ClientSecurity | None, options) -> grpc.Channel:
    security = security or ClientSecurity()
    if security.tls_ca:
        channel = grpc.secure_channel(target, channel_credentials(
            security.tls_ca, security.cert, security.key), options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    if security.token:
        channel = grpc.intercept_channel(channel, _Metadata([(AUTHORIZATION,
                                                              BEARER + security.token)]))
    return channel


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
                   tracing: bool = True, security: ClientSecurity | None = None) -> grpc.Channel:
    """A channel to `target` with our limits, TLS and token as `security` says
    (default: plaintext, no token) and a CLIENT span per call."""
    channel = _secure(target, security, server_options(max_message_bytes))
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
                 should_abort=lambda: False, security: ClientSecurity | None = None) -> bool:
    """Poll the health service until SERVING; False on timeout or when should_abort()."""
    deadline = time.monotonic() + timeout_s
    with _secure(target, security, None) as channel:
        while time.monotonic() < deadline and not should_abort():
            if check_health(channel, service, timeout_s=1.0) == "SERVING":
                return True
            time.sleep(0.1)
    return False
