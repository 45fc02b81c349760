"""An episode stored with depth only: the evaluator's ground-truth points come from the
episode's Camera (its ray directions, lens distortion included), issue 19 point 2."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera

pytest.importorskip("zarr")
T, H, W = 2, 12, 16
CAMERA = Camera(width=W, height=H, fx=14.0, fy=14.0, cx=(W - 1) / 2, cy=(H - 1) / 2,
                distortion=(-0.25, 0.05, 0.002, -0.001, 0.0))


def test_depth_only_episode_is_backprojected_through_the_distorted_camera(tmp_path, rng):
    from k4d.episodes import DatasetWriter, EpisodeMeta, open_dataset
    from k4d_eval.inputs import load_episode

    depth = rng.uniform(0.8, 1.6, (T, H, W)).astype(np.float32)
    depth[:, 0, 0] = 0  # no depth: no point
    arrays = {"rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8), "depth": depth,
              "robot_mask": np.zeros((T, H, W), bool), "robot_rgb": np.zeros((T, H, W, 3), np.uint8),
              "robot_pointmap": np.zeros((T, H, W, 3), np.float32), "joints": np.zeros((T, 1))}
    meta = EpisodeMeta(episode_id="ep0", frames=T, height=H, width=W, fps=10.0, task="t",
                       task_kind="import", success=None, success_judge="", robot="panda",
                       joint_names=["j0"], actions={}, camera=CAMERA.to_dict())
    DatasetWriter(tmp_path / "data").write_episode(meta, arrays)

    clip = load_episode(open_dataset(tmp_path / "data"), "ep0")

    expected = np.stack([CAMERA.points_from_depth(d) for d in depth])
    np.testing.assert_allclose(clip.pointmap, expected, atol=1e-6)
    assert not clip.valid[:, 0, 0].any() and clip.valid[:, 1:, 1:].all()
    assert clip.camera == CAMERA
    # The lens matters here: the pinhole back-projection (what the evaluator did before)
    # misses the points by centimetres at the image corners.
    v, u = np.mgrid[0:H, 0:W]
    pinhole_x = (u - CAMERA.cx) / CAMERA.fx * depth
    assert np.abs(pinhole_x - clip.pointmap[..., 0]).max() > 0.01
    # and the distorted camera projects each point back onto its own pixel
    uv = CAMERA.project(clip.pointmap[0, 1:, 1:].astype(np.float64))
    np.testing.assert_allclose(uv[..., 0], u[1:, 1:], atol=1e-4)
    np.testing.assert_allclose(uv[..., 1], v[1:, 1:], atol=1e-4)
