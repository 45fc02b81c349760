"""CLI: k4d robots / fk / ik / kinematics solve, in-process and one subprocess; bad input
exits 2 with one line."""

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from k4d.cli.main import main
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d.robots.loader import builtin_names


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err):
    lines = [line for line in err.splitlines() if not line.startswith("k4d: warning: commands of")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("name", builtin_names())
def test_fk_then_ik_roundtrip_on_every_builtin(name, tmp_path, capsys):
    model = load_robot(name)
    q = np.random.default_rng(0).uniform(model.lower, model.upper, (3, model.num_joints))
    np.save(tmp_path / "q.npy", q)
    code, out, err = _run(["fk", "--robot", name, "--joints", str(tmp_path / "q.npy"),
                           "--out", str(tmp_path / "poses.npz")], capsys)
    assert code == 0, err
    data = np.load(tmp_path / "poses.npz")
    assert data["poses"].shape == (3, len(model.link_names), 4, 4)
    assert list(data["link_names"]) == model.link_names
    assert list(data["joint_names"]) == model.joint_names
    np.save(tmp_path / "t.npy", data["poses"][:, model.link_index(model.ee_link)])
    code, out, err = _run(["ik", "--robot", name, "--targets", str(tmp_path / "t.npy"),
                           "--mode", "independent", "--out", str(tmp_path / "sol.npz")], capsys)
    assert code == 0, err
    sol = np.load(tmp_path / "sol.npz")
    assert sol["success"].all() and sol["joints"].shape == (3, model.num_joints)
    assert set(sol.files) >= {"joints", "success", "position_error", "rotation_error"}


def test_ik_accepts_position_quaternion_targets_and_seed(tmp_path, capsys):
    model = load_robot("panda")
    pose = forward_kinematics(model, model.mid_configuration + 0.1)[model.link_index("panda_hand_tcp")]
    from scipy.spatial.transform import Rotation

    t7 = np.concatenate([pose[:3, 3], Rotation.from_matrix(pose[:3, :3]).as_quat()])[None]
    np.save(tmp_path / "t.npy", t7)
    np.save(tmp_path / "seed.npy", model.mid_configuration)
    code, out, err = _run(["ik", "--robot", "panda", "--targets", str(tmp_path / "t.npy"),
                           "--seed", str(tmp_path / "seed.npy"), "--out", str(tmp_path / "s.npz")],
                          capsys)
    assert code == 0, err
    assert np.load(tmp_path / "s.npz")["success"].all()


def test_robots_list_describe_register(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("K4D_STORE_URI", f"file://{tmp_path / 'store'}")
    code, out, _ = _run(["robots"], capsys)
    assert code == 0 and all(name in out for name in builtin_names())
    code, out, _ = _run(["robots", "describe", "widowx250s", "--json"], capsys)
    info = json.loads(out)
    assert info["ee_link"] == "wx250s/ee_gripper_link" and info["gripper_joints"] == ["left_finger"]
    assert len(info["joint_names"]) == len(info["lower"]) == len(info["upper"]) == 8
    assert all(path.endswith(".stl") for path in info["mesh_files"])
    bundle = tmp_path / "arm.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("arm.urdf", '<robot name="arm"><link name="a"/><link name="b"/>'
                                '<joint name="j" type="revolute"><parent link="a"/><child link="b"/>'
                                '<limit lower="-1" upper="1"/></joint></robot>')
    code, out, err = _run(["robots", "register", str(bundle)], capsys)
    assert code == 0, err
    code, out, _ = _run(["robots", "list"], capsys)
    assert "arm" in out and "registered" in out
    np.save(tmp_path / "q.npy", np.array([[0.5]]))
    code, _, err = _run(["fk", "--robot", "arm", "--joints", str(tmp_path / "q.npy"),
                         "--out", str(tmp_path / "p.npz")], capsys)
    assert code == 0, err


def test_fk_on_a_user_urdf_path(tmp_path, capsys):
    urdf = tmp_path / "bot" / "urdf" / "bot.urdf"
    urdf.parent.mkdir(parents=True)
    (tmp_path / "bot" / "meshes").mkdir()
    (tmp_path / "bot" / "meshes" / "m.stl").write_text("solid m\nendsolid m\n")
    urdf.write_text('<robot name="bot"><link name="a"><visual><geometry>'
                    '<mesh filename="package://bot/meshes/m.stl"/></geometry></visual></link>'
                    '<link name="b"/><joint name="j" type="prismatic"><parent link="a"/>'
                    '<child link="b"/><axis xyz="0 0 1"/><limit lower="0" upper="1"/></joint></robot>')
    np.save(tmp_path / "q.npy", np.array([[0.25]]))
    code, _, err = _run(["fk", "--robot", str(urdf), "--joints", str(tmp_path / "q.npy"),
                         "--out", str(tmp_path / "p.npz")], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "p.npz")["poses"][0, 1, :3, 3], [0, 0, 0.25])
    np.save(tmp_path / "t.npy", np.load(tmp_path / "p.npz")["poses"][:, 1])
    code, _, err = _run(["ik", "--robot", str(urdf), "--targets", str(tmp_path / "t.npy"),
                         "--out", str(tmp_path / "s.npz")], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "s.npz")["joints"], [[0.25]], atol=1e-4)


