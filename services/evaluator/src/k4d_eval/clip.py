"""The evaluator's view of one clip (a prediction or its ground truth).

Loaders (`k4d_eval.inputs`) turn NPZ pairs, `k4d simulate` output directories and data
engine episodes into `Clip`s; the metric code sees only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from k4d.camera import Camera


@dataclass
class Clip:
    """rgb: (T, H, W, 3) uint8.
    pointmap: (T, H, W, 3) float32 in the FIRST frame's camera (OpenCV), metres; None when
      the clip has no geometry. Values off `valid` are ignored.
    valid: (T, H, W) bool, pixels with a point.
    depth: (T, H, W) float32 z in each frame's own camera, metres (0 = none).
    robot_mask: (T, H, W) bool robot pixels (ground truth or the robot condition).
    object_ids: (T, H, W) int16 (-1 background, 0 robot, k >= 1 object k), synthetic only.
    object_poses: (T, K, 7) world xyz + quaternion xyzw of objects 1..K, synthetic only.
    T_cam_from_world: (T, 4, 4) camera extrinsics when known (judging in the world frame).
    camera: the clip's Camera (one, or one per frame) when known (episodes; the recording).
    """

    rgb: np.ndarray
    pointmap: np.ndarray | None = None
    valid: np.ndarray | None = None
    depth: np.ndarray | None = None
    robot_mask: np.ndarray | None = None
    object_ids: np.ndarray | None = None
    object_poses: np.ndarray | None = None
    T_cam_from_world: np.ndarray | None = None
    camera: Camera | list[Camera] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return int(self.rgb.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        return int(self.rgb.shape[1]), int(self.rgb.shape[2])

    @property
    def has_geometry(self) -> bool:
        return self.pointmap is not None
