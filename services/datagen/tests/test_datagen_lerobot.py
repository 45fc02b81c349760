"""`k4d datagen import-lerobot` on small LeRobot v3.0 datasets that this test writes
itself following the format's layout (meta/info.json, meta/tasks.parquet,
meta/episodes/chunk-000/file-000.parquet, data/chunk-000/file-000.parquet, one mp4 holding
both episodes located by timestamps)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from k4d.camera import Camera
from k4d.cli.main import main
from k4d.episodes import open_dataset
from k4d.robots.fk import forward_kinematics
from k4d_datagen.engine import robot_and_renderer

H, W, FPS = 64, 96, 10
LENGTHS = (12, 9)
VIDEO_KEY = "observation.images.front"
BACKGROUND = 90


def camera_json(eye=(1.4, 0.9, 1.0)) -> dict:
    return Camera.look_at(eye, (0.0, 0.0, 0.45), width=W, height=H, fovy_deg=55.0).to_dict()


def write_dataset(root: Path, *, state_key="observation.state", state_width=None, version="v3.0") -> dict:
    """Two Panda episodes whose video shows our own render of the robot on a grey background.
    v3.0: both episodes in one data file and one mp4; v2.1: one file of each per episode."""
    robot, renderer = robot_and_renderer("panda")
    rng = np.random.default_rng(0)
    camera = Camera.from_dict(camera_json())
    states, frames, rows, episodes = [], [], [], []
    index = 0
    for e, length in enumerate(LENGTHS):
        start, end = (robot.lower + robot.upper) / 2, rng.uniform(robot.lower * 0.5, robot.upper * 0.5)
        end[3] = np.clip(end[3], robot.lower[3] + 0.3, robot.upper[3] - 0.1)
        q = start + (end - start) * np.linspace(0, 1, length)[:, None]
        states.append(q)
        render = renderer.render(forward_kinematics(robot, q), camera, outputs=["mask", "rgb"])
        frames.append(np.where(render.mask[..., None], render.rgb, BACKGROUND).astype(np.uint8))
        for t in range(length):
            rows.append({state_key: (q[t][:state_width] if state_width else q[t]).astype(np.float32).tolist(),
                         "action": q[t].astype(np.float32).tolist(), "timestamp": t / FPS, "frame_index": t,
                         "episode_index": e, "index": index, "task_index": e})
            index += 1
        episodes.append({"episode_index": e, "tasks": [f"task {e}"], "length": length,
                         "data/chunk_index": 0, "data/file_index": 0,
                         "dataset_from_index": index - length, "dataset_to_index": index,
                         f"videos/{VIDEO_KEY}/chunk_index": 0, f"videos/{VIDEO_KEY}/file_index": 0,
                         f"videos/{VIDEO_KEY}/from_timestamp": sum(LENGTHS[:e]) / FPS,
                         f"videos/{VIDEO_KEY}/to_timestamp": sum(LENGTHS[:e + 1]) / FPS})
    width = state_width or robot.num_joints
    v2 = version.startswith("v2")
    info = {"codebase_version": version, "robot_type": "panda", "fps": FPS, "total_episodes": len(LENGTHS),
            "total_frames": index, "chunks_size": 1000,
            "data_path": ("data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet" if v2 else
                          "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
            "video_path": ("videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4" if v2 else
                           "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"),
            "features": {
                state_key: {"dtype": "float32", "shape": [width], "names": robot.joint_names[:width]},
                "action": {"dtype": "float32", "shape": [robot.num_joints]},
                VIDEO_KEY: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"],
                            "info": {"video.fps": FPS, "video.codec": "h264"}},
                "timestamp": {"dtype": "float32", "shape": [1]},
                "frame_index": {"dtype": "int64", "shape": [1]}, "episode_index": {"dtype": "int64", "shape": [1]},
                "index": {"dtype": "int64", "shape": [1]}, "task_index": {"dtype": "int64", "shape": [1]}}}
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    if v2:
        (root / "meta" / "episodes.jsonl").write_text("".join(
            json.dumps({"episode_index": e["episode_index"], "tasks": e["tasks"], "length": e["length"]}) + "\n"
            for e in episodes))
        for e in range(len(LENGTHS)):
            pq.write_table(pa.Table.from_pylist([r for r in rows if r["episode_index"] == e]),
                           root / "data" / "chunk-000" / f"episode_{e:06d}.parquet")
            video = root / "videos" / "chunk-000" / VIDEO_KEY / f"episode_{e:06d}.mp4"
            video.parent.mkdir(parents=True, exist_ok=True)
            _write_h264(video, frames[e])
        return {"states": states, "frames": frames}
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.Table.from_pylist(episodes), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task": [f"task {e}" for e in range(len(LENGTHS))],
                             "task_index": list(range(len(LENGTHS)))}), root / "meta" / "tasks.parquet")
    video = root / "videos" / VIDEO_KEY / "chunk-000" / "file-000.mp4"
    video.parent.mkdir(parents=True)
    _write_h264(video, np.concatenate(frames))
    return {"states": states, "frames": frames}


def _write_h264(path: Path, frames: np.ndarray) -> None:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=Fraction(FPS))
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.options = {"crf": "18", "preset": "ultrafast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def k4d(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_import_gives_exact_masks_and_resampled_clips(tmp_path, version):
    truth = write_dataset(tmp_path / "lerobot", version=version)
    (tmp_path / "cam.json").write_text(json.dumps(camera_json()))
    assert k4d("datagen", "import-lerobot", tmp_path / "lerobot", "--robot", "panda", "--camera",
               tmp_path / "cam.json", "--out", tmp_path / "ds", "--frames", 5, "--no-progress") == 0
    ds = open_dataset(tmp_path / "ds")
    assert ds.episode_ids == ["lerobot-000000", "lerobot-000001"]
    for e, length in enumerate(LENGTHS):
        ep = ds.open(f"lerobot-{e:06d}")
        pick = np.rint(np.linspace(0, length - 1, 5)).astype(int)
        assert ep.meta.source["kind"] == "lerobot" and ep.meta.source["episode_index"] == e
        assert ep.meta.source["source_frames"] == pick.tolist() and ep.meta.task == f"task {e}"
        assert ep.meta.success is None and "depth" not in ep and "pointmap" not in ep
        np.testing.assert_allclose(ep.read("joints"), truth["states"][e][pick], atol=1e-6)
        # The video shows the robot exactly where our kinematics + projection put the mask.
        rgb, mask = ep.read("rgb"), ep.read("robot_mask")
        np.testing.assert_allclose(rgb.astype(float), truth["frames"][e][pick].astype(float), atol=40)
        seen = np.abs(rgb.astype(int) - BACKGROUND).max(axis=-1) > 25
        for t in range(5):
            iou = (seen[t] & mask[t]).sum() / (seen[t] | mask[t]).sum()
            assert iou > 0.9, f"episode {e} frame {t}: IoU {iou:.3f}"
        assert np.all(ep.read("robot_pointmap")[~mask] == 0) and np.all(ep.read("robot_pointmap")[mask][:, 2] > 0)
    # Resumable: a second run imports nothing new; --episodes picks a subset.
    assert k4d("datagen", "import-lerobot", tmp_path / "lerobot", "--robot", "panda", "--camera",
               tmp_path / "cam.json", "--out", tmp_path / "ds", "--frames", 5, "--episodes", "1",
               "--no-progress") == 0


@pytest.mark.parametrize("case, message", [
    ("no_state", "no joint states"),
    ("joint_count", "joint counts do not match"),
    ("camera_away", "sees no robot"),
    ("not_lerobot", "not a LeRobot dataset"),
])
def test_bad_input_one_line_exit_2_nothing_listed(tmp_path, capsys, case, message):
    root = tmp_path / "lerobot"
    if case == "no_state":
        write_dataset(root, state_key="observation.joints_unknown")
    elif case == "joint_count":
        write_dataset(root, state_width=6)
    elif case == "camera_away":
        write_dataset(root)
    else:
        root.mkdir()
    cam = camera_json(eye=(-1.0, 0.0, 0.45)) if case == "camera_away" else camera_json()
    if case == "camera_away":  # looking away from the robot: from behind a wall of nothing
        cam = Camera.look_at((0.0, 0.0, 3.0), (1.0, 0.0, 6.0), width=W, height=H, fovy_deg=55.0).to_dict()
    (tmp_path / "cam.json").write_text(json.dumps(cam))
    code = k4d("datagen", "import-lerobot", root, "--robot", "panda", "--camera", tmp_path / "cam.json",
               "--out", tmp_path / "ds", "--frames", 4, "--no-progress")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("k4d datagen: error:"), err
    assert message in err, err
    if (tmp_path / "ds").exists():
        assert open_dataset(tmp_path / "ds").episode_ids == []
