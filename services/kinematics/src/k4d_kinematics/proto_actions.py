"""Proto messages -> core inputs (RobotRef -> RobotModel, ActionSequence -> ActionSpec,
an IK request -> IKOptions), shared by the gRPC servicer and the stage worker.

The proto carries no dataset units for the gripper: it is already an opening in [0, 1].
A preset fills type/frame/rotation/dt when the message leaves them unspecified, and its
position/rotation scales apply to the values."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from k4d.errors import FieldViolation, InvalidArgument
from k4d.robots.proto import robot_from_ref  # noqa: F401 - re-exported (api, worker, tests)
from kinema4d.v1 import kinematics_pb2 as kpb

from .actions import DEFAULT_NUM_FRAMES, PRESETS, ActionSpec, validate_spec
from .ik import IKOptions

TYPES = {kpb.ACTION_TYPE_JOINT_POSITIONS: "joint_position",
         kpb.ACTION_TYPE_JOINT_DELTAS: "joint_delta",
         kpb.ACTION_TYPE_JOINT_VELOCITIES: "joint_velocity",
         kpb.ACTION_TYPE_EE_ABSOLUTE: "ee_pose", kpb.ACTION_TYPE_EE_DELTA: "ee_delta"}
FRAMES = {kpb.ACTION_FRAME_BASE: "base", kpb.ACTION_FRAME_END_EFFECTOR: "ee"}
ROTATIONS = {kpb.ROTATION_FORMAT_QUATERNION_XYZW: "quat_xyzw",
             kpb.ROTATION_FORMAT_EULER_XYZ: "euler_xyz"}
# Error fields are named after the actions JSON; the proto spells two of them differently.
_PROTO_FIELDS = {"steps": "values", "dt": "dt_s"}

IK_REQUEST_BUDGET_S = 30.0  # restarts stop early enough that one request stays bounded

ReadArray = Callable[[object, str, int], np.ndarray]  # (TensorData, field, max elements)


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


def ik_options(request, frames: int) -> IKOptions:
    """IK settings for one request of `frames` frames: the per-frame time budget keeps the
    whole request within IK_REQUEST_BUDGET_S; `request` (an InverseKinematicsRequest, or
    None) may tighten or loosen the tolerances."""
    per_frame = min(0.5, IK_REQUEST_BUDGET_S / max(frames, 1))
    options = IKOptions(timeout_s=per_frame, trajectory_timeout_s=min(0.05, per_frame))
    if request is None:
        return options
    for name, value in (("position_tolerance_m", request.position_tolerance_m),
                        ("rotation_tolerance_rad", request.rotation_tolerance_rad)):
        if value < 0 or not np.isfinite(value):
            raise InvalidArgument.for_field(name, "must be a finite value >= 0 (0 = default)")
    return IKOptions(position_tolerance=request.position_tolerance_m or options.position_tolerance,
                     rotation_tolerance=request.rotation_tolerance_rad or options.rotation_tolerance,
                     timeout_s=options.timeout_s, trajectory_timeout_s=options.trajectory_timeout_s)
