"""k4d.action_proto: the actions document <-> ActionSequence proto pair, round trips."""

import numpy as np
import pytest
from k4d.action_proto import action_spec_from_proto, spec_to_proto
from k4d.actions import parse_actions
from k4d.errors import InvalidArgument
from k4d.rotations import euler_xyz_to_matrix, quat_to_matrix, so3_exp
from k4d.tensor_io import from_tensor
from kinema4d.v1 import kinematics_pb2 as kpb

RNG = np.random.default_rng(0)
N = 6


def read_inline(tensor_data, field, max_elements):
    array = from_tensor(tensor_data.inline, field)
    assert array.size <= max_elements
    return array


def back(msg, num_frames=12, clip=False):
    return action_spec_from_proto(msg, num_frames, clip, read_inline)


DOCUMENTS = {
    "joints": {"type": "joint_position", "steps": RNG.uniform(-1, 1, (N, 7)).tolist(),
               "gripper": RNG.uniform(0, 0.08, N).tolist(), "gripper_open": 0.08,
               "initial_joints": [0.1] * 7, "dt": 0.25},
    "libero": {"preset": "libero", "steps": RNG.uniform(-1, 1, (N, 7)).tolist()},
    "bridge": {"preset": "bridge", "steps": RNG.uniform(-0.05, 0.05, (N, 6)).tolist(),
               "gripper": RNG.uniform(0, 1, N).tolist(), "link": "gripper_link"},
    "ee_pose_quat": {"type": "ee_pose", "frame": "ee", "rotation": "quat_xyzw",
                     "steps": np.concatenate([RNG.normal(size=(N, 3)), np.tile([0, 0, 0.6, 0.8], (N, 1))],
                                             axis=1).tolist()},
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_proto_round_trip_is_a_fixed_point(name):
    spec = parse_actions(DOCUMENTS[name])
    msg = spec_to_proto(spec)
    again = spec_to_proto(back(msg))
    assert again == msg


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_proto_keeps_the_meaning(name):
    spec = parse_actions(DOCUMENTS[name])
    got = back(spec_to_proto(spec))
    assert (got.type, got.frame, got.dt, got.link) == (spec.type, spec.frame, spec.dt, spec.link)
    if spec.gripper is None:
        assert got.gripper is None
    else:  # dataset units -> opening in [0, 1]
        np.testing.assert_allclose(got.gripper, spec.gripper_opening(), atol=1e-12)
        np.testing.assert_allclose(got.gripper_opening(), spec.gripper_opening(), atol=1e-12)
    if spec.initial_joints is not None:
        np.testing.assert_array_equal(got.initial_joints, spec.initial_joints)
    if not spec.type.startswith("ee_"):
        np.testing.assert_array_equal(got.steps, spec.steps)
        return
    np.testing.assert_allclose(got.steps[:, :3], spec.steps[:, :3] * spec.position_scale, atol=1e-12)
    if spec.rotation == "rotvec":
        assert got.rotation == "quat_xyzw"
        np.testing.assert_allclose(quat_to_matrix(got.steps[:, 3:]),
                                   so3_exp(spec.steps[:, 3:] * spec.rotation_scale), atol=1e-12)
    elif spec.rotation == "euler_xyz":
        for a, b in zip(got.steps[:, 3:], spec.steps[:, 3:] * spec.rotation_scale, strict=True):
            np.testing.assert_allclose(euler_xyz_to_matrix(a), euler_xyz_to_matrix(b), atol=1e-12)
    else:
        np.testing.assert_array_equal(got.steps[:, 3:], spec.steps[:, 3:])


def test_a_preset_in_the_message_fills_and_scales():
    msg = kpb.ActionSequence(preset="libero")
    msg.values.inline.CopyFrom(spec_to_proto(parse_actions(
        {"type": "ee_delta", "rotation": "euler_xyz", "steps": [[1, 0, 0, 0, 0, 0]]})).values.inline)
    spec = back(msg)
    assert (spec.type, spec.frame, spec.dt) == ("ee_delta", "base", 0.05)
    assert (spec.position_scale, spec.rotation_scale) == (0.05, 0.5)


def test_bad_messages_name_the_field():
    good = spec_to_proto(parse_actions(DOCUMENTS["joints"]))
    cases = {"actions.type": dict(type=99), "actions.frame": dict(frame=42),
             "actions.rotation": dict(rotation=7), "actions.preset": dict(preset="nope")}
    for field, change in cases.items():
        msg = kpb.ActionSequence()
        msg.CopyFrom(good)
        for key, value in change.items():
            setattr(msg, key, value)
        with pytest.raises(InvalidArgument) as info:
            back(msg)
        assert info.value.violations[0].field == field
    msg = kpb.ActionSequence()
    msg.CopyFrom(good)
    msg.dt_s = -1.0
    with pytest.raises(InvalidArgument) as info:
        back(msg)
    assert info.value.violations[0].field == "actions.dt_s"
