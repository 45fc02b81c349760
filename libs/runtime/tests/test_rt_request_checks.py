"""k4d.limits and the request admission interceptor (k4d.grpc_requests): over-long names,
paths and URIs, and undecodable bytes, are INVALID_ARGUMENT naming the field."""

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from k4d.config import Config
from k4d.errors import InvalidArgument
from k4d.grpc_requests import MAX_TEXT_CHARS, check_strings
from k4d.grpc_server import create_server
from k4d.limits import MAX_NAME_CHARS, MAX_URI_CHARS, check_name, check_uri
from k4d.testing.fuzz import nested_groups
from kinema4d.v1 import common_pb2, generator_pb2, simulator_pb2


def _field(exc: InvalidArgument) -> str:
    (violation,) = exc.violations
    return violation.field


def test_limits():
    assert check_name("panda", "name") == "panda"
    assert check_uri("s3://bucket/models/tiny/3", "uri")
    for bad, check in [("n" * (MAX_NAME_CHARS + 1), check_name), ("a\x00b", check_name),
                       ("/" + "u" * MAX_URI_CHARS, check_uri), ("/tmp/" + "c" * 256, check_uri),
                       ("/tmp/" + "\u00e9" * 128, check_uri)]:  # 256 bytes in UTF-8
        with pytest.raises(InvalidArgument) as err:
            check(bad, "model.uri")
        assert _field(err.value) == "model.uri"


def test_check_strings_names_the_nested_field():
    check_strings(generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="tiny", uri="/m")))
    cases = [
        (generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(uri="/" + "m" * 300)), "model.uri"),
        (generator_pb2.LoadModelRequest(model=common_pb2.ModelRef(name="n" * 300)), "model.name"),
        (simulator_pb2.GetRequest(job_id="j" * 300), "job_id"),
        (generator_pb2.LoadModelRequest(precision="p" * (MAX_TEXT_CHARS + 1)), "precision"),
    ]
    for message, field in cases:
        with pytest.raises(InvalidArgument) as err:
            check_strings(message)
        assert _field(err.value) == field


def test_json_documents_are_bounded_by_the_message_size_only():
    info = generator_pb2.ModelInfo(config_json="{" + " " * 50_000 + "}")
    check_strings(info)


@pytest.fixture
def channel():
    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0), [])
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    server.stop(0)


def _bad_request(channel, payload: bytes):
    call = channel.unary_unary("/grpc.health.v1.Health/Check")
    with pytest.raises(grpc.RpcError) as err:
        call(payload, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    (detail,) = rpc_status.from_call(err.value).details
    bad = error_details_pb2.BadRequest()
    detail.Unpack(bad)
    return [v.field for v in bad.field_violations]


def test_undecodable_requests_are_invalid_argument(channel):
    # Garbage, a truncated field, nesting past the parser's recursion limit: grpcio's own
    # answer to all three is INTERNAL "Exception deserializing request!".
    for payload in [b"\xff\xff\xff", b"\x0a\x05ab", nested_groups(5000)]:
        assert _bad_request(channel, payload) == ["request"]


def test_over_long_strings_are_invalid_argument_on_any_service(channel):
    from grpc_health.v1 import health_pb2

    request = health_pb2.HealthCheckRequest(service="s" * (MAX_TEXT_CHARS + 1))
    assert _bad_request(channel, request.SerializeToString()) == ["service"]


def test_a_client_leaving_a_stream_logs_no_error(caplog):
    """Reflection clients (grpcurl, the fuzzer) close their request stream and go: that is
    not an 'unhandled exception' with a traceback in the server log."""
    import logging
    import time

    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0), [])
    server.start()
    try:
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    assert "grpc.health.v1.Health" in list(
                        ProtoReflectionDescriptorDatabase(channel).get_services())
            time.sleep(0.5)
    finally:
        server.stop(0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
