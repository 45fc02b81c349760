"""Actions -> joint trajectory -> link poses, resampled to the clip length.

States are what the robot looks like after each step. Absolute actions (joint_position,
ee_pose) give one state per step; delta actions (joint_delta, joint_velocity, ee_delta)
start from the initial state, so they give N + 1 states with state 0 = initial. States
sit at times k * dt and are resampled uniformly over that span to `num_frames` frames:
joints and positions linearly, orientations by slerp, the gripper linearly. End-effector
states are then turned into joints by IK in trajectory mode (warm start from the
previous frame), and FK gives every link's pose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from k4d.actions import ActionSpec, validate_spec
from k4d.errors import InvalidArgument
from k4d.robots.fk import forward_kinematics
from k4d.robots.model import RobotModel
from k4d.robots.validation import validate_joints
from scipy.spatial.transform import Rotation, Slerp

from .ik import IKOptions, solve_ik


@dataclass
class TrajectoryResult:
    """T = num_frames, J = actuated joints, L = links."""

    joints: np.ndarray  # (T, J)
    poses: np.ndarray  # (T, L, 4, 4) T_base_from_link
    times: np.ndarray  # (T,) seconds from the initial state
    success: np.ndarray  # (T,) bool: IK reached the target (always True for joint actions)
    position_error: np.ndarray  # (T,) metres
    rotation_error: np.ndarray  # (T,) radians
    targets: np.ndarray | None  # (T, 4, 4) end-effector targets for ee_* actions


def solve_actions(model: RobotModel, spec: ActionSpec,
                  ik_options: IKOptions | None = None) -> TrajectoryResult:
    spec = validate_spec(spec)
    q0 = (model.mid_configuration if spec.initial_joints is None else
          validate_joints(model, spec.initial_joints, clip=spec.clip,
                          field="actions.initial_joints")[0])
    opening = spec.gripper_opening()
    delta = spec.type in ("joint_delta", "joint_velocity", "ee_delta")
    if opening is not None and delta:
        opening = np.concatenate([[_current_opening(model, q0)], opening])
    count = spec.steps.shape[0] + (1 if delta else 0)
    times = np.arange(count) * spec.dt
    frame_times = np.linspace(0.0, times[-1], spec.num_frames)
    if spec.type.startswith("joint_"):
        states = _joint_states(model, spec, q0)
        joints = _resample_linear(times, states, frame_times)
        T = spec.num_frames
        success, pos_err, rot_err, targets = np.ones(T, bool), np.zeros(T), np.zeros(T), None
    else:
        link = spec.link or model.ee_link
        model.link_index(link)
        poses = (_absolute_poses(spec) if spec.type == "ee_pose"
                 else _delta_poses(model, spec, q0, link))
        targets = _resample_poses(times, poses, frame_times)
        ik = solve_ik(model, targets, link=link, seed=q0, mode="trajectory", options=ik_options)
        joints, success = ik.joints, ik.success
        pos_err, rot_err = ik.position_error, ik.rotation_error
    if opening is not None:
        joints = _apply_gripper(model, joints, _resample_linear(times, opening[:, None],
                                                                 frame_times)[:, 0])
    joints = validate_joints(model, joints, clip=spec.clip, field="actions.steps")
    return TrajectoryResult(joints=joints, poses=forward_kinematics(model, joints),
                            times=frame_times, success=success, position_error=pos_err,
                            rotation_error=rot_err, targets=targets)


def _joint_states(model: RobotModel, spec: ActionSpec, q0: np.ndarray) -> np.ndarray:
    width = spec.steps.shape[1]
    if width == len(model.arm_joint_names):
        columns = model.joint_indices(model.arm_joint_names)
    elif width == model.num_joints:
        columns = np.arange(model.num_joints)
    else:
        raise InvalidArgument.for_field(
            "actions.steps", f"{spec.type} needs {len(model.arm_joint_names)} (arm) or "
                             f"{model.num_joints} (all) columns for robot {model.name!r}, got {width}")
    if spec.type == "joint_position":
        states = np.tile(q0, (spec.steps.shape[0], 1))
        states[:, columns] = spec.steps
    else:
        increments = spec.steps * (spec.dt if spec.type == "joint_velocity" else 1.0)
        states = np.tile(q0, (spec.steps.shape[0] + 1, 1))
        states[1:, columns] += np.cumsum(increments, axis=0)
    return validate_joints(model, states, clip=spec.clip, field="actions.steps")


def _rotations(spec: ActionSpec, values: np.ndarray, scale: float = 1.0) -> Rotation:
    if spec.rotation == "quat_xyzw":
        norms = np.linalg.norm(values, axis=1)
        if np.any(norms < 1e-9):
            raise InvalidArgument.for_field("actions.steps", "zero quaternion")
        rotation = Rotation.from_quat(values)
    elif spec.rotation == "euler_xyz":
        rotation = Rotation.from_euler("xyz", values)  # lowercase: extrinsic (URDF rpy)
    else:
        rotation = Rotation.from_rotvec(values)
    if scale != 1.0:
        rotation = Rotation.from_rotvec(rotation.as_rotvec() * scale)
    # A finite but huge rotation vector (|v|^2 overflows) gives NaN quaternions, which
    # would fail deep inside scipy's Slerp instead of naming the bad step.
    bad = ~np.isfinite(rotation.as_quat()).all(axis=-1)
    if np.any(bad):
        step = int(np.argmax(bad))
        raise InvalidArgument.for_field(f"actions.steps[{step}]", "rotation too large to represent "
                                        "(check the values and rotation_scale)")
    return rotation


def _absolute_poses(spec: ActionSpec) -> np.ndarray:
    poses = np.tile(np.eye(4), (spec.steps.shape[0], 1, 1))
    poses[:, :3, 3] = spec.steps[:, :3]
    poses[:, :3, :3] = _rotations(spec, spec.steps[:, 3:]).as_matrix()
    return poses


def _delta_poses(model: RobotModel, spec: ActionSpec, q0: np.ndarray, link: str) -> np.ndarray:
    start = forward_kinematics(model, q0)[model.link_index(link)]
    dp = spec.steps[:, :3] * spec.position_scale
    dR = _rotations(spec, spec.steps[:, 3:], spec.rotation_scale).as_matrix()
    poses = np.empty((spec.steps.shape[0] + 1, 4, 4))
    poses[0] = start
    for k in range(spec.steps.shape[0]):  # a running product: inherently sequential
        previous, current = poses[k], poses[k + 1]
        current[3] = (0.0, 0.0, 0.0, 1.0)
        if spec.frame == "base":
            current[:3, 3] = previous[:3, 3] + dp[k]
            current[:3, :3] = dR[k] @ previous[:3, :3]
        else:
            current[:3, 3] = previous[:3, 3] + previous[:3, :3] @ dp[k]
            current[:3, :3] = previous[:3, :3] @ dR[k]
    return poses


def _resample_linear(times: np.ndarray, values: np.ndarray, new_times: np.ndarray) -> np.ndarray:
    if len(times) == 1:
        return np.repeat(values[:1], len(new_times), axis=0)
    out = np.empty((len(new_times), values.shape[1]))
    for column in range(values.shape[1]):
        out[:, column] = np.interp(new_times, times, values[:, column])
    return out


def _resample_poses(times: np.ndarray, poses: np.ndarray, new_times: np.ndarray) -> np.ndarray:
    out = np.tile(np.eye(4), (len(new_times), 1, 1))
    if len(times) == 1:
        out[:] = poses[0]
        return out
    out[:, :3, 3] = _resample_linear(times, poses[:, :3, 3], new_times)
    out[:, :3, :3] = Slerp(times, Rotation.from_matrix(poses[:, :3, :3]))(new_times).as_matrix()
    return out


def _current_opening(model: RobotModel, q: np.ndarray) -> float:
    if not model.gripper_joints:
        return 0.0
    j = model.joint_names.index(model.gripper_joints[0])
    span = model.upper[j] - model.lower[j]
    return float((q[j] - model.lower[j]) / span) if span > 0 else 0.0


def _apply_gripper(model: RobotModel, joints: np.ndarray, opening: np.ndarray) -> np.ndarray:
    """Opening in [0, 1] (1 = open) -> each gripper joint from its lower (closed) to its
    upper (open) limit."""
    if not model.gripper_joints:
        raise InvalidArgument.for_field("actions.gripper", f"robot {model.name!r} has no gripper")
    joints = joints.copy()
    for name in model.gripper_joints:
        j = model.joint_names.index(name)
        joints[:, j] = model.lower[j] + opening * (model.upper[j] - model.lower[j])
    return joints
