"""Plain result and condition containers (numpy only, no torch import): shared by the
Kinema4D pipeline and the static-world generator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from k4d.errors import InvalidArgument


@dataclass
class RobotCondition:
    """Robot-only inputs, pixel-aligned with the image.

    rgb: (T, H, W, 3) uint8 robot render on black; pointmap: (T, H, W, 3) float32 metres,
    camera frame; mask: (T, H, W) bool occupancy (authoritative)."""

    rgb: np.ndarray
    pointmap: np.ndarray
    mask: np.ndarray

    @classmethod
    def empty(cls, num_frames: int, height: int, width: int) -> RobotCondition:
        """No robot in view: a natural negative condition for robot guidance."""
        return cls(np.zeros((num_frames, height, width, 3), np.uint8),
                   np.zeros((num_frames, height, width, 3), np.float32),
                   np.zeros((num_frames, height, width), bool))


@dataclass
class GenerationResult:
    """rgb: (T, H, W, 3) uint8; pointmap: (T, H, W, 3) float32 camera frame, metres when
    `metadata["pointmap_units"] == "metres"`; metadata: model, sampling, timings."""

    rgb: np.ndarray
    pointmap: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)


def check_robot(prefix: str, robot: RobotCondition, size: tuple[int, int, int]) -> None:
    """Validate robot arrays against (frames, H, W); field names are `<prefix>_rgb` etc."""
    t, h, w = size
    checks = (("rgb", robot.rgb, (t, h, w, 3), np.uint8),
              ("pointmap", robot.pointmap, (t, h, w, 3), np.float32),
              ("mask", robot.mask, (t, h, w), np.bool_))
    for name, array, shape, dtype in checks:
        field_name = f"{prefix}_{name}"
        if not isinstance(array, np.ndarray) or array.dtype != dtype:
            raise InvalidArgument.for_field(field_name, f"must be a {np.dtype(dtype).name} "
                                                        "array")
        if array.shape != shape:
            raise InvalidArgument.for_field(field_name, f"has shape {array.shape}; the model "
                                                        f"needs {shape} (frames, H, W)")
    if not np.isfinite(robot.pointmap).all():
        raise InvalidArgument.for_field(f"{prefix}_pointmap", "contains NaN or inf")
