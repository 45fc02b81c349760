"""PolicyService on a real loopback server: the same policy in-process and over gRPC, bad
requests, and the unreachable / slow server cases (not evaluated, naming the address)."""

from __future__ import annotations

import socket
import time

import grpc
import numpy as np
import pytest
from k4d.camera import Camera


@pytest.fixture
def served():
    from k4d_policy.server import create_policy_server

    server, port = create_policy_server("expert", 0)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def _context(sc, bundle, obs):
    from k4d_policy.policies import EpisodeContext

    return EpisodeContext(sc.episode_id, sc.plan.text, sc.task, "panda", list(bundle.robot.joint_names),
                          Camera.from_dict(sc.camera_json), 0.5, 6, 12, obs, seed=5)


@pytest.fixture(scope="module")
def first_obs(pick_scene, bundle):
    from k4d_policy.worlds import PhysicsWorld

    world = PhysicsWorld(pick_scene, bundle, 0.5)
    obs = world.reset()
    world.close()
    return obs


def test_policy_grpc_gives_the_in_process_chunk(served, pick_scene, bundle, first_obs):
    from k4d_policy.policies import make_policy
    from k4d_policy.remote import GrpcPolicy

    local, remote = make_policy("expert"), GrpcPolicy(f"grpc://{served}", timeout_s=30)
    for p in (local, remote):
        p.reset(_context(pick_scene, bundle, first_obs))
    a, b = local.act(first_obs), remote.act(first_obs)
    remote.close()
    assert b.shape == (6, 8)
    np.testing.assert_allclose(a, b)
    assert remote.served_name == "expert"


