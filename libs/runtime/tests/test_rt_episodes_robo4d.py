"""k4d.episodes.robo4d: the Robo4D-200k layout written from an episode and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from k4d.episodes import DatasetWriter, EpisodeMeta, open_dataset
from k4d.episodes.robo4d import TRAIN_IMAGE_LIST, TRAIN_LIST, read_robo4d, write_episode
from k4d.errors import NotFound

T, H, W = 4, 24, 32


def episode_with_geometry(tmp_path, with_pointmap=True):
    rng = np.random.default_rng(5)
    v, u = np.mgrid[0:H, 0:W]
    depth = (1.0 + 0.3 * np.sin(u / 5.0) + 0.1 * v / H)[None].repeat(T, 0).astype(np.float32)
    depth[:, :3, :4] = 0.0  # invalid pixels
    f, cx, cy = 30.0, (W - 1) / 2, (H - 1) / 2
    pointmap = np.stack([(u - cx) / f * depth, (v - cy) / f * depth, depth], -1).astype(np.float32)
    mask = np.zeros((T, H, W), bool)
    for t in range(T):
        mask[t, 8:16, 6 + 2 * t:18 + 2 * t] = True
    robot_pointmap = np.where(mask[..., None], pointmap * 0.9, 0).astype(np.float32)
    robot_rgb = np.where(mask[..., None], rng.integers(30, 255, (T, H, W, 3)), 0).astype(np.uint8)
    meta = EpisodeMeta("ep_0", T, H, W, 8.0, "push", "push", True, "pose", "panda", ["j0"],
                       {"type": "joint_positions"},
                       {"width": W, "height": H, "fx": f, "fy": f, "cx": cx, "cy": cy,
                        "T_cam_from_world": np.eye(4).tolist()})
    arrays = {"rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8), "robot_mask": mask,
              "robot_rgb": robot_rgb, "robot_pointmap": robot_pointmap, "joints": np.zeros((T, 1))}
    if with_pointmap:
        arrays.update(depth=depth, pointmap=pointmap)
    DatasetWriter(tmp_path / "ds").write_episode(meta, arrays)
    return open_dataset(tmp_path / "ds").open("ep_0"), arrays


def test_export_and_read_back(tmp_path):
    episode, arrays = episode_with_geometry(tmp_path)
    root = tmp_path / "robo4d"
    write_episode(root, episode)
    write_episode(root, episode)  # idempotent: listed once
    assert (root / TRAIN_LIST).read_text() == "videos/ep_0.mp4\n"
    assert (root / TRAIN_IMAGE_LIST).read_text() == "first_frames/ep_0.png\n"
    for rel in ("first_frames/ep_0.png", "videos/ep_0.mp4", "pointmap/ep_0.mp4", "pointmap/ep_0.json",
                "mask_videos/ep_0.mp4", "mask_pointmap/ep_0.mp4", "mask_pointmap/ep_0.json"):
        assert (root / rel).is_file(), rel
    meta = json.loads((root / "pointmap" / "ep_0.json").read_text())
    assert len(meta["centre"]) == T and len(meta["scale"]) == T

    layout = read_robo4d(root)
    assert layout.names == ["ep_0"] and len(layout) == 1
    sample = layout.read("ep_0")
    np.testing.assert_array_equal(sample.rgb, arrays["rgb"])  # lossless video
    np.testing.assert_array_equal(sample.first_frame, arrays["rgb"][0])
    np.testing.assert_array_equal(sample.robot_rgb, arrays["robot_rgb"])
    np.testing.assert_array_equal(sample.robot_mask, arrays["robot_mask"])
    # 8-bit codes: inside the 2-98 % clip box the error is <= one code step per axis.
    for got, want, m, meta in (
            (sample.robot_pointmap, arrays["robot_pointmap"], arrays["robot_mask"], sample.robot_pointmap_meta),
            (sample.pointmap, arrays["pointmap"], arrays["depth"] > 0, sample.pointmap_meta)):
        assert np.all(got[~m] == 0)
        for t in range(T):
            err = np.linalg.norm(got[t] - want[t], axis=-1)[m[t]]
            step = np.sqrt(3) * meta["scale"][t] / 255 * 1.001
            assert np.mean(err <= step) >= 0.9, (t, np.mean(err <= step))


def test_without_depth_and_official_style_files(tmp_path):
    episode, arrays = episode_with_geometry(tmp_path, with_pointmap=False)
    root = tmp_path / "robo4d"
    write_episode(root, episode, name="clip7")
    assert not (root / "pointmap" / "clip7.mp4").exists()
    (root / "mask_pointmap" / "clip7.json").unlink()  # the official data carries no metadata
    sample = read_robo4d(root).read("clip7")
    assert sample.pointmap is None and sample.robot_pointmap is None and sample.pointmap_u8 is None
    np.testing.assert_array_equal(sample.robot_mask, arrays["robot_mask"])
    assert sample.robot_pointmap_u8.dtype == np.uint8


def test_errors(tmp_path):
    with pytest.raises(NotFound, match="not a Robo4D layout"):
        read_robo4d(tmp_path)
    episode, _ = episode_with_geometry(tmp_path)
    write_episode(tmp_path / "r", episode)
    with pytest.raises(NotFound):
        read_robo4d(tmp_path / "r").read("other")
