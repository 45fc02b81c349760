"""gRPC bootstrap against a real server on loopback, with a raw-bytes test service
(no .proto of our own: generic handlers with identity serializers)."""

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from k4d.config import load_config
from k4d.errors import FieldViolation, InvalidArgument, NotFound
from k4d.grpc_client import check_health, create_channel, field_violations
from k4d.grpc_server import add_shutdown_callback, create_server, serve, set_serving

pytestmark = pytest.mark.integration

SERVICE = "k4d.test.Echo"
LATE_SERVICE = "k4d.test.Late"


def _echo(request: bytes, context) -> bytes:
    if request == b"bad":
        raise InvalidArgument("two bad fields", [FieldViolation("camera.fx", "must be > 0"),
                                                 FieldViolation("joints[3]", "above the upper limit")])
    if request == b"missing":
        raise NotFound("robot 'r2d2' not found")
    if request == b"boom":
        raise RuntimeError("secret internal detail /etc/passwd")
    if request == b"abort":
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "handler's own abort")
    return request


def _stream(request: bytes, context):
    for i in range(3):
        yield f"chunk{i}".encode()
    if request == b"boom":
        raise RuntimeError("secret streaming detail")
    if request == b"bad":
        raise InvalidArgument.for_field("frames", "too many")


def register_echo(server, config):
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream),
    }),))
    return [SERVICE]


def register_late(server, config):
    set_serving(server, LATE_SERVICE, False)  # e.g. a model still loading
    return [LATE_SERVICE]


@pytest.fixture
def echo_server():
    config = load_config(env={}, grpc_host="127.0.0.1", grpc_port=0, grpc_max_message_bytes=1 << 20)
    server, port = create_server(config, [register_echo, register_late])
    server.start()
    channel = create_channel(f"127.0.0.1:{port}", max_message_bytes=4 << 20)
    yield server, channel
    channel.close()
    server.stop(None)


def call(channel, method, payload, streaming=False):
    path = f"/{SERVICE}/{method}"
    if streaming:
        return list(channel.unary_stream(path)(payload, timeout=5))
    return channel.unary_unary(path)(payload, timeout=5)


def test_health_serving_and_readiness_set_by_the_service(echo_server):
    server, channel = echo_server
    assert check_health(channel, "") == "SERVING"
    assert check_health(channel, SERVICE) == "SERVING"
    assert check_health(channel, LATE_SERVICE) == "NOT_SERVING"
    assert check_health(channel, "no.such.Service") == "SERVICE_UNKNOWN"
    set_serving(server, LATE_SERVICE, True)
    assert check_health(channel, LATE_SERVICE) == "SERVING"


