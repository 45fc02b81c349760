"""The actions document: parsing, validation and dataset presets.

JSON format (every key but `type`/`steps` optional; a preset fills defaults that the
document may override):

    {
      "robot": "panda",
      "preset": "droid" | "bridge" | "libero",
      "type": "joint_position" | "joint_delta" | "joint_velocity" | "ee_pose" | "ee_delta",
      "frame": "base" | "ee",                   # ee_delta: deltas in the base or current EE frame
      "rotation": "quat_xyzw" | "euler_xyz" | "rotvec",   # ee_* rotation encoding
      "dt": 0.1,                                # seconds per step
      "steps": [[...], ...],                    # N x D
      "gripper": [...],                         # N values in the dataset's gripper units
      "gripper_open": 1.0, "gripper_closed": 0.0,   # dataset units of a fully open / closed gripper
      "position_scale": 1.0, "rotation_scale": 1.0, # multiply normalised deltas (LIBERO)
      "initial_joints": [...],                  # J values; default: middle of the joint ranges
      "link": "panda_hand_tcp",                 # end-effector link for ee_* actions
      "num_frames": 49,                         # clip length after resampling
      "clip": false                             # clamp joint values to limits instead of failing
    }

Widths D: joint_* take the arm joints (`arm_joint_names`) or all actuated joints;
ee_* take 3 position values + 4 (quat_xyzw) or 3 (euler_xyz, rotvec) rotation values;
a trailing gripper column is accepted when `gripper` is absent. Euler XYZ means
extrinsic roll-pitch-yaw, R = Rz(yaw) Ry(pitch) Rx(roll) (the URDF rpy convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from k4d.errors import InvalidArgument
from k4d.robots.validation import as_float_array

ACTION_TYPES = ("joint_position", "joint_delta", "joint_velocity", "ee_pose", "ee_delta")
ROTATIONS = {"quat_xyzw": 4, "euler_xyz": 3, "rotvec": 3}
FRAMES = ("base", "ee")
MAX_STEPS = 100_000
DEFAULT_NUM_FRAMES = 49


@dataclass(frozen=True)
class ActionSpec:
    type: str
    steps: np.ndarray  # (N, D)
    robot: str | None = None
    frame: str = "base"
    rotation: str = "quat_xyzw"
    dt: float = 0.1
    gripper: np.ndarray | None = None  # (N,) dataset units
    gripper_open: float = 1.0
    gripper_closed: float = 0.0
    position_scale: float = 1.0
    rotation_scale: float = 1.0
    initial_joints: np.ndarray | None = None
    link: str | None = None
    num_frames: int = DEFAULT_NUM_FRAMES
    clip: bool = False
    preset: str | None = None

    def gripper_opening(self) -> np.ndarray | None:
        """(N,) opening in [0, 1] (1 = fully open) from the dataset's units."""
        if self.gripper is None:
            return None
        span = self.gripper_open - self.gripper_closed
        return np.clip((self.gripper - self.gripper_closed) / span, 0.0, 1.0)


# Dataset conventions (see docs/kinematics.md for sources and details).
PRESETS: dict[str, dict] = {
    # DROID: absolute Cartesian pose of the Franka, xyz + extrinsic XYZ Euler, 15 Hz,
    # gripper_position 0 = open, 1 = closed.
    "droid": {"robot": "panda", "type": "ee_pose", "rotation": "euler_xyz", "dt": 1 / 15,
              "gripper_open": 0.0, "gripper_closed": 1.0},
    # BridgeData V2: WidowX 250s, per-step deltas of xyz and roll/pitch/yaw in the base
    # frame, 5 Hz, gripper 1 = open, 0 = closed.
    "bridge": {"robot": "widowx250s", "type": "ee_delta", "frame": "base",
               "rotation": "euler_xyz", "dt": 0.2, "gripper_open": 1.0, "gripper_closed": 0.0},
    # LIBERO (robosuite OSC_POSE): normalised deltas in [-1, 1] scaled by 0.05 m and
    # 0.5 rad, axis-angle rotation, base frame, 20 Hz, gripper -1 = open, +1 = closed.
    "libero": {"robot": "panda", "type": "ee_delta", "frame": "base", "rotation": "rotvec",
               "dt": 0.05, "position_scale": 0.05, "rotation_scale": 0.5,
               "gripper_open": -1.0, "gripper_closed": 1.0},
}

_KEYS = {"robot", "preset", "type", "frame", "rotation", "dt", "steps", "gripper", "gripper_open",
         "gripper_closed", "position_scale", "rotation_scale", "initial_joints", "link",
         "num_frames", "clip"}


def parse_actions(document) -> ActionSpec:
    """Validate a decoded actions JSON document -> ActionSpec (raises InvalidArgument)."""
    if not isinstance(document, dict):
        raise InvalidArgument.for_field("actions", "must be a JSON object")
    unknown = sorted(set(document) - _KEYS)
    if unknown:
        raise InvalidArgument.for_field(f"actions.{unknown[0]}", "unknown key")
    preset = document.get("preset")
    if preset is not None and preset not in PRESETS:
        raise InvalidArgument.for_field("actions.preset", f"unknown preset {preset!r}; one of "
                                        f"{sorted(PRESETS)}")
    merged = {**PRESETS.get(preset, {}), **document}
    kind = _choice(merged, "type", ACTION_TYPES, None)
    rotation = _choice(merged, "rotation", tuple(ROTATIONS), "quat_xyzw")
    frame = _choice(merged, "frame", FRAMES, "base")
    spec = ActionSpec(
        type=kind, steps=merged.get("steps"), robot=_optional_str(merged, "robot"), frame=frame,
        rotation=rotation, dt=_number(merged, "dt", 0.1, positive=True),
        gripper=merged.get("gripper"), gripper_open=_number(merged, "gripper_open", 1.0),
        gripper_closed=_number(merged, "gripper_closed", 0.0),
        position_scale=_number(merged, "position_scale", 1.0),
        rotation_scale=_number(merged, "rotation_scale", 1.0),
        initial_joints=merged.get("initial_joints"), link=_optional_str(merged, "link"),
        num_frames=_frames(merged), clip=_bool(merged, "clip"), preset=preset)
    return validate_spec(spec)


