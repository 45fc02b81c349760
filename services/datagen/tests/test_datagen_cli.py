"""`k4d datagen synthetic | export | stats` end to end: 8 episodes in two processes,
determinism (same bytes), resume after a crash, the exports (and a LeRobot v3.0 export of the
whole dataset imported back), `k4d simulate` replaying an exported episode (robot mask
IoU >= 0.99), and bad input (one line, exit 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from k4d.cli.main import main
from k4d.episodes import open_dataset
from k4d.episodes.robo4d import read_robo4d

SMALL = ["--frames", "5", "--height", "48", "--width", "64"]


def k4d(*argv) -> int:
    return main([str(a) for a in argv])


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "synth"
    assert k4d("datagen", "synthetic", "--episodes", 8, "--seed", 1, "--out", out, "--failures", 0.25,
               "--workers", 2, "--no-progress", *SMALL) == 0
    return out


def test_synthetic_writes_eight_valid_episodes(dataset, capsys):
    ds = open_dataset(dataset)
    assert ds.episode_ids == [f"ep{i:06d}" for i in range(8)]
    kinds = {ds.meta(e).task_kind for e in ds.episode_ids}
    assert kinds <= {"pick", "push", "stack"} and len(kinds) >= 2  # --task mix
    for episode_id in ds.episode_ids:
        ep = ds.open(episode_id)
        assert ep["rgb"].shape == (5, 48, 64, 3) and ep.meta.success in (True, False)
        assert ep.read("robot_mask").any()
    assert k4d("datagen", "stats", dataset, "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["episodes"] == 8 and stats["labelled"] == 8 and 0.0 <= stats["success_rate"] <= 1.0
    assert stats["bytes_per_episode_mean"] > 0
    assert k4d("datagen", "stats", dataset) == 0
    assert "8 episodes" in capsys.readouterr().out


def test_deterministic_and_resumable(dataset, tmp_path):
    again = tmp_path / "again"
    assert k4d("datagen", "synthetic", "--episodes", 3, "--seed", 1, "--out", again, "--failures", 0.25,
               "--no-progress", *SMALL) == 0  # one process, a different worker count
    a, b = tree_bytes(dataset / "episodes" / "ep000002"), tree_bytes(again / "episodes" / "ep000002")
    assert a and a == b
    # A crash after ep000002's group was written but before it was listed: unlist it, damage it.
    (again / "meta" / "episodes" / "ep000002.json").unlink()
    shutil.rmtree(again / "episodes" / "ep000002" / "rgb")
    before = {e: (again / "episodes" / e / "zarr.json").stat().st_mtime_ns for e in ("ep000000", "ep000001")}
    assert k4d("datagen", "synthetic", "--episodes", 3, "--seed", 1, "--out", again, "--failures", 0.25,
               "--no-progress", *SMALL) == 0
    assert open_dataset(again).episode_ids == ["ep000000", "ep000001", "ep000002"]
    assert tree_bytes(again / "episodes" / "ep000002") == a  # regenerated, same bytes
    after = {e: (again / "episodes" / e / "zarr.json").stat().st_mtime_ns for e in before}
    assert after == before  # complete episodes were skipped


def test_export_npz_and_robo4d(dataset, tmp_path):
    ref = f"{dataset}#ep000001"
    # into a folder that does not exist yet (as simulate-inputs and robo4d create theirs)
    assert k4d("datagen", "export", ref, "--format", "npz", tmp_path / "new" / "ep.npz") == 0
    with np.load(tmp_path / "new" / "ep.npz") as z:
        for key in ("rgb", "depth", "pointmap", "robot_mask", "robot_rgb", "robot_pointmap", "joints",
                    "joint_names", "camera", "robot", "actions", "task", "success"):
            assert key in z.files, key
        ep = open_dataset(dataset).open("ep000001")
        for key in ("rgb", "depth", "pointmap", "robot_mask", "robot_rgb", "robot_pointmap", "joints"):
            assert np.array_equal(z[key], ep.read(key)), key  # lossless
        assert json.loads(str(z["camera"])) == ep.meta.to_dict()["camera"] and str(z["robot"]) == "panda"
        assert json.loads(str(z["actions"]))["type"] == "joint_position"
        assert int(z["success"]) == int(ep.meta.success) and str(z["task"]) == ep.meta.task
    assert k4d("datagen", "export", ref, "--format", "robo4d", tmp_path / "r4d") == 0
    sample = read_robo4d(tmp_path / "r4d").read("ep000001")
    np.testing.assert_array_equal(sample.rgb, ep.read("rgb"))
    np.testing.assert_array_equal(sample.robot_mask, ep.read("robot_mask"))


def test_export_rerun(dataset, tmp_path, capsys):
    """`--format rerun` (docs/viewing.md, issue 14): the episode's recording, read back with
    rerun's own reader; a path that is not `.rrd` is one line, exit 2."""
    from k4d.recording import read_recording_index

    out = tmp_path / "ep1.rrd"
    assert k4d("datagen", "export", f"{dataset}#ep000001", "--format", "rerun", out) == 0
    index = read_recording_index(out)
    for entity in ("/world/camera/image", "/world/camera/points", "/world/camera/robot_points",
                   "/world/camera/image/robot_mask", "/plots/joints", "/plots/actions"):
        assert index.frames[entity] == list(range(5)), entity
    capsys.readouterr()
    assert k4d("datagen", "export", f"{dataset}#ep000001", "--format", "rerun", tmp_path / "ep1.npz") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".rrd" in err, err


