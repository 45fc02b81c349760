"""`k4d eval` writes its Rerun recording (ground truth beside prediction, per-frame metrics
as plots), read back with rerun's own chunk reader; `k4d view OUT` resolves an evaluation
directory to it; without rerun-sdk the evaluation still succeeds and says why no
recording was written."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from k4d.cli.main import main

pytest.importorskip("zarr")

T, H, W = 3, 32, 48
CAMERA = {"fx": 40.0, "fy": 40.0, "cx": 23.5, "cy": 15.5, "width": W, "height": H,
          "T_cam_from_world": np.eye(4).tolist()}
GT, PRED = "/world/ground_truth", "/world/prediction"


def _scene(rng):
    v, u = np.mgrid[0:H, 0:W]
    z = np.broadcast_to(1.2 + 0.1 * np.sin(u / 6.0), (T, H, W)).astype(np.float32)
    pm = np.stack([(u - 23.5) / 40 * z, (v - 15.5) / 40 * z, z], -1).astype(np.float32)
    rgb = rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8)
    robot = np.zeros((T, H, W), bool)
    robot[:, 4:12, 6:20] = True
    return rgb, pm, robot


def _noisy(rng, rgb, pm):
    rgb2 = np.clip(rgb.astype(int) + rng.integers(-12, 13, rgb.shape), 0, 255).astype(np.uint8)
    return rgb2, (pm + rng.normal(0, 0.005, pm.shape)).astype(np.float32)


@pytest.fixture
def pair(tmp_path, rng):
    rgb, pm, robot = _scene(rng)
    np.savez(tmp_path / "gt.npz", rgb=rgb, pointmap=pm, mask=np.ones((T, H, W), bool),
             robot_mask=robot)
    rgb2, pm2 = _noisy(rng, rgb, pm)
    np.savez(tmp_path / "pred.npz", rgb=rgb2, pointmap=pm2, mask=np.ones((T, H, W), bool))
    (tmp_path / "cam.json").write_text(json.dumps(CAMERA))
    return tmp_path


def _assert_comparison(path, metric_names=("psnr", "ssim", "chamfer_l1", "fscore")):
    from k4d.recording import read_recording_index

    index = read_recording_index(path)
    for root in (GT, PRED):
        for entity in ("camera/image", "camera/points"):
            assert index.frames[f"{root}/{entity}"] == list(range(T)), (root, entity)
    assert index.frames[f"{GT}/camera/image/robot_mask"] == list(range(T))
    for name in metric_names:
        entity = f"/plots/metrics/{name}"
        assert index.frames[entity] == list(range(T)), name
        rows = sum(b.num_rows for b in index.batches[entity] if "frame" in b.schema.names)
        assert rows == T, (name, rows)  # one value per frame
    return index


def test_pair_with_camera_writes_the_comparison(pair, capsys):
    pytest.importorskip("rerun")
    out = pair / "o"
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(out), "--camera", str(pair / "cam.json")]) == 0
    assert "comparison recording" not in capsys.readouterr().out
    _assert_comparison(out / "comparison.rrd")
    report = json.loads((out / "report.json").read_text())
    assert len(report["per_frame"]["psnr"]) == T
    # the plotted values are the report's per-frame values (one episode: the same numbers)
    index = read_index(out / "comparison.rrd")
    for name in ("psnr", "chamfer_l1"):
        batch = next(b for b in index.batches[f"/plots/metrics/{name}"]
                     if "frame" in b.schema.names)
        column = next(n for n in batch.schema.names if n.endswith("scalars"))
        plotted = [v[0] for v in batch.column(column).to_pylist()]
        assert plotted == pytest.approx(report["per_frame"][name]), name


def test_pair_without_camera_says_so_and_writes_none(pair, capsys):
    out = pair / "o"
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(out)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "comparison recording" in ln]
    assert len(lines) == 1 and "--camera" in lines[0]
    assert (out / "report.json").is_file() and not list(out.glob("*.rrd"))


def test_pair_with_a_camera_of_another_size_is_one_line(pair, capsys):
    pytest.importorskip("rerun")
    (pair / "bad.json").write_text(json.dumps({**CAMERA, "width": 64}))
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(pair / "o"), "--camera", str(pair / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("k4d eval: error:") and "48x32" in err[0]


def test_without_rerun_the_evaluation_succeeds_and_says_why(pair, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rerun", None)  # import rerun -> ImportError
    out = pair / "o"
    assert main(["eval", "pair", str(pair / "pred.npz"), str(pair / "gt.npz"),
                 "--out", str(out), "--camera", str(pair / "cam.json")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "recording" in ln]
    assert len(lines) == 1 and "skipped" in lines[0] and "k4d-runtime[viz]" in lines[0]
    assert (out / "report.json").is_file() and not list(out.glob("*.rrd"))


@pytest.fixture
def dataset(tmp_path, rng):
    """A two-episode data engine dataset and `k4d simulate`-shaped prediction directories
    (pointmap.npz, robot.npz) named by episode id."""
    from k4d.episodes import DatasetWriter, EpisodeMeta

    writer = DatasetWriter(tmp_path / "data")
    for episode_id in ("ep0", "ep1"):
        rgb, pm, robot = _scene(rng)
        meta = EpisodeMeta(
            episode_id=episode_id, frames=T, height=H, width=W, fps=12.0, task="pick",
            task_kind="pick", success=True, success_judge="test fixture", robot="panda",
            joint_names=["joint1"], actions={}, camera=CAMERA, source={"kind": "test"},
            arrays=["depth", "joints", "pointmap", "rgb", "robot_mask", "robot_pointmap",
                    "robot_rgb"])
        writer.write_episode(meta, {"rgb": rgb, "pointmap": pm, "depth": pm[..., 2].copy(),
                                    "robot_mask": robot, "joints": np.zeros((T, 1)),
                                    "robot_rgb": rgb, "robot_pointmap": pm * robot[..., None]})
        pred = tmp_path / "pred" / episode_id
        pred.mkdir(parents=True)
        rgb2, pm2 = _noisy(rng, rgb, pm)
        np.savez(pred / "pointmap.npz", rgb=rgb2, pointmap=pm2, mask=np.ones((T, H, W), bool))
        np.savez(pred / "robot.npz", mask=robot)
    return tmp_path


def test_eval_dirs_write_one_recording_per_episode_and_view_opens_them(dataset, capsys):
    pytest.importorskip("rerun")
    view = pytest.importorskip("k4d_embedded.view")
    out = dataset / "eval"
    args = ["eval", "--pred", str(dataset / "pred"), "--gt", str(dataset / "data"),
            "--out", str(out), "--no-baseline", "--no-progress"]
    assert main(args) == 0
    recordings = [out / "comparison" / "ep0.rrd", out / "comparison" / "ep1.rrd"]
    for path in recordings:
        _assert_comparison(path)
        # the prediction's robot pixels are the condition's (robot.npz)
        assert read_index(path).frames[f"{PRED}/camera/image/robot_mask"] == list(range(T))
    # `k4d view OUT` on the evaluation directory opens exactly these recordings
    assert view.find_recordings(out) == [p.resolve() for p in recordings]

    # resume: cached results are reused, and a deleted recording is written again
    stamp = recordings[0].stat().st_mtime_ns
    recordings[1].unlink()
    assert main(args) == 0
    assert recordings[0].stat().st_mtime_ns == stamp and recordings[1].is_file()


def test_eval_dirs_without_rerun_succeed_and_say_why(dataset, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rerun", None)
    out = dataset / "eval"
    assert main(["eval", "--pred", str(dataset / "pred"), "--gt", str(dataset / "data"),
                 "--out", str(out), "--no-baseline", "--no-progress"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "recording" in ln]
    assert len(lines) == 1 and lines[0].startswith("k4d eval: comparison recording skipped")
    assert (out / "report.json").is_file() and not (out / "comparison").exists()


def read_index(path):
    from k4d.recording import read_recording_index

    return read_recording_index(path)


def test_points_go_back_to_each_frames_camera(rng):
    """The evaluator keeps points in the first frame's camera; the recording logs them in
    each frame's own camera under that frame's pose (a moving camera)."""
    from k4d_eval.clip import Clip
    from k4d_eval.comparison_recording import _clip_arrays
    from k4d_eval.inputs import to_first_camera

    rgb, pm, _ = _scene(rng)
    poses = np.stack([np.eye(4)] * T)
    for t in range(T):
        c, s = np.cos(0.2 * t), np.sin(0.2 * t)
        poses[t, :3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
        poses[t, :3, 3] = [0.1 * t, -0.05 * t, 0.02]
    valid = np.ones((T, H, W), bool)
    valid[:, 0, 0] = False
    clip = Clip(rgb=rgb, pointmap=to_first_camera(pm, valid, poses), valid=valid)
    arrays = _clip_arrays(clip, poses)
    np.testing.assert_allclose(arrays["pointmap"][valid], pm[valid], atol=1e-5)
    assert not arrays["pointmap"][~valid].any() and arrays["mask"] is valid
