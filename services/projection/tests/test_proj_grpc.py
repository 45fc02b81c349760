"""ProjectionService over a real loopback gRPC server (port 0): RenderRobot (joints and
poses, refs for large outputs, job keys), EncodePointmap/DecodePointmap, error codes."""

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from k4d import pointmap_codec
from k4d.camera import Camera
from k4d.camera_proto import camera_from_proto, camera_to_proto
from k4d.config import Config
from k4d.grpc_server import create_server
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.store import LocalStore, from_tensor_data
from k4d.tensor_io import to_tensor
from k4d_projection.renderer import RobotRenderer
from k4d_projection.server import register_service
from kinema4d.v1 import common_pb2, projection_pb2, projection_pb2_grpc


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "store")


@pytest.fixture
def stub(store):
    config = Config(grpc_host="127.0.0.1", grpc_port=0, inline_limit_bytes=32 * 1024)
    server, port = create_server(config, [lambda s, c: register_service(s, c, store=store)])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield projection_pb2_grpc.ProjectionServiceStub(channel)
    channel.close()
    server.stop(0)


CAMERA = Camera.look_at([1.3, 0.8, 0.9], [0.0, 0.0, 0.4], width=64, height=48, fovy_deg=60)


def _data(array):
    return common_pb2.TensorData(inline=to_tensor(np.ascontiguousarray(array)))


def _joints(frames=2):
    model = load_robot("panda")
    return np.tile((model.lower + model.upper) / 2, (frames, 1))


def _violations(error: grpc.RpcError):
    status = rpc_status.from_call(error)
    detail = error_details_pb2.BadRequest()
    status.details[0].Unpack(detail)
    return [v.field for v in detail.field_violations]


def test_camera_proto_round_trip():
    cam = Camera(width=64, height=48, fx=50, fy=52, cx=31, cy=24, distortion=(0.1, 0, 0, 0, 0),
                 T_cam_from_world=CAMERA.T_cam_from_world, T_world_from_base=np.eye(4))
    assert camera_from_proto(camera_to_proto(cam)).to_dict() == cam.to_dict()


def test_render_robot_from_joints_matches_the_core(stub, store):
    request = projection_pb2.RenderRobotRequest(
        robot=common_pb2.RobotRef(name="panda"), joints=_data(_joints()),
        camera=camera_to_proto(CAMERA), job_id="job-7")
    response = stub.RenderRobot(request)
    model = load_robot("panda")
    expected = RobotRenderer.from_robot(model).render(forward_kinematics(model, _joints()), CAMERA)
    assert list(response.link_names) == model.link_names
    assert response.pointmap.WhichOneof("kind") == "ref"  # 2*48*64*12 bytes > inline limit
    assert response.pointmap.ref.uri.endswith("jobs/job-7/projection/pointmap")
    for field, name in (("depth", "depth"), ("pointmap", "pointmap"), ("mask", "mask"),
                        ("link_id", "link_id"), ("rgb", "rgb")):
        np.testing.assert_array_equal(from_tensor_data(getattr(response, field), store),
                                      getattr(expected, name))
    assert not response.HasField("normals") and not response.HasField("world_pointmap")


def test_render_robot_from_poses_with_selected_outputs(stub, store):
    model = load_robot("panda")
    poses = forward_kinematics(model, _joints(1))
    response = stub.RenderRobot(projection_pb2.RenderRobotRequest(
        robot=common_pb2.RobotRef(name="panda"), poses=_data(poses),
        camera=camera_to_proto(CAMERA), geometry=projection_pb2.GEOMETRY_SET_COLLISION,
        outputs=[projection_pb2.RENDER_OUTPUT_MASK, projection_pb2.RENDER_OUTPUT_NORMALS,
                 projection_pb2.RENDER_OUTPUT_WORLD_POINTMAP]))
    mask = from_tensor_data(response.mask, store)
    normals = from_tensor_data(response.normals, store)
    assert mask.shape == (1, 48, 64) and mask.sum() > 50
    np.testing.assert_allclose(np.linalg.norm(normals[mask], axis=-1), 1.0, atol=1e-5)
    assert response.HasField("world_pointmap") and not response.HasField("depth")