@pytest.mark.integration
def test_simulate_replays_the_exported_episode(dataset, tmp_path):
    ref = f"{dataset}#ep000003"
    inputs = tmp_path / "inputs"
    assert k4d("datagen", "export", ref, "--format", "simulate-inputs", inputs) == 0
    spec = json.loads((inputs / "inputs.json").read_text())
    assert sorted(p.name for p in inputs.iterdir()) == ["actions.json", "camera.json", "inputs.json", "scene.png"]
    out = tmp_path / "sim"
    cmd = [sys.executable, "-m", "k4d.cli.main", "simulate", "--robot", spec["robot"],
           "--actions", inputs / "actions.json", "--image", inputs / "scene.png",
           "--camera", inputs / "camera.json", "--frames", spec["frames"], "--out", out,
           "--no-progress", "--no-recording"]
    env = {**os.environ, "MUJOCO_GL": "osmesa"}
    run = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    ours = open_dataset(dataset).open("ep000003").read("robot_mask")
    with np.load(out / "robot.npz") as z:
        replayed = z["mask"]
        np.testing.assert_allclose(z["joints"], open_dataset(dataset).open("ep000003").read("joints"), atol=1e-9)
    assert replayed.shape == ours.shape
    for t in range(len(ours)):
        iou = (ours[t] & replayed[t]).sum() / (ours[t] | replayed[t]).sum()
        assert iou >= 0.99, f"frame {t}: IoU {iou:.4f}"


@pytest.mark.parametrize("argv, message", [
    (["--task", "juggle"], "unknown task 'juggle'"),
    (["--failures", "1.5"], "--failures"),
    (["--episodes", "0"], "--episodes"),
    (["--width", "8"], "--width"),
    (["--shard-index", "3"], "together"),
    (["--shard-index", "3", "--shard-count", "2"], "--shard-index"),
    (["--framing", "close"], "--framing"),
    (["--scene-shift", "objects=3"], "--scene-shift"),
    (["--scene-shift", "size=1.2"], "expected objects=S,camera=D"),
    (["--scene-shift", "camera=far"], "camera must be a number"),
])
def test_bad_synthetic_input(tmp_path, capsys, argv, message):
    base = {"--episodes": "2", "--seed": "0", "--out": str(tmp_path / "ds")}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    code = k4d("datagen", "synthetic", *SMALL, *[x for kv in base.items() for x in kv], "--no-progress")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("k4d datagen: error:") and message in err
    assert not (tmp_path / "ds").exists()  # nothing written


def test_output_that_is_not_a_dataset(tmp_path, capsys):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    assert k4d("datagen", "synthetic", "--episodes", 1, "--seed", 0, "--out", tmp_path / "photos",
               "--no-progress", *SMALL) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a k4d dataset" in err
    assert sorted(p.name for p in (tmp_path / "photos").iterdir()) == ["cat.jpg"]