def validate_spec(spec: ActionSpec) -> ActionSpec:
    """Check the array fields of an ActionSpec however it was built (JSON or proto) and
    split a trailing gripper column; returns the normalised spec. Idempotent."""
    if spec.type not in ACTION_TYPES:
        raise InvalidArgument.for_field("actions.type", f"expected one of {list(ACTION_TYPES)}")
    if spec.rotation not in ROTATIONS:
        raise InvalidArgument.for_field("actions.rotation", f"expected one of {list(ROTATIONS)}")
    if spec.frame not in FRAMES:
        raise InvalidArgument.for_field("actions.frame", f"expected one of {list(FRAMES)}")
    if not (math.isfinite(spec.dt) and spec.dt > 0):
        raise InvalidArgument.for_field("actions.dt", f"must be > 0, got {spec.dt!r}")
    if not 1 <= spec.num_frames <= 10_000:
        raise InvalidArgument.for_field("actions.num_frames", "expected an integer in [1, 10000]")
    steps = as_float_array(spec.steps, "actions.steps", max_elements=MAX_STEPS * 32)
    if steps.ndim != 2 or steps.shape[0] == 0 or steps.shape[0] > MAX_STEPS or steps.shape[1] == 0:
        raise InvalidArgument.for_field("actions.steps", f"expected a non-empty N x D list of "
                                        f"numbers (N <= {MAX_STEPS}), got shape {steps.shape}")
    if not math.isfinite(spec.dt * steps.shape[0]):  # the time axis the states are resampled on
        raise InvalidArgument.for_field("actions.dt", f"{spec.dt!r} s x {steps.shape[0]} steps "
                                        "is not a finite duration")
    gripper = spec.gripper
    if gripper is not None:
        gripper = as_float_array(gripper, "actions.gripper")
        if gripper.shape != (steps.shape[0],):
            raise InvalidArgument.for_field("actions.gripper",
                                            f"expected {steps.shape[0]} values, got {gripper.shape}")
    initial = spec.initial_joints
    if initial is not None:
        initial = as_float_array(initial, "actions.initial_joints")
        if initial.ndim != 1:
            raise InvalidArgument.for_field("actions.initial_joints", "expected a list of J values")
    if spec.gripper_open == spec.gripper_closed:
        raise InvalidArgument.for_field("actions.gripper_open", "must differ from gripper_closed")
    for name in ("gripper_open", "gripper_closed", "position_scale", "rotation_scale"):
        if not math.isfinite(getattr(spec, name)):
            raise InvalidArgument.for_field(f"actions.{name}", "must be finite")
    spec = replace(spec, steps=steps, gripper=gripper, initial_joints=initial)
    return _split_gripper_column(spec)


def ee_width(spec: ActionSpec) -> int:
    return 3 + ROTATIONS[spec.rotation]


def _split_gripper_column(spec: ActionSpec) -> ActionSpec:
    """ee_* steps may carry the gripper as a trailing column (the datasets' 7-D layout)."""
    if spec.type.startswith("ee_") and spec.steps.shape[1] == ee_width(spec) + 1:
        if spec.gripper is not None:
            raise InvalidArgument.for_field("actions.steps", "gripper given twice (column and key)")
        return replace(spec, steps=spec.steps[:, :-1], gripper=spec.steps[:, -1].copy())
    if spec.type.startswith("ee_") and spec.steps.shape[1] != ee_width(spec):
        raise InvalidArgument.for_field(
            "actions.steps", f"{spec.type} with rotation {spec.rotation} needs {ee_width(spec)} "
                             f"columns (+1 optional gripper), got {spec.steps.shape[1]}")
    return spec


def _choice(doc: dict, key: str, options: tuple, default):
    value = doc.get(key, default)
    if value not in options:
        raise InvalidArgument.for_field(f"actions.{key}", f"expected one of {list(options)}, "
                                        f"got {value!r}")
    return value


def _number(doc: dict, key: str, default: float, positive: bool = False) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument.for_field(f"actions.{key}", f"expected a finite number, got {value!r}")
    if positive and value <= 0:
        raise InvalidArgument.for_field(f"actions.{key}", f"must be > 0, got {value!r}")
    return float(value)


def _frames(doc: dict) -> int:
    value = doc.get("num_frames", DEFAULT_NUM_FRAMES)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise InvalidArgument.for_field("actions.num_frames", f"expected an integer in [1, 10000], "
                                        f"got {value!r}")
    return value


def _bool(doc: dict, key: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise InvalidArgument.for_field(f"actions.{key}", f"expected true/false, got {value!r}")
    return value


def _optional_str(doc: dict, key: str) -> str | None:
    value = doc.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgument.for_field(f"actions.{key}", f"expected a string, got {value!r}")
    return value
