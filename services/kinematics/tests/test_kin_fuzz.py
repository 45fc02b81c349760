"""Fuzz: thousands of malformed requests against a loopback KinematicsService.
No crash, no hang (every call answers within its deadline with a client-error code),
memory bounded, and the server still answers a good request afterwards."""

import io
import random
import resource
import zipfile

import grpc
import numpy as np
import pytest
from k4d.config import Config
from k4d.grpc_server import create_server
from k4d.store import LocalStore
from k4d_kinematics.server import register_service
from kinema4d.v1 import common_pb2, kinematics_pb2, kinematics_pb2_grpc

CLIENT_ERRORS = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED}
SERVICE = "/kinema4d.v1.KinematicsService/"
DTYPES = ["float64", "float32", "int32", "uint8", "bool", "complex64", "", "float16", "object",
          "<f8", "U3", "float64\x00"]
DIMS = [-1, 0, 1, 2, 3, 4, 7, 8, 16, 49, 2**31, 2**62]
NAMES = ["panda", "ur5", "xarm7", "so100", "widowx250s", "", "nope", "../../etc/passwd",
         "/tmp/x.urdf", "a" * 300, "PANDA", "panda\x00", "ü"]


def _tensor(rng: random.Random) -> common_pb2.TensorData:
    roll = rng.random()
    if roll < 0.1:
        return common_pb2.TensorData()  # neither inline nor ref
    if roll < 0.2:
        return common_pb2.TensorData(ref=common_pb2.TensorRef(
            uri=rng.choice(["", "file:///etc/passwd", "s3://x/y", "jobs/../x", "nope"]),
            sha256=rng.choice(["", "0" * 64, "zz"]), dtype=rng.choice(DTYPES),
            shape=[rng.choice(DIMS) for _ in range(rng.randint(0, 3))]))
    if roll < 0.6:  # well-formed bytes, awkward values and shapes
        shape = [rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9]) for _ in range(rng.randint(0, 3))]
        values = np.array([rng.choice([0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf, 1e308, 3.0])
                           for _ in range(int(np.prod(shape)))], dtype=np.float64).reshape(shape)
        return common_pb2.TensorData(inline=common_pb2.Tensor(
            dtype="float64", shape=shape, data=values.tobytes()))
    shape = [rng.choice(DIMS) for _ in range(rng.randint(0, 4))]
    data = rng.randbytes(rng.choice([0, 1, 7, 8, 64, 128, 1000]))
    return common_pb2.TensorData(inline=common_pb2.Tensor(dtype=rng.choice(DTYPES), shape=shape,
                                                          data=data))


def _robot(rng):
    if rng.random() < 0.2:
        return common_pb2.RobotRef(bundle_uri=rng.choice(["", "s3://b/robots/x/bundle",
                                                          "file:///etc/passwd", "robots/panda"]))
    return common_pb2.RobotRef(name=rng.choice(NAMES))


