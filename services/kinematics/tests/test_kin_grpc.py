"""KinematicsService over a real loopback gRPC server (port 0): every RPC, error codes
with field violations, large results by reference."""

import io
import zipfile

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from k4d.config import Config
from k4d.grpc_server import create_server
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.store import LocalStore, from_tensor_data
from k4d.tensor_io import to_tensor
from k4d_kinematics.server import register_service
from kinema4d.v1 import common_pb2, kinematics_pb2, kinematics_pb2_grpc


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "store")


@pytest.fixture
def stub(store):
    config = Config(grpc_host="127.0.0.1", grpc_port=0, inline_limit_bytes=64 * 1024)
    server, port = create_server(config, [lambda s, c: register_service(s, c, store=store)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield kinematics_pb2_grpc.KinematicsServiceStub(channel)
    channel.close()
    server.stop(0)


def _data(array):
    return common_pb2.TensorData(inline=to_tensor(np.ascontiguousarray(array)))


def _panda():
    return common_pb2.RobotRef(name="panda")


def _violations(error: grpc.RpcError):
    status = rpc_status.from_call(error)
    detail = error_details_pb2.BadRequest()
    status.details[0].Unpack(detail)
    return [(v.field, v.description) for v in detail.field_violations]


def test_list_and_describe(stub):
    names = [r.name for r in stub.ListRobots(kinematics_pb2.ListRobotsRequest()).robots]
    assert names[:5] == ["panda", "ur5", "xarm7", "so100", "widowx250s"]
    description = stub.DescribeRobot(kinematics_pb2.DescribeRobotRequest(robot=_panda())).description
    assert description.ee_link == "panda_hand_tcp" and len(description.joint_names) == 8
    with pytest.raises(grpc.RpcError) as info:
        stub.DescribeRobot(kinematics_pb2.DescribeRobotRequest(
            robot=common_pb2.RobotRef(name="nope")))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_forward_kinematics_inline_and_by_reference(stub, store):
    model = load_robot("panda")
    q = np.random.default_rng(0).uniform(model.lower, model.upper, (3, 8))
    response = stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
        robot=_panda(), joints=_data(q)))
    assert response.poses.WhichOneof("kind") == "inline"
    np.testing.assert_array_equal(from_tensor_data(response.poses), forward_kinematics(model, q))
    big = np.tile(q, (40, 1))  # 120 x 13 x 16 doubles > the 64 KiB inline limit of the test
    response = stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
        robot=_panda(), joints=_data(big)))
    assert response.poses.WhichOneof("kind") == "ref"
    np.testing.assert_array_equal(from_tensor_data(response.poses, store),
                                  forward_kinematics(model, big))


def test_forward_kinematics_rejects_out_of_limit_joints_with_field(stub):
    with pytest.raises(grpc.RpcError) as info:
        stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
            robot=_panda(), joints=_data(np.zeros((2, 8)))))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(info.value)[0][0] == "joints[0][3]"
    clipped = stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
        robot=_panda(), joints=_data(np.zeros((2, 8))), clip_to_limits=True))
    assert from_tensor_data(clipped.poses).shape == (2, 13, 4, 4)


def test_inverse_kinematics_reports_each_frame(stub):
    model = load_robot("panda")
    q = np.random.default_rng(1).uniform(model.lower, model.upper, (4, 8))
    targets = forward_kinematics(model, q)[:, model.link_index("panda_hand_tcp")]
    targets[2, :3, 3] = [3.0, 0, 0]  # unreachable
    response = stub.InverseKinematics(kinematics_pb2.InverseKinematicsRequest(
        robot=_panda(), targets=_data(targets)))
    assert list(response.success) == [True, True, False, True]
    assert response.position_error_m[2] > 1.0
    joints = from_tensor_data(response.joints)
    assert np.all(joints >= model.lower) and np.all(joints <= model.upper)
    with pytest.raises(grpc.RpcError) as info:
        stub.InverseKinematics(kinematics_pb2.InverseKinematicsRequest(
            robot=_panda(), targets=_data(targets[:1]), solver=99))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(info.value)[0][0] == "solver"


