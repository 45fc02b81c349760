"""`static-world` generator: used when no trained model is given.

It does NOT generate dynamics. Each output frame is the unchanged initial image with
the robot render composited where the robot mask is set; the pointmap is a flat
fronto-parallel plane standing for the scene (at a depth behind the robot) with the
robot's own points composited on top. Every result says so in its metadata
(`generator: "static-world"`, `generated: false`) so nobody mistakes it for a model's
prediction. Same call signature as `Kinema4DPipeline`, plus the camera intrinsics.
"""

from __future__ import annotations

import time

import numpy as np
from k4d.errors import InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d_model.results import GenerationResult, RobotCondition, check_robot

STATIC_WORLD_NOTE = ("static-world: the initial image with the robot render composited; the "
                     "scene does not react. Not a model prediction.")


def plane_depth(robot_pointmap: np.ndarray, robot_mask: np.ndarray, default_m: float = 1.5
                ) -> float:
    """Depth of the stand-in scene plane: behind the robot (98th percentile of the robot's
    depth + 20%), or `default_m` when the robot is not in view."""
    depths = robot_pointmap[..., 2][robot_mask]
    depths = depths[depths > 0]
    return float(np.percentile(depths, 98) * 1.2) if depths.size else default_m


def plane_pointmap(height: int, width: int, fx: float, fy: float, cx: float, cy: float,
                   depth_m: float) -> np.ndarray:
    """(H, W, 3) float32 camera-frame points of the plane z = depth_m (OpenCV pinhole)."""
    v, u = np.mgrid[0:height, 0:width].astype(np.float32)
    return np.stack([(u - cx) / fx * depth_m, (v - cy) / fy * depth_m,
                     np.full_like(u, depth_m)], axis=-1).astype(np.float32)


def intrinsics_from_pointmap(pointmap: np.ndarray, mask: np.ndarray
                             ) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) recovered from a pinhole-projected pointmap by least squares on
    u = fx * x / z + cx and v = fy * y / z + cy over the masked pixels; a 60 degree field of
    view centred on the image when fewer than 16 valid points exist."""
    _, height, width = mask.shape
    t, v, u = np.nonzero(mask & (pointmap[..., 2] > 1e-6))
    if u.size < 16:
        return _centred_60_degree_intrinsics(height, width)
    points = pointmap[t, v, u].astype(np.float64)
    x_over_z, y_over_z = points[:, 0] / points[:, 2], points[:, 1] / points[:, 2]
    fx, cx = np.linalg.lstsq(np.stack([x_over_z, np.ones_like(x_over_z)], 1), u, rcond=None)[0]
    fy, cy = np.linalg.lstsq(np.stack([y_over_z, np.ones_like(y_over_z)], 1), v, rcond=None)[0]
    if not (fx > 0 and fy > 0):
        return _centred_60_degree_intrinsics(height, width)
    return (float(fx), float(fy), float(cx), float(cy))


def _centred_60_degree_intrinsics(height: int, width: int) -> tuple[float, float, float, float]:
    """The fallback camera: a 60 degree horizontal field of view, principal point centred."""
    f = (width / 2.0) / np.tan(np.radians(30.0))
    return (f, f, (width - 1) / 2.0, (height - 1) / 2.0)


class StaticWorldGenerator:
    """Composites the robot condition onto the unchanged initial scene."""

    name = STATIC_WORLD

    def __call__(self, image: np.ndarray, robot_rgb: np.ndarray, robot_pointmap: np.ndarray,
                 robot_mask: np.ndarray,
                 intrinsics: tuple[float, float, float, float] | None = None,
                 scene_depth_m: float | None = None, seed: int = 0,
                 initial_pointmap: np.ndarray | None = None, **_ignored
                 ) -> GenerationResult:
        """image (H, W, 3) uint8; robot_* (T, H, W, ...); intrinsics (fx, fy, cx, cy) pixels,
        recovered from the robot pointmap when not given; initial_pointmap (H, W, 3) metres,
        the first frame's observed points (zeros = unknown): the scene then keeps them, and
        the plane stands in only where they are unknown."""
        started = time.perf_counter()
        robot = RobotCondition(robot_rgb, robot_pointmap, robot_mask)
        self.check_inputs(image, robot, intrinsics)
        if intrinsics is None:
            intrinsics = intrinsics_from_pointmap(robot_pointmap, robot_mask)
        fx, fy, cx, cy = (float(v) for v in intrinsics)
        height, width = image.shape[:2]
        depth = scene_depth_m if scene_depth_m is not None else plane_depth(robot_pointmap,
                                                                            robot_mask)
        mask = robot_mask[..., None]
        rgb = np.where(mask, robot_rgb, image[None]).astype(np.uint8)
        scene = plane_pointmap(height, width, fx, fy, cx, cy, depth)
        if initial_pointmap is not None:
            if initial_pointmap.shape != scene.shape or not np.isfinite(initial_pointmap).all():
                raise InvalidArgument.for_field("initial_pointmap",
                                                f"must be a finite {scene.shape} array of metres")
            known = initial_pointmap[..., 2:] > 0
            scene = np.where(known, initial_pointmap, scene).astype(np.float32)
        pointmap = np.where(mask, robot_pointmap, scene[None]).astype(np.float32)
        metadata = {"generator": self.name, "generated": False, "note": STATIC_WORLD_NOTE,
                    "backend": {"backend": self.name}, "seed": int(seed),
                    "scene_plane_depth_m": depth,
                    "initial_pointmap": initial_pointmap is not None, "intrinsics": [fx, fy, cx, cy], "pointmap_units": "metres",
                    "timings_s": {"total": time.perf_counter() - started}}
        return GenerationResult(rgb, pointmap, metadata)

    @staticmethod
    def check_inputs(image: np.ndarray, robot: RobotCondition, intrinsics) -> None:
        if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3
                and image.shape[2] == 3):
            raise InvalidArgument.for_field("image", "must be an (H, W, 3) uint8 array")
        t = robot.rgb.shape[0] if isinstance(robot.rgb, np.ndarray) and robot.rgb.ndim == 4 else 0
        if t < 1:
            raise InvalidArgument.for_field("robot_rgb", "must be a (T, H, W, 3) uint8 array")
        check_robot("robot", robot, (t, *image.shape[:2]))
        if intrinsics is None:
            return
        if len(intrinsics) != 4 or not all(np.isfinite(v) for v in intrinsics) \
                or intrinsics[0] <= 0 or intrinsics[1] <= 0:
            raise InvalidArgument.for_field("intrinsics", "must be (fx, fy, cx, cy), fx, fy > 0")
