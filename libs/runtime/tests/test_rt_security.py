"""TLS and bearer tokens on a real server on loopback (k4d.tls, k4d.auth): who gets in,
who is refused and with which status and reason."""

from __future__ import annotations

import os
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from k4d import auth, local_pki
from k4d.config import load_config
from k4d.errors import InvalidArgument
from k4d.grpc_client import ClientSecurity, check_health, create_channel, wait_healthy
from k4d.grpc_server import create_server

pytestmark = pytest.mark.integration
GENERATOR = "kinema4d.v1.GeneratorService"
TOKENS = {"alice": ("user", "alice-token"), "root": ("operator", "root-token"),
          "kin": ("service", "kin-token")}


def _who(request: bytes, context) -> bytes:
    caller = auth.current_caller()
    return b"anonymous" if caller is None else f"{caller.role}:{caller.name}".encode()


def _who_stream(request: bytes, context):
    for _ in range(2):
        yield _who(request, context)


def register(server, config):
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(GENERATOR, {
        "LoadModel": grpc.unary_unary_rpc_method_handler(_who),
        "ListModels": grpc.unary_unary_rpc_method_handler(_who),
        "Generate": grpc.unary_stream_rpc_method_handler(_who_stream),
    }),))
    return [GENERATOR]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca = local_pki.create_ca(directory)
    return {"ca": ca, "server": local_pki.issue(ca, directory, "server"),
            "client": local_pki.issue(ca, directory, "client", client=True),
            "other_ca": local_pki.create_ca(directory / "other")}


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "tokens"
    path.write_text("# role name sha256\n" + "".join(
        auth.token_line(role, name, token) + "\n" for name, (role, token) in TOKENS.items()))
    return path


def _serve(**settings):
    server, port = create_server(load_config(env={}, grpc_host="127.0.0.1", grpc_port=0,
                                             **settings), [register])
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def secure(pki, token_file):
    server, address = _serve(tls_cert=str(pki["server"].cert), tls_key=str(pki["server"].key),
                             auth_tokens=str(token_file))
    yield address
    server.stop(None)


def _call(address, security, method="LoadModel", streaming=False, timeout=10):
    with create_channel(address, security=security) as channel:
        if streaming:
            return list(channel.unary_stream(f"/{GENERATOR}/{method}")(b"", timeout=timeout))
        return channel.unary_unary(f"/{GENERATOR}/{method}")(b"", timeout=timeout)


def _refusal(address, security, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as error:
        _call(address, security, **kwargs)
    return error.value


def _as(pki, name) -> ClientSecurity:
    return ClientSecurity(tls_ca=str(pki["ca"].cert), token=TOKENS[name][1])


def test_operator_calls_anything_and_the_handler_knows_who(secure, pki):
    assert _call(secure, _as(pki, "root")) == b"operator:root"
    assert _call(secure, _as(pki, "root"), "Generate", streaming=True) == [b"operator:root"] * 2
    assert _call(secure, _as(pki, "kin"), "ListModels") == b"service:kin"


def test_a_user_may_not_load_models(secure, pki):
    error = _refusal(secure, _as(pki, "alice"))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "role 'user' (alice) may not call kinema4d.v1.GeneratorService/LoadModel" in error.details()
    error = _refusal(secure, _as(pki, "alice"), method="Generate", streaming=True)
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("token, reason", [("", "no token"), ("guess", "unknown or revoked token")])
def test_no_or_a_wrong_token_is_unauthenticated(secure, pki, token, reason):
    error = _refusal(secure, ClientSecurity(tls_ca=str(pki["ca"].cert), token=token))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert reason in error.details()


def test_health_is_open_and_reflection_needs_a_token(secure, pki):
    no_token = ClientSecurity(tls_ca=str(pki["ca"].cert))
    assert wait_healthy(secure, timeout_s=5, security=no_token)
    with create_channel(secure, security=no_token) as channel:
        assert check_health(channel, GENERATOR) == "SERVING"
    for security, code in ((no_token, grpc.StatusCode.UNAUTHENTICATED), (_as(pki, "alice"), None)):
        with create_channel(secure, security=security) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
                list_services="")]), timeout=10)
            if code is None:
                names = {s.name for s in next(responses).list_services_response.service}
                assert GENERATOR in names
            else:
                with pytest.raises(grpc.RpcError) as error:
                    next(responses)
                assert error.value.code() is code


