"""Actions -> trajectories: every action type, frames, rotations, gripper, presets,
resampling, and validation of malformed documents."""

import numpy as np
import pytest
from k4d.actions import PRESETS, parse_actions
from k4d.errors import InvalidArgument
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d_kinematics.trajectory import solve_actions
from scipy.spatial.transform import Rotation


@pytest.fixture(scope="module")
def panda():
    return load_robot("panda")


def _ee(model, joints):
    return forward_kinematics(model, joints)[:, model.link_index(model.ee_link)]


def test_joint_positions_resampled_linearly_to_clip_length(panda):
    a, b = panda.mid_configuration[:7] - 0.2, panda.mid_configuration[:7] + 0.2
    spec = parse_actions({"type": "joint_position", "steps": [a.tolist(), b.tolist()], "dt": 0.5})
    out = solve_actions(panda, spec)
    assert out.joints.shape == (49, 8) and out.poses.shape == (49, 13, 4, 4)
    np.testing.assert_allclose(out.joints[0, :7], a)
    np.testing.assert_allclose(out.joints[-1, :7], b)
    np.testing.assert_allclose(out.joints[24, :7], (a + b) / 2)
    np.testing.assert_allclose(out.times[[0, -1]], [0.0, 0.5])
    assert out.success.all()


def test_joint_deltas_and_velocities_accumulate_from_the_initial_state(panda):
    q0 = panda.mid_configuration
    steps = np.full((4, 7), 0.05)
    deltas = solve_actions(panda, parse_actions({"type": "joint_delta", "steps": steps.tolist(),
                                                 "num_frames": 5}))
    np.testing.assert_allclose(deltas.joints[:, :7], q0[:7] + np.arange(5)[:, None] * 0.05)
    velocities = solve_actions(panda, parse_actions({"type": "joint_velocity", "dt": 0.1,
                                                     "steps": (steps * 10).tolist(),
                                                     "num_frames": 5}))
    np.testing.assert_allclose(velocities.joints, deltas.joints)


def test_out_of_limit_joint_actions_are_rejected_or_clipped(panda):
    doc = {"type": "joint_delta", "steps": [[0, 0, 0, 5.0, 0, 0, 0]]}
    with pytest.raises(InvalidArgument, match="panda_joint4"):
        solve_actions(panda, parse_actions(doc))
    out = solve_actions(panda, parse_actions({**doc, "clip": True}))
    assert out.joints[-1, 3] == panda.upper[3]


@pytest.mark.parametrize("rotation", ["quat_xyzw", "euler_xyz", "rotvec"])
def test_absolute_ee_poses_are_reached(panda, rotation):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(panda.lower, panda.upper, (2, 8)) * 0.5
    q = a + (b - a) * np.linspace(0, 1, 6)[:, None]
    poses = _ee(panda, q)
    rot = Rotation.from_matrix(poses[:, :3, :3])
    encoded = {"quat_xyzw": rot.as_quat(), "euler_xyz": rot.as_euler("xyz"),
               "rotvec": rot.as_rotvec()}[rotation]
    steps = np.concatenate([poses[:, :3, 3], encoded], axis=1)
    out = solve_actions(panda, parse_actions({"type": "ee_pose", "rotation": rotation,
                                              "steps": steps.tolist(), "num_frames": 6,
                                              "initial_joints": q[0].tolist()}))
    assert out.success.all()
    np.testing.assert_allclose(_ee(panda, out.joints)[:, :3, 3], poses[:, :3, 3], atol=1e-4)


@pytest.mark.parametrize("frame", ["base", "ee"])
def test_ee_deltas_compose_in_the_requested_frame(panda, frame):
    q0 = panda.mid_configuration
    start = _ee(panda, q0[None])[0]
    steps = [[0.01, 0, 0, 0, 0, 0.05]] * 4
    out = solve_actions(panda, parse_actions({"type": "ee_delta", "frame": frame,
                                              "rotation": "rotvec", "steps": steps,
                                              "num_frames": 5}))
    assert out.success.all()
    final = _ee(panda, out.joints[-1:])[0]
    if frame == "base":
        direction = np.array([0.04, 0, 0])
    else:  # each step moves along the EE x axis as rotated by the previous steps
        direction = sum(start[:3, :3] @ Rotation.from_rotvec([0, 0, 0.05 * k]).as_matrix()
                        @ [0.01, 0, 0] for k in range(4))
    np.testing.assert_allclose(final[:3, 3], start[:3, 3] + direction, atol=1e-4)
    Rz = Rotation.from_rotvec([0, 0, 0.2]).as_matrix()
    expected = Rz @ start[:3, :3] if frame == "base" else start[:3, :3] @ Rz
    np.testing.assert_allclose(final[:3, :3], expected, atol=1e-3)