def test_export_lerobot_whole_dataset_and_back(dataset, tmp_path):
    """All 8 synthetic episodes (float64 joints, per-episode cameras, depth) as one LeRobot
    dataset with the mask and depth keys; imported back with the episodes' own cameras."""
    out = tmp_path / "lerobot"
    assert k4d("datagen", "export", dataset, "--format", "lerobot", out, "--extras", "robot_mask,depth",
               "--no-progress") == 0
    info = json.loads((out / "meta" / "info.json").read_text())
    ds = open_dataset(dataset)
    assert (info["total_episodes"], info["total_frames"]) == (8, 40)
    assert info["total_tasks"] == len({ds.meta(e).task for e in ds.episode_ids})
    assert info["fps"] == pytest.approx(4 / 6) and info["features"]["observation.state"]["names"] == ds.meta(
        "ep000000").joint_names
    assert [k for k, f in info["features"].items() if f["dtype"] == "video"] == [
        "observation.images.front", "observation.robot_mask.front", "observation.depth.front"]
    cameras = {"episodes": {str(i): ds.meta(e).camera.to_dict() for i, e in enumerate(ds.episode_ids)}}
    (tmp_path / "cams.json").write_text(json.dumps(cameras))
    assert k4d("datagen", "import-lerobot", out, "--robot", "panda", "--camera", tmp_path / "cams.json",
               "--out", tmp_path / "back", "--frames", 5, "--no-progress") == 0
    back = open_dataset(tmp_path / "back")
    for i, episode_id in enumerate(ds.episode_ids):
        a, b = ds.open(episode_id), back.open(f"lerobot-{i:06d}")
        # float64 joints went through LeRobot's float32 state: equal to float32 rounding.
        np.testing.assert_array_equal(b.read("joints"), a.read("joints").astype(np.float32).astype(np.float64))
        assert b.meta.task == a.meta.task and b.meta.source["source_frames"] == list(range(5))
        mask_a, mask_b = a.read("robot_mask"), b.read("robot_mask")
        assert (mask_a & mask_b).sum() / (mask_a | mask_b).sum() > 0.99
        assert np.abs(b.read("rgb").astype(float) - a.read("rgb")).mean() < 6.0  # AV1 crf 30 on 48x64


def test_bad_export_input(dataset, tmp_path, capsys):
    for ref, message in ((str(dataset), "DATASET_URI#EPISODE_ID"), (f"{dataset}#ep999999", "not a complete episode"),
                         (f"{tmp_path}/none#ep000000", "not a k4d episode dataset")):
        assert k4d("datagen", "export", ref, "--format", "npz", tmp_path / "x.npz") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.integration
def test_shards_into_s3(s3_server, monkeypatch, capsys):
    """Two Indexed-Job shards write one s3:// dataset (each lists its own episodes in
    meta/episodes/); the union is the dataset, and a shard rerun skips its complete episodes."""
    for name, value in (("K4D_S3_ENDPOINT", s3_server.endpoint), ("K4D_S3_ACCESS_KEY", s3_server.access_key),
                        ("K4D_S3_SECRET_KEY", s3_server.secret_key), ("K4D_S3_REGION", s3_server.region)):
        monkeypatch.setenv(name, value)
    uri = "s3://k4d-datagen-test/synth"
    for shard in (0, 1):
        assert k4d("datagen", "synthetic", "--episodes", 3, "--seed", 4, "--out", uri, "--task", "push",
                   "--shard-index", shard, "--shard-count", 2, "--no-progress", *SMALL) == 0
    assert "0 episodes written" not in capsys.readouterr().out
    ds = open_dataset(uri)
    assert ds.episode_ids == ["ep000000", "ep000001", "ep000002"]
    assert ds.open("ep000001")["robot_mask"][0:2].shape == (2, 48, 64)  # streamed from S3
    assert k4d("datagen", "synthetic", "--episodes", 3, "--seed", 4, "--out", uri, "--task", "push",
               "--shard-index", 1, "--shard-count", 2, "--no-progress", *SMALL) == 0
    assert "0 episodes written" in capsys.readouterr().out
    assert k4d("datagen", "stats", uri) == 0
    assert "3 episodes" in capsys.readouterr().out
