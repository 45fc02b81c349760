"""Frames drawn from a sampled scene motion (k4d_model.tracks): a still scene comes back
exactly, even from estimated points that do not project onto their pixels; a moved block is
drawn where it went, over the table behind it, and its old place is filled from around it;
frame 0's robot is not carried; with no pinhole to project through, a clear refusal."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.errors import FailedPrecondition
from k4d_model.tracks import frames_from_tracks, render_tracks, splat

H, W, FOCAL = 16, 24, 20.0
CAMERA = Camera(width=W, height=H, fx=FOCAL, fy=FOCAL, cx=(W - 1) / 2, cy=(H - 1) / 2)
BLOCK = (slice(4, 8), slice(5, 10))
RED = np.array([250.0, 10.0, 10.0])


def _rays() -> np.ndarray:
    rows, cols = np.mgrid[0:H, 0:W].astype(np.float64)
    return np.stack([(cols - CAMERA.cx) / FOCAL, (rows - CAMERA.cy) / FOCAL, np.ones_like(rows)],
                    -1)


def _scene() -> tuple[np.ndarray, np.ndarray]:
    """A table at 2 m with a smooth grey-blue gradient, and a red block at 1 m."""
    depth = np.full((H, W), 2.0)
    depth[BLOCK] = 1.0
    points = (_rays() * depth[..., None]).astype(np.float32)
    cols = np.arange(W, dtype=np.float64)
    image = np.zeros((H, W, 3))
    image[...] = np.stack([40 + 2 * cols, 60 + 2 * cols, 120 + 2 * cols], -1)[None]
    image[BLOCK] = RED
    return image.astype(np.uint8), points


def test_a_still_scene_comes_back_exactly_even_from_estimated_points():
    image, points = _scene()
    noisy = points + np.random.default_rng(0).normal(0.0, 0.03, points.shape).astype(np.float32)
    sources = np.ones((H, W), bool)
    rgb, out_points = render_tracks(image, noisy, np.zeros((3, H, W, 3), np.float32), sources,
                                    CAMERA)
    for t in range(3):
        np.testing.assert_array_equal(rgb[t], image.astype(np.float32))
        np.testing.assert_allclose(out_points[t], noisy, atol=1e-6)


def test_a_moved_block_is_drawn_where_it_went_and_its_old_place_filled():
    image, points = _scene()
    motion = np.zeros((2, H, W, 3), np.float32)
    motion[1][BLOCK] = [2.0 / FOCAL, 1.0 / FOCAL, 0.0]  # 2 px right, 1 px down at 1 m
    rgb, out_points = render_tracks(image, points, motion, np.ones((H, W), bool), CAMERA)
    moved = (slice(5, 9), slice(7, 12))
    np.testing.assert_array_equal(rgb[1][moved], np.broadcast_to(RED, (4, 5, 3)))
    # the block lands over the table (2 m) behind it: the nearer surface is kept
    np.testing.assert_allclose(out_points[1][moved][..., 2], 1.0, atol=1e-6)
    uncovered = rgb[1][4, 5:7]  # where the block stood and nothing came: filled from the table
    assert (np.abs(uncovered - RED).max(axis=-1) > 100).all()
    # ... and its points lie on their pixels' rays, at a depth filled in from around them
    filled = out_points[1][4, 5:7]
    assert ((filled[:, 2] > 1.0) & (filled[:, 2] <= 2.0)).all()
    np.testing.assert_allclose(filled / filled[:, 2:], _rays()[4, 5:7], atol=1e-5)
    np.testing.assert_array_equal(rgb[1][12:], image[12:].astype(np.float32))  # the table stays


def test_splat_keeps_the_nearest_of_two_surfaces_on_one_pixel():
    values = np.array([[[1.0], [2.0]]], np.float32)  # (1, 2, 1)
    camera = Camera(width=2, height=1, fx=1.0, fy=1.0, cx=0.0, cy=0.0)
    first = np.array([[[0.0, 0.0, 1.0], [2.0, 0.0, 2.0]]], np.float32)  # pixels 0 and 1
    moved = np.array([[[1.0, 0.0, 1.0], [2.0, 0.0, 2.0]]], np.float32)  # both on pixel 1
    out, landed, covered = splat(values, first, moved, np.ones((1, 2), bool), camera)
    assert covered.tolist() == [[False, True]] and out[0, 1, 0] == 1.0 and landed[0, 1, 2] == 1.0


def test_frames_from_tracks_fits_the_robots_camera_and_does_not_carry_frame_0s_robot():
    image, points = _scene()
    robot_mask = np.zeros((2, H, W), bool)
    robot_mask[:, 10:14, 16:22] = True
    robot_points = np.where(robot_mask[..., None], (_rays() * 0.8)[None], 0.0).astype(np.float32)
    tracks = np.repeat(points[None], 2, 0)
    rgb, out_points = frames_from_tracks(image, tracks, points, robot_points, robot_mask)
    assert rgb.dtype == np.uint8 and rgb.shape == (2, H, W, 3)
    np.testing.assert_array_equal(rgb[1][~robot_mask[0]], image[~robot_mask[0]])
    # frame 0's robot pixels are filled from the table around them, not the image's robot
    image_with_robot = image.copy()
    image_with_robot[robot_mask[0]] = 255
    rgb, _ = frames_from_tracks(image_with_robot, tracks, points, robot_points, robot_mask)
    assert (rgb[1][robot_mask[0]] < 255).all()


def test_no_pinhole_to_draw_with_is_refused():
    image, points = _scene()
    empty = np.zeros((2, H, W), bool)
    nothing = np.zeros((H, W, 3), np.float32)
    with pytest.raises(FailedPrecondition, match="no pinhole"):
        frames_from_tracks(image, np.zeros((2, H, W, 3), np.float32), nothing,
                           np.zeros((2, H, W, 3), np.float32), empty)