def test_fk_on_a_user_xacro_path(tmp_path, capsys):
    from importlib.metadata import distribution

    xacro = distribution("rtb-data").locate_file(
        "rtbdata/xacro/trossen_descriptions/urdf/wx250s.urdf.xacro")
    model = load_robot(str(xacro))
    assert model.link_names[0] == "/base_link"  # xacro arg robot_name defaults to ""
    np.save(tmp_path / "q.npy", model.mid_configuration[None])
    code, _, err = _run(["fk", "--robot", str(xacro), "--joints", str(tmp_path / "q.npy"),
                         "--out", str(tmp_path / "p.npz")], capsys)
    assert code == 0, err
    wx = load_robot("widowx250s")
    np.testing.assert_allclose(np.load(tmp_path / "p.npz")["poses"][0],
                               forward_kinematics(wx, wx.mid_configuration), atol=1e-12)


def test_kinematics_solve_writes_the_trajectory(tmp_path, capsys):
    actions = {"robot": "panda", "preset": "libero",
               "steps": [[0.1, 0, 0, 0, 0, 0.1, -1.0]] * 10 + [[0, 0, 0.1, 0, 0, 0, 1.0]] * 10}
    (tmp_path / "a.json").write_text(json.dumps(actions))
    code, out, err = _run(["kinematics", "solve", "--actions", str(tmp_path / "a.json"),
                           "--out", str(tmp_path / "traj.npz")], capsys)
    assert code == 0, err
    data = np.load(tmp_path / "traj.npz")
    assert data["joints"].shape == (49, 8) and data["poses"].shape == (49, 13, 4, 4)
    assert data["success"].all() and data["targets"].shape == (49, 4, 4)


@pytest.mark.parametrize("setup, argv_tail, message", [
    (lambda d: np.save(d / "q.npy", np.full((2, 8), np.nan)), ["--joints", "q.npy"], "non-finite"),
    (lambda d: np.save(d / "q.npy", np.zeros((2, 5))), ["--joints", "q.npy"], "expected shape"),
    (lambda d: np.save(d / "q.npy", np.zeros((2, 8))), ["--joints", "q.npy"], "panda_joint4"),
    (lambda d: np.save(d / "q.npy", np.array(["a"])), ["--joints", "q.npy"], "expected numbers"),
    (lambda d: np.save(d / "q.npy", np.array([{"a": 1}], dtype=object)), ["--joints", "q.npy"],
     "cannot read"),
    (lambda d: None, ["--joints", "missing.npy"], "no such file"),
])
def test_fk_bad_input_exits_2_with_one_line(tmp_path, capsys, setup, argv_tail, message):
    setup(tmp_path)
    argv = ["fk", "--robot", "panda", "--out", str(tmp_path / "o.npz")]
    argv += [str(tmp_path / a) if a.endswith(".npy") else a for a in argv_tail]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert message in _one_error_line(err)


