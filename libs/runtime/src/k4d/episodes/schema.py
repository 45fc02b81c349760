"""Names, shapes and dtypes of the episode arrays (the public schema, docs/data.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ArraySpec:
    """`dims` name each axis: T frames, H/W image, J joints, K objects; ints are fixed."""

    dims: tuple[str | int, ...]
    dtype: np.dtype
    doc: str


ARRAY_SPECS: dict[str, ArraySpec] = {
    "rgb": ArraySpec(("T", "H", "W", 3), np.dtype(np.uint8), "video frames"),
    "depth": ArraySpec(("T", "H", "W"), np.dtype(np.float32), "metres along the optical axis, 0 = invalid"),
    "pointmap": ArraySpec(("T", "H", "W", 3), np.dtype(np.float32),
                          "camera frame, metres, zeros where invalid"),
    "robot_mask": ArraySpec(("T", "H", "W"), np.dtype(np.bool_), "robot pixels"),
    "robot_rgb": ArraySpec(("T", "H", "W", 3), np.dtype(np.uint8), "robot-only render, black background"),
    "robot_pointmap": ArraySpec(("T", "H", "W", 3), np.dtype(np.float32),
                                "camera frame, metres, zeros off the robot"),
    "joints": ArraySpec(("T", "J"), np.dtype(np.float64), "radians/metres, order = meta.joint_names"),
    "object_ids": ArraySpec(("T", "H", "W"), np.dtype(np.int16),
                            "-1 background/table, 0 robot, k >= 1 object k"),
    "object_poses": ArraySpec(("T", "K", 7), np.dtype(np.float64),
                              "world frame xyz + quaternion xyzw of objects 1..K"),
}
REQUIRED_ARRAYS = ("rgb", "robot_mask", "robot_rgb", "robot_pointmap", "joints")
OPTIONAL_ARRAYS = tuple(name for name in ARRAY_SPECS if name not in REQUIRED_ARRAYS)


def expected_shape(name: str, sizes: dict[str, int]) -> tuple[int, ...]:
    """The shape array `name` must have given the episode's sizes {T, H, W, J, K}."""
    return tuple(sizes[d] if isinstance(d, str) else d for d in ARRAY_SPECS[name].dims)
