"""Actions JSON (k4d_kinematics.actions.ActionSpec) -> the ActionSequence proto (the
reverse is k4d_kinematics.proto_actions, shared with the kinematics worker).

The proto is the wire form every stage receives; it has no dataset units, so the
conversion normalises: the gripper becomes an opening in [0, 1], position/rotation
scales are applied to the steps, and rotation vectors become quaternions (exact).
"""

from __future__ import annotations

import numpy as np
from k4d.rotations import rotvec_to_quat_xyzw
from k4d.tensor_io import to_tensor
from kinema4d.v1 import common_pb2, kinematics_pb2

_TYPES = {"joint_position": kinematics_pb2.ACTION_TYPE_JOINT_POSITIONS,
          "joint_delta": kinematics_pb2.ACTION_TYPE_JOINT_DELTAS,
          "joint_velocity": kinematics_pb2.ACTION_TYPE_JOINT_VELOCITIES,
          "ee_pose": kinematics_pb2.ACTION_TYPE_EE_ABSOLUTE,
          "ee_delta": kinematics_pb2.ACTION_TYPE_EE_DELTA}
_FRAMES = {"base": kinematics_pb2.ACTION_FRAME_BASE, "ee": kinematics_pb2.ACTION_FRAME_END_EFFECTOR}
_ROTATIONS = {"quat_xyzw": kinematics_pb2.ROTATION_FORMAT_QUATERNION_XYZW,
              "euler_xyz": kinematics_pb2.ROTATION_FORMAT_EULER_XYZ}


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
