"""Actions as per-frame time series: the steps of a `k4d simulate` actions document placed
on the clip's frames the way the kinematics stage places them (docs/kinematics.md)."""

from __future__ import annotations

import numpy as np

_ROTATION_NAMES = {"quat_xyzw": ["qx", "qy", "qz", "qw"], "euler_xyz": ["roll", "pitch", "yaw"],
                   "rotvec": ["rx", "ry", "rz"]}
_DELTA_TYPES = ("joint_delta", "joint_velocity", "ee_delta")


def actions_per_frame(document: dict, frames: int,
                      joint_names: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """(values (frames, D) float64, names (D,)) of an actions document's steps per frame.

    Absolute actions (joint_position, ee_pose) are states at times k * dt, linearly
    interpolated onto `frames` frames spread evenly over that span (the kinematics stage's
    rule; for plotting, rotation components are interpolated per component). Delta actions
    (joint_delta, joint_velocity, ee_delta) act during (k * dt, (k + 1) * dt]; each frame
    shows the step acting then (zero-order hold), frame 0 the first step. A `gripper`
    column, when given, is appended and placed the same way.
    """
    steps = np.asarray(document.get("steps", []), np.float64)
    if steps.ndim == 1:
        steps = steps[:, None]
    kind = str(document.get("type", ""))
    names = _names(kind, str(document.get("rotation", "quat_xyzw")), steps.shape[1], joint_names)
    if document.get("gripper") is not None:
        steps = np.concatenate([steps, np.asarray(document["gripper"], np.float64)[:, None]], 1)
        names.append("gripper")
    n = len(steps)
    if n == 0 or frames < 1:
        return np.zeros((max(frames, 0), len(names))), names
    if kind in _DELTA_TYPES:
        # state k sits at k * dt, k = 0..n; step k acts between states k and k + 1.
        position = np.linspace(0.0, n, frames)
        index = np.clip(np.ceil(position).astype(int) - 1, 0, n - 1)
        return steps[index], names
    position = np.linspace(0.0, n - 1, frames)
    values = np.stack([np.interp(position, np.arange(n), steps[:, d])
                       for d in range(steps.shape[1])], axis=1)
    return values, names


def _names(kind: str, rotation: str, width: int, joint_names: list[str] | None) -> list[str]:
    """Column names: joint names for joint_* (the arm joints are the first ones), else
    x, y, z + the rotation's components (+ a trailing gripper column)."""
    if kind.startswith("joint_"):
        if joint_names is not None and width <= len(joint_names):
            return list(joint_names[:width])
        return [f"joint{i}" for i in range(width)]
    names = ["x", "y", "z"] + _ROTATION_NAMES.get(rotation, [])
    if width == len(names) + 1:
        names.append("gripper")
    names += [f"a{i}" for i in range(len(names), width)]
    return names[:width]