def _unary_request(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return "ForwardKinematics", kinematics_pb2.ForwardKinematicsRequest(
            robot=_robot(rng), joints=_tensor(rng), clip_to_limits=rng.random() < 0.5)
    if kind == 1:
        return "InverseKinematics", kinematics_pb2.InverseKinematicsRequest(
            robot=_robot(rng), targets=_tensor(rng), seed=_tensor(rng),
            link=rng.choice(["", "panda_link5", "nope"]), solver=rng.choice([0, 1, 2, 7]),
            position_tolerance_m=rng.choice([0.0, -1.0, 1e-4, float("nan")]),
            rotation_tolerance_rad=rng.choice([0.0, float("inf"), 1e-3]),
            trajectory=rng.random() < 0.5)
    if kind == 2:
        return "SolveTrajectory", kinematics_pb2.SolveTrajectoryRequest(
            robot=_robot(rng), num_frames=rng.choice([0, 1, 49, 10**6]),
            clip_to_limits=rng.random() < 0.5, actions=kinematics_pb2.ActionSequence(
                type=rng.choice([0, 1, 2, 3, 4, 5, 9]), frame=rng.choice([0, 1, 2, 5]),
                rotation=rng.choice([0, 1, 2, 3]), values=_tensor(rng), gripper=_tensor(rng),
                dt_s=rng.choice([0.0, -1.0, 0.1, float("nan"), 1e300]),
                preset=rng.choice(["", "droid", "bridge", "libero", "rt1"]),
                initial_joints=_tensor(rng), link=rng.choice(["", "nope", "panda_hand"])))
    if kind == 3:
        return "DescribeRobot", kinematics_pb2.DescribeRobotRequest(robot=_robot(rng))
    return "ListRobots", kinematics_pb2.ListRobotsRequest()


def _register_messages(rng):
    messages = []
    if rng.random() < 0.8:
        messages.append(kinematics_pb2.RegisterRobotRequest(header=kinematics_pb2.RegisterRobotHeader(
            name=rng.choice(NAMES + ["bot", "bot2"]), urdf_path=rng.choice(["", "x.urdf", "../x",
                                                                           "a.xacro"]),
            format=rng.choice(["", "zip", "tar", "rar"]), ee_link=rng.choice(["", "b", "zz"]))))
    payload = rng.randbytes(rng.randint(0, 2000))
    if rng.random() < 0.4:  # a real zip with a broken or odd URDF
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as zf:
            zf.writestr(rng.choice(["r.urdf", "../r.urdf", "a/r.urdf"]),
                        rng.choice(["<robot name='bot'><link name='a'/></robot>", "<robot>",
                                    "<!DOCTYPE x [<!ENTITY a 'b'>]><robot/>", payload.hex()]))
        payload = buffer.getvalue()
    cut = rng.randint(0, len(payload))
    messages += [kinematics_pb2.RegisterRobotRequest(chunk=payload[:cut]),
                 kinematics_pb2.RegisterRobotRequest(chunk=payload[cut:])]
    if rng.random() < 0.1:
        messages.insert(1, messages[0])  # a second header
    return messages


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def channel(tmp_path):
    config = Config(grpc_host="127.0.0.1", grpc_port=0)
    store = LocalStore(tmp_path / "store")
    server, port = create_server(config, [lambda s, c: register_service(s, c, store=store)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    server.stop(0)


def _fuzz(channel, count: int, seed: int) -> dict:
    rng = random.Random(seed)
    stub = kinematics_pb2_grpc.KinematicsServiceStub(channel)
    raw = {name: channel.unary_unary(SERVICE + name) for name in
           ("ForwardKinematics", "InverseKinematics", "SolveTrajectory", "DescribeRobot")}
    codes: dict = {}
    for _ in range(count):
        roll = rng.random()
        try:
            if roll < 0.15:  # bytes that are not (or barely) a protobuf message
                raw[rng.choice(sorted(raw))](rng.randbytes(rng.randint(0, 300)), timeout=10)
            elif roll < 0.25:
                stub.RegisterRobot(iter(_register_messages(rng)), timeout=10)
            else:
                name, request = _unary_request(rng)
                getattr(stub, name)(request, timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
            if roll >= 0.15:  # raw garbage may fail to deserialize (INTERNAL from grpc itself)
                assert code in CLIENT_ERRORS, (code, exc.details())
            assert code != grpc.StatusCode.DEADLINE_EXCEEDED
        codes[code] = codes.get(code, 0) + 1
    return codes


def _assert_still_serving(channel):
    stub = kinematics_pb2_grpc.KinematicsServiceStub(channel)
    q = np.zeros((1, 8))
    q[0, 3] = -1.0
    response = stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
        robot=common_pb2.RobotRef(name="panda"), joints=common_pb2.TensorData(
            inline=common_pb2.Tensor(dtype="float64", shape=[1, 8], data=q.tobytes()))), timeout=10)
    assert list(response.poses.inline.shape) == [1, 13, 4, 4]


def test_thousands_of_malformed_requests(channel):
    _fuzz(channel, 300, seed=0)  # warm-up: robot caches, thread pool
    before = _rss_mib()
    codes = _fuzz(channel, 2000, seed=1)
    grown = _rss_mib() - before
    assert sum(codes.values()) == 2000
    assert codes.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > 1000  # the fuzzer does reach checks
    assert grown < 150, f"peak RSS grew by {grown:.0f} MiB"
    _assert_still_serving(channel)


@pytest.mark.slow
def test_many_more_malformed_requests(channel):
    _fuzz(channel, 20000, seed=2)
    _assert_still_serving(channel)