def test_solve_trajectory_with_preset(stub):
    steps = np.array([[0.1, 0, 0, 0, 0, 0.1]] * 8)
    response = stub.SolveTrajectory(kinematics_pb2.SolveTrajectoryRequest(
        robot=_panda(), num_frames=9, actions=kinematics_pb2.ActionSequence(
            preset="libero", rotation=kinematics_pb2.ROTATION_FORMAT_EULER_XYZ,
            values=_data(steps), gripper=_data(np.linspace(1, 0, 8)))))
    assert all(response.success) and len(response.success) == 9
    assert from_tensor_data(response.joints).shape == (9, 8)
    with pytest.raises(grpc.RpcError) as info:
        stub.SolveTrajectory(kinematics_pb2.SolveTrajectoryRequest(
            robot=_panda(), actions=kinematics_pb2.ActionSequence(
                type=kinematics_pb2.ACTION_TYPE_EE_ABSOLUTE, values=_data(np.zeros((3, 5))))))
    assert _violations(info.value)[0][0] == "actions.values"
    for enum_field in ("type", "frame", "rotation"):  # proto3 enums are open: 99 arrives
        with pytest.raises(grpc.RpcError) as info:
            stub.SolveTrajectory(kinematics_pb2.SolveTrajectoryRequest(
                robot=_panda(), actions=kinematics_pb2.ActionSequence(
                    preset="libero", values=_data(steps), **{enum_field: 99})))
        assert _violations(info.value)[0][0] == f"actions.{enum_field}"


def _bundle_bytes(urdf):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("bot/bot.urdf", urdf)
    return buffer.getvalue()


GOOD = ('<robot name="bot"><link name="a"/><link name="b"/><joint name="j" type="revolute">'
        '<parent link="a"/><child link="b"/><limit lower="-1" upper="1"/></joint></robot>')


def test_register_robot_stream_then_use_it(stub):
    data = _bundle_bytes(GOOD)
    messages = [kinematics_pb2.RegisterRobotRequest(header=kinematics_pb2.RegisterRobotHeader(
        name="bot", format="zip"))] + [kinematics_pb2.RegisterRobotRequest(chunk=data[i:i + 100])
                                       for i in range(0, len(data), 100)]
    response = stub.RegisterRobot(iter(messages))
    assert response.description.joint_names == ["j"] and len(response.sha256) == 64
    fk = stub.ForwardKinematics(kinematics_pb2.ForwardKinematicsRequest(
        robot=common_pb2.RobotRef(name="bot"), joints=_data(np.array([[0.5]]))))
    assert from_tensor_data(fk.poses).shape == (1, 2, 4, 4)
    by_uri = stub.DescribeRobot(kinematics_pb2.DescribeRobotRequest(
        robot=common_pb2.RobotRef(bundle_uri=response.bundle_uri)))
    assert by_uri.description.link_names == ["a", "b"]


@pytest.mark.parametrize("messages, field", [
    ([kinematics_pb2.RegisterRobotRequest(chunk=b"x")], "header"),
    ([kinematics_pb2.RegisterRobotRequest(header=kinematics_pb2.RegisterRobotHeader(name="x"))],
     "chunk"),
    ([kinematics_pb2.RegisterRobotRequest(header=kinematics_pb2.RegisterRobotHeader(name="x")),
      kinematics_pb2.RegisterRobotRequest(chunk=b"garbage")], "bundle"),
    ([kinematics_pb2.RegisterRobotRequest(header=kinematics_pb2.RegisterRobotHeader(name="panda")),
      kinematics_pb2.RegisterRobotRequest(chunk=_bundle_bytes(GOOD))], "name"),
])
def test_register_robot_rejects_bad_uploads(stub, messages, field):
    with pytest.raises(grpc.RpcError) as info:
        stub.RegisterRobot(iter(messages))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(info.value)[0][0] == field
