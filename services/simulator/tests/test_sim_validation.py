"""SimulationSpec validation: every violation reported with its field path."""

import json
from pathlib import Path

import numpy as np
import pytest
from k4d.camera_proto import camera_from_proto, camera_to_proto
from k4d.errors import InvalidArgument
from k4d.tensor_io import to_tensor
from k4d_simulator.validation import validate_spec
from kinema4d.v1 import common_pb2, kinematics_pb2, simulator_pb2

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "panda_pick"


def _camera_proto(width=720, height=480):
    msg = common_pb2.CameraModel(intrinsics=common_pb2.CameraIntrinsics(
        width=width, height=height, fx=500, fy=500, cx=(width - 1) / 2, cy=(height - 1) / 2))
    msg.t_cam_from_world.values.extend(np.eye(4).reshape(-1))
    return msg


def _spec(**overrides):
    values = np.zeros((5, 7), np.float64)
    values[:, 6] = 1.0
    spec = simulator_pb2.SimulationSpec(
        robot=common_pb2.RobotRef(name="panda"),
        actions=kinematics_pb2.ActionSequence(
            type=kinematics_pb2.ACTION_TYPE_EE_ABSOLUTE,
            rotation=kinematics_pb2.ROTATION_FORMAT_QUATERNION_XYZW,
            values=common_pb2.TensorData(inline=to_tensor(values)),
            gripper=common_pb2.TensorData(inline=to_tensor(np.linspace(0, 1, 5)))),
        camera=_camera_proto(),
        initial_image=common_pb2.TensorData(inline=to_tensor(np.zeros((480, 720, 3), np.uint8))))
    for name, value in overrides.items():
        if value is None:
            spec.ClearField(name)
        else:
            getattr(spec, name).CopyFrom(value)
    return spec


def _fields(spec) -> dict[str, str]:
    with pytest.raises(InvalidArgument) as exc:
        validate_spec(spec)
    return {v.field: v.description for v in exc.value.violations}


def test_valid_spec_passes():
    validate_spec(_spec())


def test_missing_parts_are_all_reported_at_once():
    fields = _fields(simulator_pb2.SimulationSpec())
    assert set(fields) == {"spec.robot", "spec.actions", "spec.camera", "spec.initial_image"}


def test_bad_camera_is_named_by_proto_path():
    camera = _camera_proto()
    camera.intrinsics.fx = -1
    camera.t_cam_from_world.values[0] = 2.0  # not a rotation any more
    fields = _fields(_spec(camera=camera))
    assert "spec.camera.intrinsics.fx" in fields and "spec.camera.t_cam_from_world" in fields


def test_image_size_must_match_camera():
    fields = _fields(_spec(camera=_camera_proto(width=640, height=480)))
    assert "must match" in fields["spec.initial_image"]


def test_empty_and_non_finite_actions():
    spec = _spec()
    spec.actions.values.inline.CopyFrom(to_tensor(np.zeros((0, 7))))
    assert "non-empty" in _fields(spec)["spec.actions.values"]
    values = np.zeros((4, 7))
    values[2, 3] = np.nan
    spec.actions.values.inline.CopyFrom(to_tensor(values))
    spec.actions.gripper.inline.CopyFrom(to_tensor(np.linspace(0, 1, 4)))
    assert "not finite" in _fields(spec)["spec.actions.values[2][3]"]


def test_action_shape_gripper_and_sampling_checks():
    spec = _spec()
    spec.actions.values.inline.CopyFrom(to_tensor(np.zeros((5, 6))))
    spec.actions.gripper.inline.CopyFrom(to_tensor(np.full(5, 1.5)))
    spec.sampling.backend = "cuda-magic"
    spec.sampling.guidance_scale = float("nan")
    spec.num_frames = 1
    fields = _fields(spec)
    assert {"spec.actions.values", "spec.actions.gripper", "spec.sampling.backend",
            "spec.sampling.guidance_scale", "spec.num_frames"} <= set(fields)


def test_fp8_precision_is_refused_at_submit():
    spec = _spec()
    spec.sampling.precision = "fp8"
    assert "spec.sampling.precision" in _fields(spec)


def test_robot_name_must_not_be_blank():
    assert "spec.robot.name" in _fields(_spec(robot=common_pb2.RobotRef(name=" ")))


def test_camera_proto_round_trip_of_the_shipped_example():
    from k4d.camera import Camera

    camera = Camera.from_dict(json.loads((EXAMPLE / "camera.json").read_text()))
    back = camera_from_proto(camera_to_proto(camera))
    assert back.width == 720 and back.height == 480
    np.testing.assert_allclose(back.T_cam_from_world, camera.T_cam_from_world)


def test_initial_depth_is_optional_and_checked():
    ok = common_pb2.TensorData(inline=to_tensor(np.ones((480, 720), np.float32)))
    validate_spec(_spec(initial_depth=ok))
    wrong_size = common_pb2.TensorData(inline=to_tensor(np.ones((48, 72), np.float32)))
    assert "must match" in _fields(_spec(initial_depth=wrong_size))["spec.initial_depth"]
    negative = np.ones((480, 720), np.float32)
    negative[0, 0] = -1.0
    assert ">= 0" in _fields(_spec(initial_depth=common_pb2.TensorData(
        inline=to_tensor(negative))))["spec.initial_depth"]
    as_double = common_pb2.TensorData(inline=to_tensor(np.ones((480, 720), np.float64)))
    assert "float32" in _fields(_spec(initial_depth=as_double))["spec.initial_depth"]
