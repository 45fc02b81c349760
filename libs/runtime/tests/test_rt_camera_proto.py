"""k4d.camera_proto: one converter pair, one behaviour for optional fields, proto paths."""

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.camera_proto import camera_from_proto, camera_to_proto, camera_violations
from k4d.errors import InvalidArgument
from kinema4d.v1 import common_pb2

POSE = np.array([[1, 0, 0, 0.1], [0, 0, -1, 0.2], [0, 1, 0, 1.5], [0, 0, 0, 1]], float)


def camera(**kw):
    args = dict(width=64, height=48, fx=50.0, fy=51.0, cx=31.5, cy=23.5, T_cam_from_world=POSE)
    args.update(kw)
    return Camera(**args)


@pytest.mark.parametrize("extra", [{}, {"distortion": (0.1, -0.02, 0.001, 0.0, 0.003)},
                                   {"T_world_from_base": np.linalg.inv(POSE)}])
def test_round_trip(extra):
    cam = camera(**extra)
    back = camera_from_proto(camera_to_proto(cam))
    for name in ("width", "height", "fx", "fy", "cx", "cy"):
        assert getattr(back, name) == getattr(cam, name)
    np.testing.assert_array_equal(back.T_cam_from_world, cam.T_cam_from_world)
    assert (back.T_world_from_base is None) == (cam.T_world_from_base is None)
    if cam.T_world_from_base is not None:
        np.testing.assert_array_equal(back.T_world_from_base, cam.T_world_from_base)
    assert tuple(back.distortion or ()) == tuple(cam.distortion or ())
    assert camera_violations(camera_to_proto(cam)) == []


def test_optional_fields_absent_or_empty_mean_the_same():
    msg = camera_to_proto(camera())
    with_empty = common_pb2.CameraModel()
    with_empty.CopyFrom(msg)
    with_empty.t_world_from_base.SetInParent()  # present, 0 values
    assert camera_from_proto(with_empty).T_world_from_base is None
    assert camera_from_proto(msg).T_world_from_base is None


def _fields(msg, field="camera"):
    return {v.field for v in camera_violations(msg, field)}


def test_violations_are_named_by_proto_path():
    good = camera_to_proto(camera())
    msg = common_pb2.CameraModel()
    msg.CopyFrom(good)
    msg.intrinsics.fx = -1
    msg.t_cam_from_world.values[0] = 2.0
    assert _fields(msg, "spec.camera") == {"spec.camera.intrinsics.fx", "spec.camera.t_cam_from_world"}
    msg.CopyFrom(good)
    msg.ClearField("intrinsics")
    assert _fields(msg) == {"camera.intrinsics"}
    msg.CopyFrom(good)
    msg.ClearField("t_cam_from_world")
    assert _fields(msg) == {"camera.t_cam_from_world"}
    msg.t_cam_from_world.SetInParent()
    assert _fields(msg) == {"camera.t_cam_from_world"}
    msg.CopyFrom(good)
    del msg.t_world_from_base.values[:]
    msg.t_world_from_base.values.extend([1.0] * 9)
    assert _fields(msg) == {"camera.t_world_from_base"}
    msg.CopyFrom(good)
    msg.intrinsics.distortion.extend([0.1, 0.2])
    assert _fields(msg) == {"camera.intrinsics.distortion"}
    msg.CopyFrom(good)
    msg.intrinsics.width = 0
    with pytest.raises(InvalidArgument, match="intrinsics.width"):
        camera_from_proto(msg)

