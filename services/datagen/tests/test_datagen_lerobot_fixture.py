"""The committed LeRobot v3.0 fixture (written by lerobot 0.4.4's own API, fixtures/
lerobot-v3.0-panda9/README.md): it imports by its state's column names with no mapping flag;
our LeRobot export of that import has the fixture's layout (file names, parquet schemas,
info.json keys); export -> import gives the same joints exactly and frames within video loss."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from k4d.cli.main import main
from k4d.episodes import DatasetWriter, open_dataset
from k4d.video import read_video

FIXTURE = Path(__file__).parent / "fixtures" / "lerobot-v3.0-panda9"
TRUTH = json.loads((FIXTURE / "truth.json").read_text())
KEY = "observation.images.front"
FRAMES = 49  # the importer's default clip length
META_FILES = ("meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet", "data/chunk-000/file-000.parquet")


def k4d(*argv) -> int:
    return main([str(a) for a in argv])


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("import") / "ds"
    # Only what the issue allows: robot, camera, video key (and where to write).
    assert k4d("datagen", "import-lerobot", FIXTURE, "--robot", "panda", "--camera", FIXTURE / "camera.json",
               "--video-key", KEY, "--out", out) == 0
    return out


@pytest.fixture(scope="module")
def exported(imported, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "lerobot"
    assert k4d("datagen", "export", imported, "--format", "lerobot", out, "--no-progress") == 0
    return out


def test_fixture_imports_by_column_names(imported):
    ds = open_dataset(imported)
    assert ds.episode_ids == ["lerobot-000000", "lerobot-000001"]
    for e in (0, 1):
        ep = ds.open(f"lerobot-{e:06d}")
        source = ep.meta.source
        pick = np.asarray(source["source_frames"])
        assert pick.tolist() == np.rint(np.linspace(0, 19, FRAMES)).astype(int).tolist()
        states = np.asarray(TRUTH[str(e)]["states"], np.float32)
        # The robot's 8 joints are the columns of the same names, bit for bit (float32 -> float64).
        assert ep.meta.joint_names[:8] == [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
        np.testing.assert_array_equal(ep.read("joints"), states[pick][:, :8].astype(np.float64))
        assert source["dropped_columns"] == {"panda_finger_joint2": "mimic joint (follows panda_finger_joint1)"}
        assert source["state_map"]["kind"] == "joints" and source["state_map"]["filled_joints"] == {}
        assert ep.meta.task == f"probe task {e}" and source["video_key"] == KEY
        # The frames are the episode's own (the right square, where truth.json puts it).
        rgb = ep.read("rgb").astype(int)
        colour = np.asarray(TRUTH[str(e)]["colour"])
        for t in (0, FRAMES // 2, FRAMES - 1):
            x, y = TRUTH[str(e)]["square_xy"][pick[t]]
            centre = rgb[t, y + 8:y + 24, x + 8:x + 24].reshape(-1, 3).mean(axis=0)
            assert np.abs(centre - colour).max() < 20, (e, t, centre)
            assert np.abs(rgb[t, 2, 2] - 40).max() < 10  # background corner


def test_export_has_the_fixture_layout_and_schemas(exported):
    assert files(exported) == [f for f in files(FIXTURE) if f not in ("README.md", "truth.json", "camera.json")]
    for rel in META_FILES:
        theirs, mine = pq.read_schema(FIXTURE / rel), pq.read_schema(exported / rel)
        assert mine.names == theirs.names, rel
        for name in theirs.names:
            # The only difference: our Panda has 8 joints, the fixture's state 9 columns.
            assert str(mine.field(name).type) == str(theirs.field(name).type).replace("[9]", "[8]"), (rel, name)
        assert set(mine.metadata or {}) == set(theirs.metadata or {}), rel
    theirs, mine = (json.loads((root / "meta" / "info.json").read_text()) for root in (FIXTURE, exported))
    assert list(mine) == list(theirs) and list(mine["features"]) == list(theirs["features"])
    for key, feature in theirs["features"].items():
        assert list(mine["features"][key]) == list(feature), key
        assert mine["features"][key]["dtype"] == feature["dtype"]
    assert list(mine["features"][KEY]["info"]) == list(theirs["features"][KEY]["info"])
    assert mine["features"][KEY]["info"]["video.codec"] == "av1" and mine["fps"] == pytest.approx(10 * 48 / 19)
    assert mine["features"]["observation.state"]["names"] == theirs["features"]["observation.state"]["names"][:8]
    assert (mine["total_episodes"], mine["total_frames"], mine["total_tasks"]) == (2, 2 * FRAMES, 2)
    stats_theirs, stats_mine = (json.loads((root / "meta" / "stats.json").read_text()) for root in (FIXTURE, exported))
    assert set(stats_mine) == set(stats_theirs)
    for key, stats in stats_theirs.items():
        assert list(stats_mine[key]) == list(stats), key
        assert np.ndim(stats_mine[key]["mean"]) == np.ndim(stats["mean"]), key
    tasks = pq.read_table(exported / "meta" / "tasks.parquet").to_pydict()
    assert tasks == {"task_index": [0, 1], "__index_level_0__": ["probe task 0", "probe task 1"]}


def test_export_rows_videos_and_stats(imported, exported):
    ds = open_dataset(imported)
    data = pq.read_table(exported / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    episodes = pq.read_table(exported / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    video = read_video(exported / "videos" / KEY / "chunk-000" / "file-000.mp4")
    assert len(video) == len(data["index"]) == 2 * FRAMES
    fps = json.loads((exported / "meta" / "info.json").read_text())["fps"]
    for e, row in enumerate(episodes):
        ep = ds.open(f"lerobot-{e:06d}")
        rows = slice(row["dataset_from_index"], row["dataset_to_index"])
        joints = ep.read("joints")
        np.testing.assert_array_equal(np.asarray(data["observation.state"][rows]), joints.astype(np.float32))
        expected_action = np.concatenate([joints[1:], joints[-1:]]).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(data["action"][rows]), expected_action)
        assert data["frame_index"][rows] == list(range(FRAMES)) and set(data["episode_index"][rows]) == {e}
        assert set(data["task_index"][rows]) == {e} and row["tasks"] == [f"probe task {e}"]
        np.testing.assert_allclose(data["timestamp"][rows], np.arange(FRAMES) / fps, atol=1e-6)
        start = row[f"videos/{KEY}/from_timestamp"]
        assert start == pytest.approx(e * FRAMES / fps) and row[f"videos/{KEY}/to_timestamp"] == pytest.approx(
            (e + 1) * FRAMES / fps)
        first = int(round(start * fps))
        frames = video[first:first + FRAMES].astype(float)
        assert np.abs(frames - ep.read("rgb")).mean() < 2.0  # AV1 crf 30: lossy, not wrong
        assert row["stats/observation.state/min"] == joints.min(axis=0).astype(np.float32).tolist()
        assert row["stats/observation.state/count"] == [FRAMES]


def test_round_trip_gives_the_same_joints(imported, exported, tmp_path):
    back = tmp_path / "back"
    assert k4d("datagen", "import-lerobot", exported, "--robot", "panda", "--camera", FIXTURE / "camera.json",
               "--out", back, "--no-progress") == 0
    first, second = open_dataset(imported), open_dataset(back)
    assert second.episode_ids == first.episode_ids
    for eid in first.episode_ids:
        a, b = first.open(eid), second.open(eid)
        np.testing.assert_array_equal(b.read("joints"), a.read("joints"))  # float32 joints survive exactly
        assert b.meta.source["source_frames"] == list(range(FRAMES)) and b.meta.task == a.meta.task
        assert b.meta.source["dropped_columns"] == {}
        assert b.meta.fps == pytest.approx(a.meta.fps)
        np.testing.assert_array_equal(b.read("robot_mask"), a.read("robot_mask"))
        assert np.abs(b.read("rgb").astype(float) - a.read("rgb")).mean() < 2.0


def test_extras_robot_mask_and_depth(imported, tmp_path):
    """A k4d episode with depth (written through the dataset API) exports its mask and depth
    as two more video keys; both decode back within video loss."""
    source = open_dataset(imported).open("lerobot-000000")
    arrays = {name: source.read(name) for name in source.arrays}
    depth = np.where(arrays["robot_mask"], 1.2, 2.5).astype(np.float32)
    depth[:, :, :8] = 0.0  # invalid pixels stay 0
    meta = source.meta
    writer = DatasetWriter(tmp_path / "with-depth")
    writer.write_episode(type(meta).from_dict({**meta.to_dict(), "arrays": []}), {**arrays, "depth": depth})
    out = tmp_path / "lerobot"
    assert k4d("datagen", "export", f"{tmp_path / 'with-depth'}#lerobot-000000", "--format", "lerobot", out,
               "--extras", "robot_mask,depth", "--video-key", "agentview", "--no-progress") == 0
    info = json.loads((out / "meta" / "info.json").read_text())
    keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    assert keys == ["observation.images.agentview", "observation.robot_mask.agentview", "observation.depth.agentview"]
    depth_info = info["features"]["observation.depth.agentview"]["info"]
    assert depth_info["video.is_depth_map"] is True and depth_info["video.depth_max_m"] == pytest.approx(2.5)
    mask = read_video(out / "videos" / keys[1] / "chunk-000" / "file-000.mp4")[..., 0] > 127
    iou = (mask & arrays["robot_mask"]).sum() / (mask | arrays["robot_mask"]).sum()
    assert iou > 0.95, iou
    grey = read_video(out / "videos" / keys[2] / "chunk-000" / "file-000.mp4")[..., 0]
    decoded = grey / 255.0 * depth_info["video.depth_max_m"]
    assert np.median(np.abs(decoded - depth)) < 0.03  # 1/255 of 2.5 m is 1 cm; AV1 adds a little
    assert set(json.loads((out / "meta" / "stats.json").read_text())) >= set(keys)


@pytest.mark.parametrize("argv, message", [
    (["--extras", "normals"], "unknown extras"),
    (["--extras", "depth"], "has no depth"),
    (["--fps", "0"], "must be in (0, 1000]"),
    ([], "exists and is not an empty directory"),
])
def test_export_bad_input_one_line_exit_2(imported, tmp_path, capsys, argv, message):
    out = tmp_path / "lerobot"
    if not argv:
        out.mkdir()
        (out / "something").write_text("x")
    code = k4d("datagen", "export", imported, "--format", "lerobot", out, "--no-progress", *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("k4d datagen: error:"), err
    assert message in err, err
    if argv:
        assert not out.exists()


def test_fps_one_rate_per_lerobot_dataset(tmp_path, capsys):
    """Episodes imported at different clip lengths have different rates: one line asking for
    --fps; with it every episode is resampled to that rate."""
    mixed = tmp_path / "mixed"
    for episode, frames in (("0", 49), ("1", 30)):
        assert k4d("datagen", "import-lerobot", FIXTURE, "--robot", "panda", "--camera", FIXTURE / "camera.json",
                   "--out", mixed, "--episodes", episode, "--frames", frames, "--no-progress") == 0
    capsys.readouterr()
    assert k4d("datagen", "export", mixed, "--format", "lerobot", tmp_path / "a", "--no-progress") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different frame rates" in err and "--fps" in err, err
    assert k4d("datagen", "export", mixed, "--format", "lerobot", tmp_path / "b", "--fps", 10, "--no-progress") == 0
    info = json.loads((tmp_path / "b" / "meta" / "info.json").read_text())
    assert info["fps"] == 10 and info["total_frames"] == 40  # 20 source frames of each at 10 fps
    data = pq.read_table(tmp_path / "b" / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    ds = open_dataset(mixed)
    for e, frames in ((0, 49), (1, 30)):
        joints = ds.open(f"lerobot-{e:06d}").read("joints")
        rows = [i for i, x in enumerate(data["episode_index"]) if x == e]
        keep = np.rint(np.linspace(0, frames - 1, 20)).astype(int)
        np.testing.assert_array_equal(np.asarray(data["observation.state"])[rows], joints[keep].astype(np.float32))
    assert len(read_video(tmp_path / "b" / "videos" / KEY / "chunk-000" / "file-000.mp4")) == 40


def test_stats_prints_the_tasks(imported, capsys):
    assert k4d("datagen", "stats", imported) == 0
    text = capsys.readouterr().out
    assert "tasks (2):" in text and "probe task 0" in text and "probe task 1" in text
    assert "sources: lerobot 2" in text and "robots: panda 2" in text