def test_policy_grpc_bad_requests_are_client_errors(served, pick_scene, bundle, first_obs):
    from google.rpc import error_details_pb2, status_pb2  # noqa: F401 - BadRequest details
    from k4d.grpc_client import create_channel, field_violations
    from k4d_policy.remote import context_to_proto, observation_to_proto
    from kinema4d.v1 import policy_pb2, policy_pb2_grpc

    stub = policy_pb2_grpc.PolicyServiceStub(create_channel(served))
    request = context_to_proto(_context(pick_scene, bundle, first_obs))
    request.dt_s = -1.0
    del request.observation.joint_positions[3:]
    with pytest.raises(grpc.RpcError) as err:
        stub.Reset(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field for v in field_violations(err.value)}
    assert {"dt_s", "observation.joint_positions"} <= fields
    with pytest.raises(grpc.RpcError) as err:
        stub.Act(policy_pb2.ActRequest(episode_id="never-reset", observation=observation_to_proto(first_obs)),
                 timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_policy_grpc_server_survives_hostile_requests(served):
    from k4d.testing.fuzz import fuzz_server

    fuzz_server(served, calls_per_method=15).assert_clean()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_policy_unreachable_server_is_not_evaluated_naming_the_address(pick_scene, bundle):
    from k4d_policy.remote import GrpcPolicy
    from k4d_policy.runner import run_episode
    from k4d_policy.worlds import PhysicsWorld

    address = f"127.0.0.1:{_closed_port()}"
    ctx = _context(pick_scene, bundle, None)
    out = run_episode(GrpcPolicy(address, timeout_s=2), PhysicsWorld(pick_scene, bundle, 0.5), ctx)
    assert out.status == "not_evaluated" and out.success is None
    assert address in out.error


def test_policy_slow_server_times_out_naming_the_address(pick_scene, bundle):
    from k4d.config import load_config
    from k4d.grpc_server import create_server
    from k4d_policy.api import PolicyServicer
    from k4d_policy.policies import make_policy
    from k4d_policy.remote import GrpcPolicy
    from k4d_policy.runner import run_episode
    from k4d_policy.worlds import PhysicsWorld
    from kinema4d.v1 import policy_pb2_grpc

    class Slow:
        name = "slow"

        def __init__(self):
            self.inner = make_policy("expert")

        def reset(self, ctx):
            self.inner.reset(ctx)

        def act(self, obs):
            time.sleep(3.0)
            return self.inner.act(obs)

    def register(server, config):
        policy_pb2_grpc.add_PolicyServiceServicer_to_server(PolicyServicer(Slow, "slow"), server)
        return ["kinema4d.v1.PolicyService"]

    server, port = create_server(load_config(grpc_port=0, grpc_host="127.0.0.1", metrics_port=0), [register])
    server.start()
    try:
        started = time.perf_counter()
        out = run_episode(GrpcPolicy(f"127.0.0.1:{port}", timeout_s=0.5), PhysicsWorld(pick_scene, bundle, 0.5),
                          _context(pick_scene, bundle, None))
        assert time.perf_counter() - started < 10
    finally:
        server.stop(0)
    assert out.status == "not_evaluated"
    assert f"127.0.0.1:{port}" in out.error and "within 0.5 s" in out.error


def test_policy_serve_command_serves_until_sigterm(pick_scene, bundle, first_obs):
    """`k4d policy serve expert --port 0`: prints its address, answers health and Act, exits
    0 on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys

    from k4d.grpc_client import wait_healthy
    from k4d_policy.remote import GrpcPolicy

    proc = subprocess.Popen([sys.executable, "-m", "k4d.cli.main", "policy", "serve", "expert", "--port", "0",
                             "--host", "127.0.0.1"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        address = line.rsplit(" ", 1)[-1].strip()
        assert address.startswith("127.0.0.1:"), line
        wait_healthy(address, "kinema4d.v1.PolicyService", timeout_s=60)
        policy = GrpcPolicy(address, timeout_s=30)
        policy.reset(_context(pick_scene, bundle, first_obs))
        assert policy.act(first_obs).shape == (6, 8)
        policy.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_policy_grpc_malformed_chunks_name_the_server_and_step(pick_scene, bundle):
    """A server answering NaN, or bytes that do not match the tensor's shape: the episode is
    malformed with one line naming the policy (its address) and the step."""
    from k4d.config import load_config
    from k4d.grpc_server import create_server
    from k4d_policy.remote import GrpcPolicy
    from k4d_policy.runner import run_episode
    from k4d_policy.worlds import PhysicsWorld
    from kinema4d.v1 import common_pb2, policy_pb2, policy_pb2_grpc

    class Broken(policy_pb2_grpc.PolicyServiceServicer):
        def __init__(self, data: bytes):
            self.data = data

        def Reset(self, request, context):
            return policy_pb2.ResetResponse(policy_name="broken")

        def Act(self, request, context):
            return policy_pb2.ActResponse(actions=common_pb2.Tensor(dtype="float64", shape=[6, 8], data=self.data))

    for data, words in ((np.full((6, 8), np.nan).tobytes(), "NaN"), (b"abc", "undecodable action tensor")):
        def register(server, config, data=data):
            policy_pb2_grpc.add_PolicyServiceServicer_to_server(Broken(data), server)
            return ["kinema4d.v1.PolicyService"]

        server, port = create_server(load_config(grpc_port=0, grpc_host="127.0.0.1", metrics_port=0), [register])
        server.start()
        try:
            out = run_episode(GrpcPolicy(f"127.0.0.1:{port}", timeout_s=10), PhysicsWorld(pick_scene, bundle, 0.5),
                              _context(pick_scene, bundle, None))
        finally:
            server.stop(0)
        assert out.status == "malformed" and words in out.error
        assert f"'grpc://127.0.0.1:{port}' at step 0" in out.error


def test_policy_server_with_tls_and_tokens_takes_services_not_users(tmp_path, pick_scene, bundle,
                                                                      first_obs):
    """Issue 47: a PolicyService behind TLS and a token file; the `service` role (policy
    evaluation) may Reset/Act, a `user` token is refused with the reason."""
    from k4d import auth, local_pki
    from k4d.config import load_config
    from k4d.grpc_client import ClientSecurity
    from k4d.grpc_server import create_server
    from k4d_policy.remote import GrpcPolicy
    from k4d_policy.runner import PolicyUnavailable
    from k4d_policy.server import policy_register_fn

    ca = local_pki.create_ca(tmp_path)
    cert = local_pki.issue(ca, tmp_path, "server")
    tokens = tmp_path / "tokens"
    tokens.write_text(auth.token_line("service", "policy-eval", "svc") + "\n"
                      + auth.token_line("user", "alice", "usr") + "\n")
    server, port = create_server(load_config(
        env={}, grpc_port=0, tls_cert=str(cert.cert), tls_key=str(cert.key),
        auth_tokens=str(tokens)), [policy_register_fn("expert")])
    server.start()
    try:
        as_service = GrpcPolicy(f"127.0.0.1:{port}", timeout_s=30,
                                security=ClientSecurity(tls_ca=str(ca.cert), token="svc"))
        as_service.reset(_context(pick_scene, bundle, first_obs))
        assert as_service.act(first_obs).shape == (6, 8)
        as_service.close()
        as_user = GrpcPolicy(f"127.0.0.1:{port}", timeout_s=30,
                             security=ClientSecurity(tls_ca=str(ca.cert), token="usr"))
        with pytest.raises(PolicyUnavailable, match="PERMISSION_DENIED.*role 'user' \\(alice\\)"):
            as_user.reset(_context(pick_scene, bundle, first_obs))
        as_user.close()
    finally:
        server.stop(0)