def test_gripper_column_and_conventions_map_to_finger_joints(panda):
    steps = [[0.0] * 6 + [g] for g in (1.0, 0.0)]  # LIBERO: -1 open, +1 closed
    out = solve_actions(panda, parse_actions({"preset": "libero", "steps": steps,
                                              "num_frames": 3}))
    finger = panda.joint_names.index("panda_finger_joint1")
    # State 0 keeps the initial opening; +1 = closed (0 m), 0 = half open (0.02 m).
    np.testing.assert_allclose(out.joints[1:, finger], [0.0, 0.02], atol=1e-12)


def test_presets_exist_for_the_three_datasets():
    assert set(PRESETS) == {"droid", "bridge", "libero"}
    bridge = parse_actions({"preset": "bridge", "steps": [[0.01, 0, 0, 0, 0, 0, 1.0]]})
    assert bridge.robot == "widowx250s" and bridge.type == "ee_delta"
    assert bridge.gripper.tolist() == [1.0] and bridge.steps.shape == (1, 6)


def test_bridge_preset_runs_on_widowx():
    wx = load_robot("widowx250s")
    steps = [[0.005, 0.0, -0.005, 0.0, 0.02, 0.0, 1.0]] * 5 + [[0, 0, 0, 0, 0, 0, 0.0]] * 5
    out = solve_actions(wx, parse_actions({"preset": "bridge", "steps": steps}))
    assert out.joints.shape == (49, wx.num_joints) and out.success.all()
    finger = wx.joint_names.index("left_finger")
    assert out.joints[-1, finger] == wx.lower[finger]  # closed at the end


@pytest.mark.parametrize("doc, field", [
    ({"type": "teleport", "steps": [[0]]}, "actions.type"),
    ({"type": "joint_position", "steps": []}, "actions.steps"),
    ({"type": "joint_position", "steps": [[0, float("nan")]]}, "actions.steps"),
    ({"type": "joint_position", "steps": [[0], [0, 1]]}, "actions.steps"),
    ({"type": "ee_pose", "steps": [[0, 0, 0, 0, 0]]}, "actions.steps"),
    ({"type": "ee_pose", "rotation": "matrix", "steps": [[0] * 7]}, "actions.rotation"),
    ({"type": "joint_position", "steps": [[0] * 7], "dt": -1}, "actions.dt"),
    ({"type": "joint_position", "steps": [[0] * 7], "gripper": [0, 1]}, "actions.gripper"),
    ({"type": "joint_position", "steps": [[0] * 7], "num_frames": 0}, "actions.num_frames"),
    ({"type": "joint_position", "steps": [[0] * 7], "bogus": 1}, "actions.bogus"),
    ({"preset": "rt1", "steps": [[0] * 7]}, "actions.preset"),
    ([1, 2], "actions"),
])
def test_malformed_documents_name_the_field(doc, field):
    with pytest.raises(InvalidArgument) as info:
        parse_actions(doc)
    assert info.value.violations[0].field == field


def test_wrong_joint_width_is_rejected(panda):
    with pytest.raises(InvalidArgument, match="needs 7 .arm. or 8"):
        solve_actions(panda, parse_actions({"type": "joint_position", "steps": [[0.0] * 5]}))


@pytest.mark.parametrize("doc", [
    {"type": "ee_pose", "rotation": "rotvec", "steps": [[0.4, 0, 0.4, 0, 0, 0], [0.4, 0, 0.4, 1e308, 0, 0]]},
    {"type": "ee_delta", "rotation": "rotvec", "rotation_scale": 1e308, "steps": [[0, 0, 0, 1, 0, 0]]},
])
def test_rotations_too_large_to_represent_name_the_step(panda, doc):
    # |v|^2 overflows: scipy would return NaN quaternions and Slerp fail with LinAlgError.
    with pytest.raises(InvalidArgument, match="rotation too large") as info:
        solve_actions(panda, parse_actions(doc))
    assert info.value.violations[0].field.startswith("actions.steps[")


def test_a_step_duration_that_overflows_names_dt(panda):
    doc = {"type": "joint_position", "dt": 1e308, "steps": [panda.mid_configuration[:7].tolist()] * 3}
    with pytest.raises(InvalidArgument) as info:
        solve_actions(panda, parse_actions(doc))
    assert info.value.violations[0].field == "actions.dt"