def test_reflection_lists_registered_services(echo_server):
    _, channel = echo_server
    services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {SERVICE, LATE_SERVICE, "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= services


def test_ok_and_invalid_argument_with_field_violations(echo_server):
    _, channel = echo_server
    assert call(channel, "Echo", b"hi") == b"hi"
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Echo", b"bad")
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "two bad fields"
    assert field_violations(info.value) == [FieldViolation("camera.fx", "must be > 0"),
                                            FieldViolation("joints[3]", "above the upper limit")]


def test_domain_errors_map_to_codes_and_own_aborts_pass_through(echo_server):
    _, channel = echo_server
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Echo", b"missing")
    assert info.value.code() is grpc.StatusCode.NOT_FOUND and "r2d2" in info.value.details()
    assert field_violations(info.value) == []
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Echo", b"abort")
    assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED


def test_unexpected_exception_is_internal_without_details(echo_server, caplog):
    _, channel = echo_server
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Echo", b"boom")
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert info.value.details() == "internal error"
    assert "secret" not in repr(info.value) and "Traceback" not in repr(info.value)
    assert any("secret internal detail" in (r.exc_text or "") or
               (r.exc_info and "secret internal detail" in str(r.exc_info[1])) for r in caplog.records)
    assert call(channel, "Echo", b"still alive") == b"still alive"  # one bad request, server lives


def test_streaming_errors_are_mapped_too(echo_server):
    _, channel = echo_server
    assert call(channel, "Stream", b"ok", streaming=True) == [b"chunk0", b"chunk1", b"chunk2"]
    responses = channel.unary_stream(f"/{SERVICE}/Stream")(b"boom", timeout=5)
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for response in responses:
            got.append(response)
    assert got == [b"chunk0", b"chunk1", b"chunk2"]
    assert info.value.code() is grpc.StatusCode.INTERNAL and info.value.details() == "internal error"
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Stream", b"bad", streaming=True)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field_violations(info.value) == [FieldViolation("frames", "too many")]


def test_message_size_limit_is_configured(echo_server):
    _, channel = echo_server
    assert call(channel, "Echo", b"x" * (512 << 10)) == b"x" * (512 << 10)
    with pytest.raises(grpc.RpcError) as info:
        call(channel, "Echo", b"x" * (2 << 20))  # server limit is 1 MiB here
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_metrics_count_requests_per_method_and_code(echo_server):
    from prometheus_client import REGISTRY

    _, channel = echo_server
    labels = {"method": f"/{SERVICE}/Echo", "code": "INVALID_ARGUMENT"}
    before = REGISTRY.get_sample_value("k4d_grpc_requests_total", labels) or 0
    with pytest.raises(grpc.RpcError):
        call(channel, "Echo", b"bad")
    assert REGISTRY.get_sample_value("k4d_grpc_requests_total", labels) == before + 1
    assert REGISTRY.get_sample_value("k4d_grpc_request_seconds_count", {"method": f"/{SERVICE}/Echo"}) >= 1


def test_server_span_joins_the_client_trace(echo_server, span_exporter):
    _, channel = echo_server
    call(channel, "Echo", b"traced")
    by_kind = {s.kind.name: s for s in span_exporter.get_finished_spans() if s.name == f"{SERVICE}/Echo"}
    client, server = by_kind["CLIENT"], by_kind["SERVER"]
    assert server.attributes["rpc.grpc.status_code"] == 0
    assert server.context.trace_id == client.context.trace_id
    assert server.parent.span_id == client.context.span_id


def test_bind_failure_is_a_clear_error():
    from k4d.errors import Unavailable

    config = load_config(env={}, grpc_host="127.0.0.1", grpc_port=0)
    server, port = create_server(config, [])
    server.start()
    try:
        with pytest.raises(Unavailable, match="cannot bind"):
            create_server(config.replace(grpc_port=port), [])
    finally:
        server.stop(None)


def test_serve_stops_gracefully_and_reports_not_serving():
    from k4d.local_servers import free_port

    port = free_port()
    config = load_config(env={}, grpc_host="127.0.0.1", grpc_port=port, shutdown_grace_s=1)
    stop = threading.Event()
    worker_stopped = threading.Event()

    class Worker:
        def run(self, stop_event):
            stop_event.wait()
            worker_stopped.set()

    order = []

    def register_with_hook(server, config):
        add_shutdown_callback(server, lambda: order.append(("callback", worker_stopped.is_set())))
        return register_echo(server, config)

    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", serve(
        config, [register_with_hook], [Worker()], stop_event=stop, install_signal_handlers=False)))
    thread.start()
    from k4d.grpc_client import wait_healthy

    assert wait_healthy(f"127.0.0.1:{port}", SERVICE, timeout_s=10)
    stop.set()
    thread.join(10)
    assert result == {"code": 0} and worker_stopped.is_set()
    assert order == [("callback", True)]  # after the workers finished
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)


def test_health_checks_make_no_spans(echo_server, span_exporter):
    _, channel = echo_server
    assert check_health(channel, SERVICE) == "SERVING"
    assert [s for s in span_exporter.get_finished_spans() if s.kind.name == "SERVER"] == []
