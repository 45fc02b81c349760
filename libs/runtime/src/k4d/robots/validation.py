"""Boundary checks for user-supplied arrays (CLI, gRPC, worker). Cores trust their inputs;
everything from outside passes through here and fails with InvalidArgument naming the
field, frame and joint."""

from __future__ import annotations

import numpy as np

from k4d.errors import InvalidArgument
from k4d.rotations import orthonormality_error, quat_to_matrix

from .model import RobotModel

LIMIT_SLACK = 1e-9  # float noise from files written elsewhere
ROTATION_TOLERANCE = 1e-6  # max |R^T R - I| + |det R - 1|
QUATERNION_NORM_TOLERANCE = 1e-3


def as_float_array(value, field: str, max_elements: int = 50_000_000) -> np.ndarray:
    try:
        array = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise InvalidArgument.for_field(field, f"not a numeric array: {exc}") from None
    if array.dtype.kind not in "biuf":
        raise InvalidArgument.for_field(field, f"expected numbers, got dtype {array.dtype}")
    if array.size > max_elements:
        raise InvalidArgument.for_field(field, f"too large ({array.size} elements)")
    array = array.astype(np.float64, copy=False)
    bad = ~np.isfinite(array)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InvalidArgument.for_field(field, f"non-finite value {array[where]} at index {where}")
    return array


def validate_joints(model: RobotModel, joints, *, clip: bool = False,
                    field: str = "joints") -> np.ndarray:
    """(T, J) or (J,) joint values in `model.joint_names` order -> (T, J) float64.
    Continuous joints are wrapped to [-pi, pi]; other out-of-limit values are rejected
    (or clipped when `clip`)."""
    q = as_float_array(joints, field)
    if q.ndim == 1:
        q = q[None]
    J = model.num_joints
    if q.ndim != 2 or q.shape[1] != J or q.shape[0] == 0:
        raise InvalidArgument.for_field(
            field, f"expected shape (T, {J}) for robot {model.name!r} "
                   f"({', '.join(model.joint_names)}), got {tuple(np.shape(joints))}")
    q = q.copy()
    if model.continuous.any():
        q[:, model.continuous] = np.mod(q[:, model.continuous] + np.pi, 2 * np.pi) - np.pi
    if clip:
        return np.clip(q, model.lower, model.upper)
    outside = (q < model.lower - LIMIT_SLACK) | (q > model.upper + LIMIT_SLACK)
    if outside.any():
        t, j = (int(i) for i in np.argwhere(outside)[0])
        raise InvalidArgument.for_field(
            f"{field}[{t}][{j}]",
            f"{model.joint_names[j]} = {q[t, j]:.6g} outside limits "
            f"[{model.lower[j]:.6g}, {model.upper[j]:.6g}] (use clip to clamp)")
    return np.clip(q, model.lower, model.upper)


def validate_seed(model: RobotModel, seed, field: str = "seed") -> np.ndarray:
    """(J,) one configuration within limits (an IK seed) -> (J,) float64."""
    q = validate_joints(model, seed, field=field)
    if len(q) != 1:
        raise InvalidArgument.for_field(field, f"expected one configuration of {model.num_joints} "
                                        f"values, got {len(q)} rows")
    return q[0]


def validate_targets(targets, field: str = "targets") -> np.ndarray:
    """(T, 4, 4) / (4, 4) homogeneous poses or (T, 7) / (7,) position + quaternion
    (x, y, z, qx, qy, qz, qw) -> (T, 4, 4) float64 with proper rotations."""
    array = as_float_array(targets, field)
    if array.shape in ((4, 4), (7,)):
        array = array[None]
    if array.ndim == 3 and array.shape[1:] == (4, 4) and array.shape[0] > 0:
        bottom = np.abs(array[:, 3] - np.array([0, 0, 0, 1.0])).max(axis=1)
        if (bottom > 1e-9).any():
            t = int(np.argmax(bottom > 1e-9))
            raise InvalidArgument.for_field(f"{field}[{t}]", "last row must be [0, 0, 0, 1]")
        error = orthonormality_error(array[:, :3, :3])
        if (error > ROTATION_TOLERANCE).any():
            t = int(np.argmax(error > ROTATION_TOLERANCE))
            raise InvalidArgument.for_field(
                f"{field}[{t}]", f"rotation is not orthonormal (error {error[t]:.2g})")
        return array.copy()
    if array.ndim == 2 and array.shape[1] == 7 and array.shape[0] > 0:
        norms = np.linalg.norm(array[:, 3:], axis=1)
        bad = np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE
        if bad.any():
            t = int(np.argmax(bad))
            raise InvalidArgument.for_field(
                f"{field}[{t}]", f"quaternion (x, y, z, w) must have unit norm, got {norms[t]:.6g}")
        poses = np.tile(np.eye(4), (array.shape[0], 1, 1))
        poses[:, :3, :3] = quat_to_matrix(array[:, 3:])
        poses[:, :3, 3] = array[:, :3]
        return poses
    raise InvalidArgument.for_field(
        field, f"expected (T, 4, 4) poses or (T, 7) position + quaternion, got {array.shape}")
