"""Actions JSON (k4d_kinematics.actions.ActionSpec) <-> the ActionSequence proto.

The proto is the wire form every stage receives; it has no dataset units, so the
conversion normalises: the gripper becomes an opening in [0, 1], position/rotation
scales are applied to the steps, and rotation vectors become quaternions (exact).
"""

from __future__ import annotations

import numpy as np
from kinema4d.v1 import common_pb2, kinematics_pb2

from k4d.errors import InvalidArgument
from k4d.tensor_io import from_tensor_data, to_tensor

_TYPES = {"joint_position": kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS,
          "joint_delta": kinematics_pb2.ACTION_TYPE_JOINT_DELTAS,
          "joint_velocity": kinematics_pb2.ACTION_TYPE_JOINT_VELOCITIES,
          "ee_pose": kinematics_pb2.ACTION_TYPE_EE_ABSOLUTE,
          "ee_delta": kinematics_pb2.ACTION_TYPE_EE_DELTA}
_FRAMES = {"base": kinematics_pb2.ACTION_FRAME_BASE, "ee": kinematics_pb2.ACTION_FRAME_END_EFFECTOR}
_ROTATIONS = {"quat_xyzw": kinematics_pb2.ROTATION_FORMAT_QUATERNION_XYZW,
              "euler_xyz": kinematics_pb2.ROTATION_FORMAT_EULER_XYZ}


def rotvec_to_quat_xyzw(rotvec: np.ndarray) -> np.ndarray:
    """(N, 3) rotation vectors (rad) -> (N, 4) unit quaternions (x, y, z, w)."""
    angle = np.linalg.norm(rotvec, axis=1, keepdims=True)
    # sin(a/2)/a -> 1/2 as a -> 0 (series), keeps tiny rotations exact
    half_sinc = np.where(angle > 1e-8, np.sin(angle / 2) / np.maximum(angle, 1e-300),
                         0.5 - angle**2 / 48)
    return np.concatenate([rotvec * half_sinc, np.cos(angle / 2)], axis=1)


def spec_to_proto(spec) -> kinematics_pb2.ActionSequence:
    """ActionSpec (parsed actions JSON) -> ActionSequence proto."""
    steps = np.array(spec.steps, np.float64)
    rotation = spec.rotation
    if spec.type.startswith("ee_"):
        steps[:, :3] *= spec.position_scale
        steps[:, 3:] *= spec.rotation_scale if rotation != "quat_xyzw" else 1.0
        if rotation == "rotvec":
            steps = np.concatenate([steps[:, :3], rotvec_to_quat_xyzw(steps[:, 3:])], axis=1)
            rotation = "quat_xyzw"
    msg = kinematics_pb2.ActionSequence(
        type=_TYPES[spec.type], frame=_FRAMES[spec.frame], rotation=_ROTATIONS[rotation],
        values=common_pb2.TensorData(inline=to_tensor(steps)), dt_s=float(spec.dt),
        link=spec.link or "")
    opening = spec.gripper_opening()
    if opening is not None:
        msg.gripper.inline.CopyFrom(to_tensor(np.asarray(opening, np.float64)))
    if spec.initial_joints is not None:
        msg.initial_joints.inline.CopyFrom(to_tensor(np.asarray(spec.initial_joints, np.float64)))
    return msg


def proto_to_spec(msg: kinematics_pb2.ActionSequence, num_frames: int, clip: bool,
                  store=None, field: str = "spec.actions"):
    """ActionSequence proto -> ActionSpec (gripper already an opening in [0, 1])."""
    from k4d_kinematics.actions import PRESETS, ActionSpec

    names = {v: k for k, v in _TYPES.items()}
    preset = PRESETS.get(msg.preset, {}) if msg.preset else {}
    kind = names.get(msg.type) or preset.get("type")
    if kind is None:
        raise InvalidArgument.for_field(f"{field}.type", "required (or a preset)")
    frame = {v: k for k, v in _FRAMES.items()}.get(msg.frame) or preset.get("frame", "base")
    rotation = ({v: k for k, v in _ROTATIONS.items()}.get(msg.rotation)
                or preset.get("rotation", "quat_xyzw"))
    steps = from_tensor_data(msg.values, store, f"{field}.values").astype(np.float64)
    gripper = (from_tensor_data(msg.gripper, store, f"{field}.gripper").astype(np.float64)
               if msg.HasField("gripper") else None)
    initial = (from_tensor_data(msg.initial_joints, store, f"{field}.initial_joints")
               .astype(np.float64) if msg.HasField("initial_joints") else None)
    return ActionSpec(type=kind, steps=steps, frame=frame, rotation=rotation,
                      dt=msg.dt_s or preset.get("dt", 0.1), gripper=gripper,
                      initial_joints=initial, link=msg.link or None, num_frames=num_frames,
                      clip=clip)
