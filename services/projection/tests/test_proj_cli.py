"""`k4d project` end to end: every builtin robot, a user URDF, poses input, video, bad input."""

import subprocess
import sys

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.cli.main import main
from k4d.robots.descriptions import load_robot
from k4d.robots.loader import BUILTIN_ROBOTS
from k4d.video import read_video

USER_URDF = """<?xml version="1.0"?>
<robot name="two_link">
  <material name="blue"><color rgba="0 0 1 1"/></material>
  <link name="base"><visual><geometry><box size="0.2 0.2 0.1"/></geometry>
    <material name="blue"/></visual></link>
  <link name="arm"><visual><origin xyz="0 0 0.25"/><geometry><cylinder radius="0.04" length="0.5"/>
    </geometry></visual>
    <collision><origin xyz="0 0 0.25"/><geometry><box size="0.08 0.08 0.5"/></geometry></collision>
  </link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/>
    <origin xyz="0 0 0.05"/><axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" effort="1" velocity="1"/>
  </joint>
</robot>
"""


@pytest.fixture
def camera_file(tmp_path):
    path = tmp_path / "cam.json"
    Camera.look_at([1.3, 0.9, 0.9], [0.0, 0.0, 0.3], width=64, height=48, fovy_deg=60).save(path)
    return path


def mid_joints(model, frames=2):
    q = (model.lower + model.upper) / 2.0
    return np.tile(q, (frames, 1))


@pytest.mark.parametrize("robot", list(BUILTIN_ROBOTS))
def test_every_builtin_robot_renders(robot, tmp_path, camera_file):
    model = load_robot(robot)
    np.save(tmp_path / "q.npy", mid_joints(model))
    out = tmp_path / "robot.npz"
    args = ["project", "--robot", robot, "--joints", str(tmp_path / "q.npy"),
            "--camera", str(camera_file), "--out", str(out)]
    assert main(args) == 0
    with np.load(out) as d:
        assert d["depth"].shape == (2, 48, 64) and d["rgb"].dtype == np.uint8
        assert d["mask"].sum() > 20, f"{robot} not visible"
        assert d["link_id"].dtype == np.int16 and d["link_id"][~d["mask"]].max() == -1
        assert list(d["link_names"]) == model.link_names
        np.testing.assert_array_equal(d["pointmap"][..., 2], d["depth"])
    assert main(args[:-2] + ["--out", str(out), "--collision"]) == 0
    with np.load(out) as d:
        assert d["mask"].sum() > 20, f"{robot} collision meshes not visible"


def test_user_urdf_poses_input_video_and_world_pointmap(tmp_path, camera_file):
    urdf = tmp_path / "two_link.urdf"
    urdf.write_text(USER_URDF)
    np.save(tmp_path / "q.npy", np.array([[0.0], [0.7]]))
    out = tmp_path / "a.npz"
    assert main(["project", "--robot", str(urdf), "--joints", str(tmp_path / "q.npy"),
                 "--camera", str(camera_file), "--out", str(out), "--video",
                 str(tmp_path / "a.mp4"), "--world-pointmap"]) == 0
    with np.load(out) as d:
        assert set(d["link_id"][d["mask"]]) == {0, 1}
        assert not np.array_equal(d["mask"][0], d["mask"][1])  # the arm moved
        assert "pointmap_world" in d.files
        poses, rgb = d["poses"], d["rgb"]
        assert rgb[d["link_id"] == 0][:, 2].min() > 0 and rgb[d["link_id"] == 0][:, :2].max() == 0
    video = read_video(tmp_path / "a.mp4")
    assert video.shape == (2, 48, 128, 3)
    np.testing.assert_array_equal(video[:, :, :64], rgb)  # lossless quick look
    # Same render from poses.
    np.savez(tmp_path / "poses.npz", poses=poses, link_names=np.array(["base", "arm"]))
    assert main(["project", "--robot", str(urdf), "--poses", str(tmp_path / "poses.npz"),
                 "--camera", str(camera_file), "--out", str(tmp_path / "b.npz")]) == 0
    with np.load(out) as a, np.load(tmp_path / "b.npz") as b:
        np.testing.assert_array_equal(a["depth"], b["depth"])


@pytest.mark.parametrize("case, message", [
    ("wrong_joint_count", "expected shape"),
    ("nan_joints", "non-finite"),
    ("bad_camera", "camera"),
    ("unknown_robot", "robot"),
    ("pose_link_mismatch", "poses"),
    ("missing_joints_file", "no such file"),
    ("over_budget", "memory budget"),
    ("unwritable_video", "no such file"),
])
def test_bad_input_exits_2_with_one_line(case, message, tmp_path, camera_file, capsys):
    q = np.zeros((2, 8))
    robot, camera = "panda", str(camera_file)
    extra = []
    if case == "wrong_joint_count":
        q = np.zeros((2, 5))
    elif case == "nan_joints":
        q[1, 3] = np.nan
    elif case == "bad_camera":
        (tmp_path / "bad.json").write_text('{"width": 64, "height": 48, "fx": -1, "fy": 50, '
                                           '"cx": 31.5, "cy": 23.5, "T_cam_from_world": '
                                           '[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}')
        camera = str(tmp_path / "bad.json")
    elif case == "unknown_robot":
        robot = "no_such_robot"
    elif case == "over_budget":
        extra = ["--memory-budget-mb", "1", "--clip"]
    elif case == "unwritable_video":  # ffmpeg would only report a broken pipe
        extra = ["--clip", "--video", str(tmp_path / "no_dir" / "robot.mp4")]
    np.save(tmp_path / "q.npy", q)
    source = ["--joints", str(tmp_path / "q.npy")]
    if case == "pose_link_mismatch":
        np.savez(tmp_path / "p.npz", poses=np.tile(np.eye(4), (2, 3, 1, 1)))
        source = ["--poses", str(tmp_path / "p.npz")]
    elif case == "missing_joints_file":
        source = ["--joints", str(tmp_path / "nope.npy")]
    code = main(["project", "--robot", robot, *source, "--camera", camera,
                 "--out", str(tmp_path / "o.npz"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err.lower(), err


def test_subprocess_help_and_error():
    exe = [sys.executable, "-m", "k4d.cli.main"]
    ok = subprocess.run([*exe, "project", "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "--camera" in ok.stdout
    bad = subprocess.run([*exe, "project", "--robot", "panda", "--joints", "x.npy"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "required" in bad.stderr
