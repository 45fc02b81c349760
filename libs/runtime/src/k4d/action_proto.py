"""The ActionSequence proto <-> the actions document (k4d.actions.ActionSpec): one tested
pair of conversions (issue 9 point 11), used by the embedded runner (JSON -> proto) and the
kinematics servicer and worker (proto -> spec).

The proto is the wire form every stage receives; it has no dataset units, so
`spec_to_proto` normalises: the gripper becomes an opening in [0, 1], position/rotation
scales are applied to the steps, and rotation vectors become quaternions (exact).
`action_spec_from_proto` reads it back: a preset named in the message fills
type/frame/rotation/dt when the message leaves them unspecified, and its position/rotation
scales apply to the values (`spec_to_proto` names no preset, having applied them).
spec_to_proto(action_spec_from_proto(m)) == m for every message spec_to_proto writes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from kinema4d.v1 import common_pb2
from kinema4d.v1 import kinematics_pb2 as kpb

from k4d.actions import DEFAULT_NUM_FRAMES, PRESETS, ActionSpec, validate_spec
from k4d.errors import FieldViolation, InvalidArgument
from k4d.rotations import rotvec_to_quat_xyzw
from k4d.tensor_io import to_tensor

TYPES = {kpb.ACTION_TYPE_JOINT_POSITIONS: "joint_position",
         kpb.ACTION_TYPE_JOINT_DELTAS: "joint_delta",
         kpb.ACTION_TYPE_JOINT_VELOCITIES: "joint_velocity",
         kpb.ACTION_TYPE_EE_ABSOLUTE: "ee_pose", kpb.ACTION_TYPE_EE_DELTA: "ee_delta"}
FRAMES = {kpb.ACTION_FRAME_BASE: "base", kpb.ACTION_FRAME_END_EFFECTOR: "ee"}
ROTATIONS = {kpb.ROTATION_FORMAT_QUATERNION_XYZW: "quat_xyzw",
             kpb.ROTATION_FORMAT_EULER_XYZ: "euler_xyz"}
_TYPE_VALUES = {name: value for value, name in TYPES.items()}
_FRAME_VALUES = {name: value for value, name in FRAMES.items()}
_ROTATION_VALUES = {name: value for value, name in ROTATIONS.items()}
# Error fields are named after the actions JSON; the proto spells two of them differently.
_PROTO_FIELDS = {"steps": "values", "dt": "dt_s"}

ReadArray = Callable[[object, str, int], np.ndarray]  # (TensorData, field, max elements)


def spec_to_proto(spec) -> kpb.ActionSequence:
    """ActionSpec (parsed actions JSON) -> ActionSequence proto."""
    steps = np.array(spec.steps, np.float64)
    rotation = spec.rotation
    if spec.type.startswith("ee_"):
        steps[:, :3] *= spec.position_scale
        steps[:, 3:] *= spec.rotation_scale if rotation != "quat_xyzw" else 1.0
        if rotation == "rotvec":
            steps = np.concatenate([steps[:, :3], rotvec_to_quat_xyzw(steps[:, 3:])], axis=1)
            rotation = "quat_xyzw"
    msg = kpb.ActionSequence(
        type=_TYPE_VALUES[spec.type], frame=_FRAME_VALUES[spec.frame], rotation=_ROTATION_VALUES[rotation],
        values=common_pb2.TensorData(inline=to_tensor(steps)), dt_s=float(spec.dt),
        link=spec.link or "")
    opening = spec.gripper_opening()
    if opening is not None:
        msg.gripper.inline.CopyFrom(to_tensor(np.asarray(opening, np.float64)))
    if spec.initial_joints is not None:
        msg.initial_joints.inline.CopyFrom(to_tensor(np.asarray(spec.initial_joints, np.float64)))
    return msg


def action_spec_from_proto(actions: kpb.ActionSequence, num_frames: int, clip: bool,
                           read_array: ReadArray, field: str = "actions") -> ActionSpec:
    if actions.preset and actions.preset not in PRESETS:
        raise InvalidArgument.for_field(f"{field}.preset", f"unknown preset {actions.preset!r}; "
                                        f"one of {sorted(PRESETS)}")
    preset = PRESETS.get(actions.preset, {})
    kind = _enum(TYPES, actions.type, f"{field}.type") or preset.get("type")
    if kind is None:
        raise InvalidArgument.for_field(f"{field}.type", "required (or a preset)")
    gripper = initial = None
    if actions.HasField("gripper"):
        gripper = read_array(actions.gripper, f"{field}.gripper", 1_000_000)
    if actions.HasField("initial_joints"):
        initial = read_array(actions.initial_joints, f"{field}.initial_joints", 10_000)
    spec = ActionSpec(
        type=kind, steps=read_array(actions.values, f"{field}.values", 3_200_000),
        frame=_enum(FRAMES, actions.frame, f"{field}.frame") or preset.get("frame", "base"),
        rotation=(_enum(ROTATIONS, actions.rotation, f"{field}.rotation")
                  or preset.get("rotation", "quat_xyzw")),
        dt=actions.dt_s or preset.get("dt", 0.1), gripper=gripper,
        position_scale=preset.get("position_scale", 1.0),
        rotation_scale=preset.get("rotation_scale", 1.0), initial_joints=initial,
        link=actions.link or None, num_frames=num_frames or DEFAULT_NUM_FRAMES, clip=clip,
        preset=actions.preset or None)
    try:
        return validate_spec(spec)
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc), [FieldViolation(_rename(v.field, field), v.description)
                                         for v in exc.violations]) from None


def _enum(names: dict, value: int, field: str) -> str | None:
    """A proto enum value -> our name; None when UNSPECIFIED (0). Proto3 enums are open,
    so a number no name stands for is refused rather than read as unspecified."""
    if value and value not in names:
        raise InvalidArgument.for_field(field, f"unknown value {value}")
    return names.get(value)


def _rename(name: str, field: str) -> str:
    head, _, tail = name.partition(".")
    if head != "actions":
        return name
    first, dot, rest = tail.partition(".")
    return f"{field}.{_PROTO_FIELDS.get(first, first)}{dot}{rest}"