def test_out_path_under_a_file_exits_2_with_one_line(tmp_path, capsys):
    model = load_robot("panda")
    np.save(tmp_path / "q.npy", model.mid_configuration)
    (tmp_path / "file").write_text("")
    code, _, err = _run(["fk", "--robot", "panda", "--joints", str(tmp_path / "q.npy"),
                         "--out", str(tmp_path / "file" / "o.npz")], capsys)
    assert code == 2
    assert _one_error_line(err).startswith("k4d fk: error: ")
    code, _, err = _run(["fk", "--robot", "panda", "--joints", str(tmp_path / "q.npy"),
                         "--out", str(tmp_path)], capsys)
    assert code == 2
    assert _one_error_line(err) == f"k4d fk: error: out: {tmp_path} is a directory; give a file name"


def test_fk_clip_flag_clamps(tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.zeros((1, 8)))
    code, _, err = _run(["fk", "--robot", "panda", "--joints", str(tmp_path / "q.npy"), "--clip",
                         "--out", str(tmp_path / "o.npz")], capsys)
    assert code == 0, err
    assert np.load(tmp_path / "o.npz")["joints"][0, 3] == pytest.approx(-0.0698)


@pytest.mark.parametrize("targets, message", [
    (np.tile(np.diag([2.0, 1, 1, 1]), (2, 1, 1)), "not orthonormal"),
    (np.zeros((2, 7)), "unit norm"),
    (np.zeros((2, 5)), "expected (T, 4, 4)"),
    (np.full((1, 4, 4), np.inf), "non-finite"),
])
def test_ik_bad_targets_exit_2(tmp_path, capsys, targets, message):
    np.save(tmp_path / "t.npy", targets)
    code, _, err = _run(["ik", "--robot", "panda", "--targets", str(tmp_path / "t.npy"),
                         "--out", str(tmp_path / "o.npz")], capsys)
    assert code == 2 and message in _one_error_line(err)


def test_ik_seed_must_be_one_configuration(tmp_path, capsys):
    model = load_robot("panda")
    np.save(tmp_path / "t.npy", np.eye(4)[None])
    np.save(tmp_path / "seed.npy", np.tile(model.mid_configuration, (2, 1)))
    code, _, err = _run(["ik", "--robot", "panda", "--targets", str(tmp_path / "t.npy"),
                         "--seed", str(tmp_path / "seed.npy"), "--out", str(tmp_path / "o.npz")],
                        capsys)
    assert code == 2 and "seed: expected one configuration of 8 values, got 2 rows" in err


def test_bad_robot_and_malformed_urdf_exit_2(tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.zeros((1, 1)))
    code, _, err = _run(["fk", "--robot", "nope", "--joints", str(tmp_path / "q.npy"),
                         "--store", f"file://{tmp_path / 's'}", "--out", str(tmp_path / "o.npz")],
                        capsys)
    assert code == 2 and "unknown robot" in _one_error_line(err)
    (tmp_path / "bad.urdf").write_text("<robot name='x'><link name='a'></robot>")
    code, _, err = _run(["fk", "--robot", str(tmp_path / "bad.urdf"), "--joints",
                         str(tmp_path / "q.npy"), "--out", str(tmp_path / "o.npz")], capsys)
    assert code == 2 and "malformed XML" in _one_error_line(err)
    (tmp_path / "a.json").write_text("{not json")
    code, _, err = _run(["kinematics", "solve", "--robot", "panda", "--actions",
                         str(tmp_path / "a.json"), "--out", str(tmp_path / "o.npz")], capsys)
    assert code == 2 and "invalid JSON" in _one_error_line(err)


def test_k4d_fk_as_a_subprocess(tmp_path):
    np.save(tmp_path / "q.npy", load_robot("ur5").mid_configuration[None])
    proc = subprocess.run([sys.executable, "-m", "k4d.cli.main", "fk", "--robot", "ur5", "--joints",
                           str(tmp_path / "q.npy"), "--out", str(tmp_path / "p.npz")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "p.npz")["poses"].shape == (1, 11, 4, 4)
    proc = subprocess.run([sys.executable, "-m", "k4d.cli.main", "fk", "--robot", "ur5", "--joints",
                           str(tmp_path / "absent.npy"), "--out", str(tmp_path / "p.npz")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no such file" in proc.stderr
