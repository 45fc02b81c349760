"""End to end on a data engine dataset: `k4d eval run` with a tiny model (and the
static-world floor, both through `k4d simulate`), resume, then `k4d eval --pred --gt` on
the same outputs. The ground-truth episode IS a static-world rollout, so the floor's
report must be perfect, which checks the whole chain (loading, frames, regions, report)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from k4d.cli.main import main

pytest.importorskip("zarr")
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "panda_pick"
FRAMES, DOWN = 5, 15  # the tiny model's clip: 5 x 32 x 48


def _k4d(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "k4d.cli.main", *args], check=True,
                   capture_output=True, text=True)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from k4d.episodes import DatasetWriter, EpisodeMeta
    from PIL import Image

    root = tmp_path_factory.mktemp("evalrun")
    cam = json.loads((EXAMPLE / "camera.json").read_text())
    cam.update(width=48, height=32, fx=cam["fx"] / DOWN, fy=cam["fy"] / DOWN,
               cx=(cam["cx"] + 0.5) / DOWN - 0.5, cy=(cam["cy"] + 0.5) / DOWN - 0.5)
    (root / "cam.json").write_text(json.dumps(cam))
    Image.open(EXAMPLE / "scene.png").convert("RGB").resize((48, 32)).save(root / "scene.png")
    _k4d("simulate", "--robot", "panda", "--actions", str(EXAMPLE / "actions.json"),
         "--image", str(root / "scene.png"), "--camera", str(root / "cam.json"),
         "--frames", str(FRAMES), "--out", str(root / "gt_sim"), "--no-progress")
    world = np.load(root / "gt_sim" / "pointmap.npz")
    robot = np.load(root / "gt_sim" / "robot.npz")
    pointmap = np.where(world["mask"][..., None], world["pointmap"], 0).astype(np.float32)
    arrays = {"rgb": world["rgb"], "pointmap": pointmap,
              "depth": np.where(world["mask"], world["pointmap"][..., 2], 0).astype(np.float32),
              "robot_mask": robot["mask"].astype(bool), "robot_rgb": robot["rgb"],
              "robot_pointmap": robot["pointmap"].astype(np.float32),
              "joints": robot["joints"].astype(np.float64)}
    meta = EpisodeMeta(
        episode_id="ep0", frames=FRAMES, height=32, width=48, fps=24.0, task="pick the red cube",
        task_kind="pick", success=True, success_judge="test fixture", robot="panda",
        joint_names=[str(n) for n in robot["joint_names"]],
        actions=json.loads((EXAMPLE / "actions.json").read_text()), camera=cam,
        source={"kind": "test", "note": "a static-world rollout used as ground truth"},
        arrays=sorted(arrays))
    writer = DatasetWriter(root / "data")
    writer.write_episode(meta, arrays)
    _k4d("generate", "init-model", "--config", "tiny", "--out", str(root / "tiny"))
    return root


def test_eval_run_then_resume_then_eval_dirs(dataset, capsys):
    out = dataset / "run"
    args = ["eval", "run", "--model", str(dataset / "tiny"), "--data", str(dataset / "data"),
            "--out", str(out), "--workers", "2", "--no-progress", "--geometry-pixels", "0"]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    for name in ("summary.md", "summary.csv", "per_frame.png", "strip.png"):
        assert (out / name).stat().st_size > 0, name
    # The floor re-renders the ground truth's own robot and scene geometry: its geometry
    # and robot pixels are exact; its environment differs only by the frame-0 robot left
    # in the image it composites onto.
    base = report["baseline"]["metrics"]
    assert base["chamfer_l1"] == 0.0 and base["fscore"] == 1.0 and base["depth_absrel"] == 0.0
    assert base["fscore_k4d"] == 1.0
    assert report["baseline"]["regions"]["robot"]["psnr"] == 100.0
    model = report["metrics"]
    assert 0 < model["psnr"] < base["psnr"] < 100 and 0 < model["chamfer_l1"]
    assert set(report["regions"]) == {"whole", "robot", "environment", "changed", "static"}
    assert len(report["per_frame"]["psnr"]) == FRAMES
    assert report["inputs"]["generation"] == "`k4d simulate` subprocess"
    assert report["policy"]["episodes"][0]["true_success"] is True

    # Resume: outputs and cached results are reused, the report is the same.
    stamp = (out / "predictions" / "ep0" / "summary.json").stat().st_mtime_ns
    assert main(args) == 0
    assert (out / "predictions" / "ep0" / "summary.json").stat().st_mtime_ns == stamp
    again = json.loads((out / "report.json").read_text())
    assert again["metrics"] == report["metrics"]

    # The same predictions through `k4d eval --pred --gt --baseline`.
    out2 = dataset / "dirs"
    assert main(["eval", "--pred", str(out / "predictions"), "--gt", str(dataset / "data"),
                 "--baseline", str(out / "static-world"), "--out", str(out2), "--no-progress",
                 "--geometry-pixels", "0"]) == 0
    dirs = json.loads((out2 / "report.json").read_text())
    assert dirs["metrics"] == pytest.approx(report["metrics"])
    assert "PSNR" in capsys.readouterr().out


def test_eval_dirs_missing_prediction_is_one_line(dataset, tmp_path, capsys):
    # Found before the static-world floor would be generated.
    code = main(["eval", "--pred", str(tmp_path), "--gt", str(dataset / "data"),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "ep0" in err[0]
    assert not (tmp_path / "o" / "static-world").exists()


def test_eval_run_with_a_missing_model_is_one_line(dataset, tmp_path, capsys):
    # `k4d simulate --model /no/such/dir` falls back to static-world (a path that does not
    # exist parses as a registry name ""); the evaluator must not score that as the model.
    code = main(["eval", "run", "--model", str(tmp_path / "no-model"), "--data",
                 str(dataset / "data"), "--out", str(tmp_path / "o"), "--no-progress",
                 "--no-baseline"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "`k4d simulate` failed for ep0" in err[0], err
    assert not (tmp_path / "o" / "report.json").exists()


def test_eval_run_with_data_of_another_clip_size_fails_before_generation(dataset, tmp_path, capsys):
    # A model directory whose clip (9 frames at 64x40) is not the data's (5 at 48x32): the
    # size is read from k4d_model.json, the model itself is never loaded.
    model = tmp_path / "other-size"
    model.mkdir()
    meta = json.loads((dataset / "tiny" / "k4d_model.json").read_text())
    meta.update(num_frames=9, height=40, width=64)
    (model / "k4d_model.json").write_text(json.dumps(meta))
    code = main(["eval", "run", "--model", str(model), "--data", str(dataset / "data"),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"{FRAMES} frames at 48x32" in err[0] and "9 frames at 64x40" in err[0], err
    assert "--frames 9 --height 40 --width 64" in err[0]
    assert not (tmp_path / "o" / "predictions").exists()
    assert not (tmp_path / "o" / "static-world").exists()


@pytest.mark.slow  # two more `k4d simulate` runs and an evaluation (~1 min on 2 cores)
def test_eval_run_with_depth_gives_the_first_frames_depth(dataset, tmp_path, capsys):
    """--depth: both methods get the episode's first-frame depth (`k4d simulate --depth`);
    the ground truth is a static-world rollout, so the floor given its own depth is exact."""
    from k4d.episodes import open_dataset

    out = tmp_path / "rgbd"
    assert main(["eval", "run", "--model", str(dataset / "tiny"), "--data",
                 str(dataset / "data"), "--out", str(out), "--depth", "--no-progress"]) == 0
    depth = np.load(out / "inputs" / "ep0" / "depth.npy")
    truth = open_dataset(str(dataset / "data")).open("ep0").read("depth")[0]
    np.testing.assert_array_equal(depth, truth)
    report = json.loads((out / "report.json").read_text())
    assert report["inputs"]["given"] == "first frame RGB + depth"
    summary = json.loads((out / "predictions" / "ep0" / "summary.json").read_text())
    assert summary["inputs"]["depth"].endswith("depth.npy")
    assert report["baseline"]["metrics"]["depth_absrel"] < 0.01


def _export(folder: Path, seed: int) -> Path:
    """A shipped-model folder (manifest.json with every file's sha256, beside weights/) of a
    tiny model, always named tiny/1: a re-export of the same name and version."""
    from k4d.tensor_io import sha256_file

    if folder.exists():
        shutil.rmtree(folder)
    weights = folder / "weights"
    _k4d("generate", "init-model", "--config", "tiny", "--seed", str(seed), "--out", str(weights))
    files = [{"path": p.relative_to(weights).as_posix(), "size_bytes": p.stat().st_size,
              "sha256": sha256_file(p)} for p in sorted(weights.rglob("*")) if p.is_file()]
    (folder / "manifest.json").write_text(json.dumps(
        {"name": "tiny", "version": "1", "files": files, "weights_dir": "weights"}))
    return folder


@pytest.mark.slow  # two more models and `k4d simulate` runs (~55 s on 2 cores)
def test_eval_run_resumed_with_another_model_generates_again(dataset, tmp_path, capsys):
    """Resume reuses rollouts only of the same model content: a re-export of the same name
    and version with other weights (another manifest) makes every rollout and result again."""
    out, model = tmp_path / "run", tmp_path / "model"
    args = ["eval", "run", "--model", str(_export(model, 0)), "--data", str(dataset / "data"),
            "--out", str(out), "--no-baseline", "--no-progress", "--geometry-pixels", "0"]
    assert main(args) == 0
    summary = out / "predictions" / "ep0" / "summary.json"
    first, first_report = summary.read_bytes(), json.loads((out / "report.json").read_text())
    capsys.readouterr()

    _export(model, 1)
    assert main(args) == 0
    assert "generating all 1 again" in capsys.readouterr().out
    assert summary.read_bytes() != first
    ids = {json.loads(b)["model"]["id"] for b in (first, summary.read_bytes())}
    assert len(ids) == 2  # the rollout is the new model's (its content hash)
    again = json.loads((out / "report.json").read_text())
    assert again["metrics"]["psnr"] != first_report["metrics"]["psnr"]  # not the cached result