@pytest.mark.parametrize("mutate, code, field", [
    (lambda r: r.ClearField("joints"), grpc.StatusCode.INVALID_ARGUMENT, "poses"),
    (lambda r: r.poses.CopyFrom(_data(np.zeros((1, 13, 4, 4)))),
     grpc.StatusCode.INVALID_ARGUMENT, "poses"),
    (lambda r: r.joints.CopyFrom(_data(np.zeros((2, 3)))), grpc.StatusCode.INVALID_ARGUMENT,
     "joints"),
    (lambda r: setattr(r.camera.intrinsics, "fx", -1.0), grpc.StatusCode.INVALID_ARGUMENT,
     "camera.intrinsics.fx"),
    (lambda r: r.camera.t_cam_from_world.values.__setitem__(0, 2.0),
     grpc.StatusCode.INVALID_ARGUMENT, "camera.t_cam_from_world"),
    (lambda r: r.robot.CopyFrom(common_pb2.RobotRef(name="nope")), grpc.StatusCode.NOT_FOUND,
     None),
    (lambda r: r.robot.CopyFrom(common_pb2.RobotRef(bundle_uri="s3://elsewhere/robot")),
     grpc.StatusCode.INVALID_ARGUMENT, "robot.bundle_uri"),
    (lambda r: r.outputs.append(projection_pb2.RENDER_OUTPUT_UNSPECIFIED),
     grpc.StatusCode.INVALID_ARGUMENT, "outputs"),
    (lambda r: (setattr(r.camera.intrinsics, "width", 8000),
                setattr(r.camera.intrinsics, "height", 8000),
                r.joints.CopyFrom(_data(_joints(49)))),
     grpc.StatusCode.RESOURCE_EXHAUSTED, None),
])
def test_render_robot_errors(stub, mutate, code, field):
    request = projection_pb2.RenderRobotRequest(
        robot=common_pb2.RobotRef(name="panda"), joints=_data(_joints()),
        camera=camera_to_proto(CAMERA))
    mutate(request)
    with pytest.raises(grpc.RpcError) as info:
        stub.RenderRobot(request)
    assert info.value.code() == code, info.value.details()
    if field:
        assert field in _violations(info.value)


def test_encode_decode_round_trip(stub, store):
    rng = np.random.default_rng(0)
    pointmap = rng.normal([0, 0, 1.5], 0.2, (2, 16, 20, 3)).astype(np.float32)
    mask = rng.random((2, 16, 20)) < 0.5
    pointmap[~mask] = 0
    for encoding, dtype in ((projection_pb2.POINTMAP_ENCODING_KINEMA4D_8BIT, np.uint8),
                            (projection_pb2.POINTMAP_ENCODING_FLOAT16, np.float16),
                            (projection_pb2.POINTMAP_ENCODING_FLOAT32, np.float32)):
        enc = stub.EncodePointmap(projection_pb2.EncodePointmapRequest(
            pointmap=_data(pointmap), mask=_data(mask), encoding=encoding))
        values = from_tensor_data(enc.encoded, store)
        assert values.dtype == dtype
        expected = pointmap_codec.decode(pointmap_codec.encode_8bit(pointmap, mask)) if dtype == np.uint8 \
            else pointmap
        dec = stub.DecodePointmap(projection_pb2.DecodePointmapRequest(
            encoded=enc.encoded, normalization=enc.normalization, encoding=encoding))
        decoded = from_tensor_data(dec.pointmap, store)
        tolerance = 1e-6 if dtype == np.uint8 else (5e-4 if dtype == np.float16 else 0)
        np.testing.assert_allclose(decoded[mask], expected[mask], atol=tolerance)
        assert np.all(decoded[~mask] == 0)


def test_encode_decode_errors(stub):
    pointmap = np.zeros((1, 4, 4, 3), np.float32)
    with pytest.raises(grpc.RpcError) as info:
        stub.EncodePointmap(projection_pb2.EncodePointmapRequest(
            pointmap=_data(pointmap), mask=_data(np.zeros((1, 4, 5), bool)),
            encoding=projection_pb2.POINTMAP_ENCODING_KINEMA4D_8BIT))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mask" in _violations(info.value)
    with pytest.raises(grpc.RpcError) as info:
        stub.DecodePointmap(projection_pb2.DecodePointmapRequest(
            encoded=_data(np.zeros((1, 4, 4, 3), np.uint8)),
            encoding=projection_pb2.POINTMAP_ENCODING_FLOAT32))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.DecodePointmap(projection_pb2.DecodePointmapRequest(
            encoded=_data(np.zeros((1, 4, 4, 3), np.uint8)),
            encoding=projection_pb2.POINTMAP_ENCODING_KINEMA4D_8BIT,
            normalization=projection_pb2.PointmapNormalization(
                centers=_data(np.zeros((1, 3))), scales=_data(np.zeros(1)))))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "normalization.scales" in _violations(info.value)
