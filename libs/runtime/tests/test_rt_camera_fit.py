"""k4d.camera.fit_pinhole: the camera of points ray-cast through it, recovered exactly."""

from __future__ import annotations

import numpy as np
from k4d.camera import Camera, fit_pinhole

CAMERA = Camera(width=48, height=32, fx=40.0, fy=42.0, cx=23.5, cy=15.0)


def _ray_cast(mask: np.ndarray, seed: int = 0) -> np.ndarray:
    depth = np.random.default_rng(seed).uniform(0.5, 1.5, mask.shape)
    return np.stack([CAMERA.points_from_depth(np.where(m, d, 0.0))
                     for m, d in zip(mask, depth, strict=True)])


def test_fit_recovers_the_camera_of_ray_cast_points():
    mask = np.zeros((3, 32, 48), bool)
    mask[0, 5:9, 10:14] = True
    mask[2, 20:25, 30:40] = True
    fitted = fit_pinhole(_ray_cast(mask), mask)
    for key in ("fx", "fy", "cx", "cy"):
        assert abs(getattr(fitted, key) - getattr(CAMERA, key)) < 1e-3, key
    assert (fitted.width, fitted.height) == (48, 32)
    depth = np.full((32, 48), 0.9)
    assert np.allclose(fitted.points_from_depth(depth), CAMERA.points_from_depth(depth),
                       atol=1e-5)


def test_fit_refuses_too_few_or_degenerate_points():
    mask = np.zeros((1, 32, 48), bool)
    mask[0, 3, 3:10] = True  # 7 pixels
    assert fit_pinhole(_ray_cast(mask), mask) is None
    column = np.zeros((1, 32, 48), bool)
    column[0, :, 7] = True  # 32 pixels, one column: no horizontal spread
    assert fit_pinhole(_ray_cast(column), column) is None
    behind = np.zeros((1, 32, 48), bool)
    behind[0, 5:15, 5:15] = True
    assert fit_pinhole(-_ray_cast(behind), behind) is None  # nothing in front of the camera
