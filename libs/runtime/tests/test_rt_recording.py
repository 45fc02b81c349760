"""k4d.recording: a written recording, read back with rerun's own tools (`rerun rrd verify`
and its chunk reader), holds the entity paths, frames and full-resolution points promised
in docs/viewing.md; bad input is one InvalidArgument naming the field."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.recording import (
    LinkMesh,
    actions_per_frame,
    read_recording_index,
    write_comparison_recording,
    write_episode_recording,
)

pytest.importorskip("rerun", reason="rerun-sdk (k4d-runtime[viz]) not installed")

T, H, W = 4, 12, 16
CAMERA = Camera(width=W, height=H, fx=20.0, fy=20.0, cx=(W - 1) / 2, cy=(H - 1) / 2)


def _clip(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    depth = np.full((H, W), 2.0, np.float32)
    pointmap = np.stack([(u - CAMERA.cx) / 20 * depth, (v - CAMERA.cy) / 20 * depth,
                         depth], -1)
    pointmap = np.repeat(pointmap[None], T, axis=0)
    pointmap[:, 0, :] = 0  # the top row has no points
    robot_mask = np.zeros((T, H, W), bool)
    for t in range(T):
        robot_mask[t, 4:8, 2 + 2 * t:6 + 2 * t] = True
    return {"rgb": rng.integers(0, 255, (T, H, W, 3), dtype=np.uint8), "pointmap": pointmap,
            "robot_pointmap": np.where(robot_mask[..., None], pointmap * 0.9, 0),
            "robot_mask": robot_mask}


def _rerun_cli() -> str:
    return str(Path(sys.executable).with_name("rerun"))


def test_episode_recording_reads_back_with_every_entity_on_every_frame(tmp_path):
    clip = _clip()
    poses = np.repeat(np.eye(4)[None, None], T, axis=0).repeat(2, axis=1)
    poses[:, 1, 2, 3] = np.linspace(0.1, 0.4, T)  # link b rises
    mesh = LinkMesh("b", np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0]], np.float32),
                    np.array([[0, 1, 2]]), (1.0, 0.5, 0.0))
    path = write_episode_recording(
        tmp_path / "rollout.rrd", **clip, camera=CAMERA, joints=np.zeros((T, 2)),
        joint_names=["j1", "j2"], actions={"type": "joint_position", "steps": [[0, 0], [1, 2]]},
        link_poses=poses, link_names=["a", "b"], link_meshes=[mesh],
        metrics={"psnr": np.arange(T, dtype=float)}, fps=8.0, title="t", notice="STATIC-WORLD")
    verify = subprocess.run([_rerun_cli(), "rrd", "verify", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr

    index = read_recording_index(path)
    every_frame = list(range(T))
    for entity in ("/world/camera/image", "/world/camera/points", "/world/camera/robot_points",
                   "/world/camera/image/robot_mask", "/world/robot/a", "/world/robot/b",
                   "/plots/joints", "/plots/actions", "/plots/metrics/psnr"):
        assert index.frames.get(entity) == every_frame, entity
    assert {"/world", "/world/camera", "/world/camera/image", "/world/robot/b/mesh",
            "/notes"} <= index.static
    # full resolution: one point per valid pixel, coloured by that pixel
    points = index.batches["/world/camera/points"]
    positions = [row for b in points for row in b.column("Points3D:positions").to_pylist()]
    colors = [row for b in points for row in b.column("Points3D:colors").to_pylist()]
    assert [len(p) for p in positions] == [(H - 1) * W] * T
    rgba = np.asarray(colors[0], np.uint32)
    np.testing.assert_array_equal(rgba >> 24, clip["rgb"][0, 1:].reshape(-1, 3)[:, 0])
    np.testing.assert_allclose(np.asarray(positions[0]), clip["pointmap"][0, 1:].reshape(-1, 3))
    robot = index.batches["/world/camera/robot_points"]
    assert [len(p) for b in robot for p in b.column("Points3D:positions").to_pylist()] == [16] * T
    # the time timeline is frame / fps seconds
    times = [t for b in index.batches["/world/camera/image"] if "time" in b.schema.names
             for t in b.column("time").to_pylist()]
    assert [t.total_seconds() for t in times] == [t / 8.0 for t in range(T)]


def test_comparison_recording_has_both_clips_and_the_metrics(tmp_path):
    path = write_comparison_recording(
        tmp_path / "eval.rrd", ground_truth=_clip(0), prediction=_clip(1), camera=CAMERA,
        metrics={"psnr": np.linspace(20, 30, T), "depth_abs_rel": np.linspace(0.1, 0.2, T)})
    index = read_recording_index(path)
    for root in ("/world/ground_truth", "/world/prediction"):
        assert index.frames[f"{root}/camera/image"] == list(range(T))
        assert index.frames[f"{root}/camera/points"] == list(range(T))
    assert index.frames["/plots/metrics/psnr"] == list(range(T))
    assert index.frames["/plots/metrics/depth_abs_rel"] == list(range(T))


def test_per_frame_camera_moves_the_camera_each_frame(tmp_path):
    cameras = []
    for t in range(T):
        T_cam_from_world = np.eye(4)
        T_cam_from_world[0, 3] = 0.1 * t
        cameras.append(dataclasses.replace(CAMERA, T_cam_from_world=T_cam_from_world))
    index = read_recording_index(write_episode_recording(
        tmp_path / "ep.rrd", rgb=_clip()["rgb"], camera=cameras))
    assert index.frames["/world/camera"] == list(range(T))


@pytest.mark.parametrize("change, field", [
    ({"rgb": np.zeros((T, H, W), np.uint8)}, "rgb"),
    ({"pointmap": np.zeros((T, H, W + 1, 3), np.float32)}, "pointmap"),
    ({"robot_mask": np.zeros((T + 1, H, W), bool)}, "robot_mask"),
    ({"joints": np.zeros((T, 3)), "joint_names": ["a"]}, "joint_names"),
    ({"joints": np.zeros((T + 2, 1)), "joint_names": ["a"]}, "joints"),
    ({"camera": dataclasses.replace(CAMERA, width=W * 2)}, "camera.width"),
    ({"camera": [CAMERA] * (T - 1)}, "camera"),
    ({"camera": CAMERA.to_dict()}, "camera"),  # the JSON form: parse it with Camera.from_dict
    ({"link_poses": np.zeros((T, 2, 4, 4)), "link_names": ["a"]}, "link_names"),
    ({"metrics": {"psnr": np.zeros(T - 1)}}, "metrics.psnr"),
    ({"fps": 0.0}, "fps"),
])
def test_bad_input_names_the_field(tmp_path, change, field):
    args = dict(rgb=_clip()["rgb"], camera=CAMERA)
    args.update(change)
    with pytest.raises(InvalidArgument) as err:
        write_episode_recording(tmp_path / "bad.rrd", **args)
    assert err.value.violations[0].field == field
    assert not (tmp_path / "bad.rrd").exists()


def test_actions_are_placed_on_frames_like_the_kinematics_stage():
    values, names = actions_per_frame(
        {"type": "ee_pose", "rotation": "euler_xyz", "steps": [[0, 0, 0, 0, 0, 0, 1],
                                                               [1, 2, 3, 0, 0, 0, 0]]}, 5)
    assert names == ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]
    np.testing.assert_allclose(values[:, 0], [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(values[:, 6], [1, 0.75, 0.5, 0.25, 0])
    # delta steps act between states: each frame shows the step acting then
    values, names = actions_per_frame({"type": "joint_delta", "steps": [[1], [2], [3]]}, 7,
                                      joint_names=["j1", "j2"])
    assert names == ["j1"]
    np.testing.assert_array_equal(values[:, 0], [1, 1, 1, 2, 2, 3, 3])


def test_missing_rerun_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rerun", None)  # import rerun -> ImportError
    with pytest.raises(FailedPrecondition, match=r"k4d-runtime\[viz\]"):
        write_episode_recording(tmp_path / "x.rrd", rgb=_clip()["rgb"], camera=CAMERA)