def test_a_client_without_the_ca_fails_at_once_not_after_a_hang(secure, pki):
    for security in (ClientSecurity(token=TOKENS["root"][1]),  # plaintext to a TLS port
                     ClientSecurity(tls_ca=str(pki["other_ca"].cert), token=TOKENS["root"][1])):
        started = time.monotonic()
        error = _refusal(secure, security, timeout=30)
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 10
    assert not wait_healthy(secure, timeout_s=1, security=ClientSecurity())


def test_mutual_tls_needs_a_client_certificate(pki):
    server, address = _serve(tls_cert=str(pki["server"].cert), tls_key=str(pki["server"].key),
                             tls_client_ca=str(pki["ca"].cert))
    try:
        ca = str(pki["ca"].cert)
        assert _call(address, ClientSecurity(tls_ca=ca, cert=str(pki["client"].cert),
                                             key=str(pki["client"].key))) == b"anonymous"
        assert _refusal(address, ClientSecurity(tls_ca=ca)).code() is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None)


def test_without_settings_the_server_is_plaintext_and_open():
    server, address = _serve()
    try:
        assert _call(address, None) == b"anonymous"
    finally:
        server.stop(None)


def test_a_rotated_token_file_is_reloaded(tmp_path, pki, monkeypatch):
    monkeypatch.setattr(auth, "RELOAD_CHECK_S", 0.0)
    path = tmp_path / "tokens"
    path.write_text(auth.token_line("operator", "old", "old-token") + "\n")
    server, address = _serve(auth_tokens=str(path))
    try:
        assert _call(address, ClientSecurity(token="old-token")) == b"operator:old"
        path.write_text(auth.token_line("operator", "new", "new-token") + "\n")
        os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
        assert _call(address, ClientSecurity(token="new-token")) == b"operator:new"
        error = _refusal(address, ClientSecurity(token="old-token"))
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        path.write_text("not a token line\n")  # a broken edit keeps the last good tokens
        os.utime(path, ns=(time.time_ns() + 2 * 10**9,) * 2)
        assert _call(address, ClientSecurity(token="new-token")) == b"operator:new"
    finally:
        server.stop(None)


@pytest.mark.parametrize("text, message", [
    ("admin bob " + "a" * 64, "line 1: unknown role 'admin'"),
    ("user bob abc", "line 1: expected the token's sha256"),
    ("user bob", "line 1: expected ROLE NAME SHA256, got 2 fields"),
    ("user b/ob " + "a" * 64, "line 1: bad name 'b/ob'"),
    (f"user a {'a' * 64}\n\nuser b {'a' * 64}", "line 3: the same token twice"),
])
def test_a_malformed_token_file_names_the_line(text, message):
    with pytest.raises(InvalidArgument, match=message):
        auth.parse_token_file(text)


def test_token_hashes_only_and_constant_time_lookup():
    entries = auth.parse_token_file(auth.token_line("user", "alice", "s3cret"))
    assert "s3cret" not in repr(entries)
    assert auth.authenticate(entries, "s3cret") == auth.Caller("alice", "user")
    assert auth.authenticate(entries, None).startswith("no token")
    assert auth.bearer_token([("authorization", "Basic xyz")]) == ""


@pytest.mark.parametrize("settings, variable", [
    ({"K4D_TLS_CERT": "/c.pem"}, "K4D_TLS_KEY"),
    ({"K4D_TLS_CLIENT_CA": "/ca.pem"}, "K4D_TLS_CLIENT_CA"),
])
def test_incomplete_tls_settings_are_refused(settings, variable):
    with pytest.raises(InvalidArgument, match=variable):
        load_config(env=settings)


def test_unreadable_tls_files_name_the_setting(tmp_path):
    (tmp_path / "key.pem").write_text("not pem")
    with pytest.raises(InvalidArgument, match="K4D_TLS_CERT: cannot read"):
        _serve(tls_cert=str(tmp_path / "missing.pem"), tls_key=str(tmp_path / "key.pem"))
    with pytest.raises(InvalidArgument, match="K4D_TOKEN|--token-file: cannot read"):
        ClientSecurity.from_config(load_config(env={}), token_file=str(tmp_path / "nope"))


def test_health_service_needs_no_token_even_with_a_bad_one(secure, pki):
    security = ClientSecurity(tls_ca=str(pki["ca"].cert), token="wrong")
    with create_channel(secure, security=security) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                              timeout=5)
    assert response.status == health_pb2.HealthCheckResponse.SERVING
