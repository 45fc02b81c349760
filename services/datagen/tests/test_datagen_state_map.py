"""State mapping of `k4d datagen import-lerobot` on the layouts people publish, each made from
the committed lerobot-written fixture by replacing its state column (videos, episodes and
tasks stay lerobot's): DROID's 7 joints + a gripper in [0, 1] through --state-map, and
LIBERO-style end-effector poses (position + axis-angle | quaternion | Euler, 2 finger joints)
made from the fixture's known joints through our FK, imported through our IK."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from k4d.cli.main import main
from k4d.episodes import open_dataset
from k4d.robots.fk import forward_kinematics
from k4d.rotations import so3_log
from k4d_datagen.engine import robot_and_renderer
from k4d_datagen.lerobot import MAX_IK_FAILED_FRACTION, EpisodeRefused, _episode_joints
from k4d_datagen.state_map import parse_spec, resolve

FIXTURE = Path(__file__).parent / "fixtures" / "lerobot-v3.0-panda9"
TRUTH = json.loads((FIXTURE / "truth.json").read_text())
LENGTH = 20  # frames per fixture episode
DATA = "data/chunk-000/file-000.parquet"
DROID_NAMES = [f"joint_{i}" for i in range(7)] + ["gripper_position"]
LIBERO_NAMES = ["eef_x", "eef_y", "eef_z", "eef_r0", "eef_r1", "eef_r2", "gripper_left", "gripper_right"]
ARM = [f"panda_joint{i}" for i in range(1, 8)]


def k4d(*argv) -> int:
    return main([str(a) for a in argv])


def truth(e: int) -> np.ndarray:
    return np.asarray(TRUTH[str(e)]["states"], np.float64)


def with_state(root: Path, state: dict[int, np.ndarray], names: list[str] | None, shape: int | None = None,
               key: str = "observation.state") -> Path:
    """The fixture at `root` (copied unless there) with feature `key` set to state[e] (L, W)
    per episode: observation.state replaced, another key added."""
    if not root.exists():
        shutil.copytree(FIXTURE, root)
    table = pq.read_table(root / DATA)
    episode = np.asarray(table.column("episode_index").to_pylist())
    frame = np.asarray(table.column("frame_index").to_pylist())
    values = np.stack([state[e][t] for e, t in zip(episode, frame, strict=True)]).astype(np.float32)
    width = values.shape[1]
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)
    if key in table.schema.names:
        table = table.set_column(table.schema.get_field_index(key), key, column)
    else:
        table = table.append_column(key, column)
    pq.write_table(table, root / DATA)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"].setdefault(key, {"dtype": "float32"}).update(shape=[shape or width], names=names)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root


def test_columns_from_two_features(tmp_path):
    """DROID as lerobot's port splits it: observation.state.joint_position (7) and
    observation.state.gripper_position (1, no names), with no observation.state at all."""
    src = with_state(tmp_path / "droid", {e: truth(e)[:, :7] for e in (0, 1)}, DROID_NAMES[:7],
                     key="observation.state.joint_position")
    with_state(src, {e: 1.0 - truth(e)[:, 7:8] / 0.04 for e in (0, 1)}, None, key="observation.state.gripper_position")
    info = json.loads((src / "meta" / "info.json").read_text())
    del info["features"]["observation.state"]
    (src / "meta" / "info.json").write_text(json.dumps(info))
    mapping = ",".join(f"observation.state.joint_position[joint_{i}]=panda_joint{i + 1}" for i in range(7))
    mapping += ",observation.state.gripper_position[0]=panda_finger_joint1*-0.04+0.04"
    assert run_import(src, tmp_path / "ds", "--state-map", mapping, "--episodes", "1") == 0
    ep = open_dataset(tmp_path / "ds").open("lerobot-000001")
    np.testing.assert_allclose(ep.read("joints"), truth(1)[:, :8], atol=1e-6)
    assert ep.meta.source["state_map"]["columns"][-1]["column"] == "observation.state.gripper_position[0]"


def ee_states(rotation: str = "axis_angle") -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """LIBERO-style states from the fixture's joints: TCP position, rotation, finger joints
    (robosuite reports the second finger negated). Also returns the (L, 4, 4) poses."""
    robot, _ = robot_and_renderer("panda")
    tcp = robot.link_names.index(robot.ee_link)
    states, poses = {}, {}
    for e in (0, 1):
        q = truth(e)
        T = forward_kinematics(robot, q[:, :8])[:, tcp]
        if rotation == "axis_angle":
            rot = so3_log(T[:, :3, :3])
        elif rotation == "quaternion":
            from scipy.spatial.transform import Rotation

            rot = Rotation.from_matrix(T[:, :3, :3]).as_quat()  # x, y, z, w
        else:
            from scipy.spatial.transform import Rotation

            rot = Rotation.from_matrix(T[:, :3, :3]).as_euler("xyz")  # extrinsic = URDF rpy
        states[e] = np.concatenate([T[:, :3, 3], rot, q[:, 7:8], -q[:, 8:9]], axis=1)
        poses[e] = T
    return states, poses


def check_fk(ep, poses: np.ndarray) -> None:
    """FK of the imported joints is within 1 mm / 1 mrad of the stated (float32) pose."""
    robot, _ = robot_and_renderer("panda")
    tcp = robot.link_names.index(robot.ee_link)
    pick = np.asarray(ep.meta.source["source_frames"])
    T = forward_kinematics(robot, ep.read("joints"))[:, tcp]
    stated = poses[pick]
    position = np.linalg.norm(T[:, :3, 3] - stated[:, :3, 3], axis=-1)
    rotation = np.linalg.norm(so3_log(np.swapaxes(stated[:, :3, :3], -1, -2) @ T[:, :3, :3]), axis=-1)
    assert position.max() < 1e-3, position.max()
    assert rotation.max() < 1e-3, rotation.max()


def run_import(src: Path, out: Path, *argv) -> int:
    return k4d("datagen", "import-lerobot", src, "--robot", "panda", "--camera", FIXTURE / "camera.json",
               "--out", out, "--frames", LENGTH, "--no-progress", *argv)


def test_droid_joints_and_gripper_in_0_1_through_state_map(tmp_path, capsys):
    # DROID: gripper_position 0 = open, 1 = closed; a Panda finger joint is the opening, 0.04 m open.
    state = {e: np.concatenate([truth(e)[:, :7], 1.0 - truth(e)[:, 7:8] / 0.04], axis=1) for e in (0, 1)}
    src = with_state(tmp_path / "droid", state, DROID_NAMES)
    # Without a map the names match no joint: one line asking for --state-map, nothing written.
    assert run_import(src, tmp_path / "none") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give --state-map" in err and "joint counts do not match" in err, err
    mapping = ",".join(f"joint_{i}=panda_joint{i + 1}" for i in range(7)) + ",gripper_position=panda_finger_joint1*-0.04+0.04"
    assert run_import(src, tmp_path / "ds", "--state-map", mapping) == 0
    ds = open_dataset(tmp_path / "ds")
    for e in (0, 1):
        ep = ds.open(f"lerobot-{e:06d}")
        np.testing.assert_allclose(ep.read("joints"), truth(e)[:, :8], atol=1e-6)
        record = ep.meta.source["state_map"]
        assert record["kind"] == "joints" and record["columns"][-1] == {
            "column": "gripper_position", "target": "panda_finger_joint1", "scale": -0.04, "offset": 0.04}
        assert ep.meta.source["dropped_columns"] == {}


@pytest.mark.parametrize("rotation, spec", [
    ("axis_angle", "0=x,1=y,2=z,3=rx,4=ry,5=rz,6=panda_finger_joint1"),
    ("quaternion", "json"),
    ("euler_xyz", "eef_x=x,eef_y=y,eef_z=z,eef_r0=roll,eef_r1=pitch,eef_r2=yaw,gripper_left=panda_finger_joint1"),
])
def test_ee_pose_through_ik_meets_fk_tolerance(tmp_path, rotation, spec):
    states, poses = ee_states(rotation)
    names = LIBERO_NAMES if rotation != "quaternion" else LIBERO_NAMES[:3] + ["qx", "qy", "qz", "qw"] + LIBERO_NAMES[6:]
    src = with_state(tmp_path / "ee", states, names)
    if spec == "json":
        spec = str(tmp_path / "map.json")
        Path(spec).write_text(json.dumps({"columns": {
            "eef_x": "x", "eef_y": "y", "eef_z": "z", "qx": "qx", "qy": "qy", "qz": "qz", "qw": "qw",
            "gripper_left": {"target": "panda_finger_joint1", "scale": 1.0, "offset": 0.0}}}))
    episodes = "0,1" if rotation == "axis_angle" else "1"
    assert run_import(src, tmp_path / "ds", "--state-kind", "ee_pose", "--state-map", spec, "--episodes", episodes) == 0
    ds = open_dataset(tmp_path / "ds")
    for e in map(int, episodes.split(",")):
        ep = ds.open(f"lerobot-{e:06d}")
        check_fk(ep, poses[e])
        ik = ep.meta.source["ik"]
        assert ik["failed_frames"] == [] and ik["frames_solved"] == LENGTH and ik["link"] == "panda_hand_tcp"
        assert ep.meta.source["state_map"]["rotation"] == rotation
        assert ep.meta.source["dropped_columns"] == {"gripper_right": "not in --state-map"}
        np.testing.assert_allclose(ep.read("joints")[:, 7], truth(e)[:, 7], atol=1e-7)  # the finger, mapped


def test_ee_pose_episode_with_too_many_ik_failures_is_refused(tmp_path, capsys):
    states, _ = ee_states()
    states[1][[3, 11], 0] += 3.0  # 3 m out of reach: 2 of 20 frames fail (10 % > 2 %)
    src = with_state(tmp_path / "ee", states, LIBERO_NAMES)
    code = run_import(src, tmp_path / "ds", "--state-kind", "ee_pose", "--state-map",
                      "0=x,1=y,2=z,3=rx,4=ry,5=rz,6=panda_finger_joint1")
    captured = capsys.readouterr()
    assert code == 1, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "episode: 1 refused: IK failed on 2 of 20 frames" in lines[0], lines
    assert "frames 3, 11" in lines[0] and "1 refused" in captured.out
    assert open_dataset(tmp_path / "ds").episode_ids == ["lerobot-000000"]


def test_ik_failures_up_to_2_percent_are_listed_not_refused():
    """60 frames with one unreachable pose (1.7 %): imported, the frame listed."""
    robot, _ = robot_and_renderer("panda")
    tcp = robot.link_names.index(robot.ee_link)
    q = np.repeat(truth(0)[:, :8], 3, axis=0)
    T = forward_kinematics(robot, q)[:, tcp]
    state = np.concatenate([T[:, :3, 3], so3_log(T[:, :3, :3]), q[:, 7:8]], axis=1)
    state[17, 2] += 3.0
    features = {"observation.state": {"dtype": "float32", "shape": [7], "names": None}}
    mapping = resolve(parse_spec("0=x,1=y,2=z,3=rx,4=ry,5=rz,6=panda_finger_joint1"), features=features,
                      state_key="observation.state", robot=robot, kind="ee_pose")
    joints, ik = _episode_joints(robot, mapping, {"observation.state": state}, 0)
    assert ik["failed_frames"] == [17] and 1 / 60 <= MAX_IK_FAILED_FRACTION
    ok = np.ones(60, bool)
    ok[17] = False
    T_ik = forward_kinematics(robot, joints)[:, tcp]
    assert np.linalg.norm(T_ik[ok, :3, 3] - T[ok, :3, 3], axis=-1).max() < 1e-3
    state[18, 2] += 3.0  # a second failure: 3.3 % > 2 %
    with pytest.raises(EpisodeRefused, match="IK failed on 2 of 60 frames"):
        _episode_joints(robot, mapping, {"observation.state": state}, 0)


def test_ee_pose_in_a_world_frame_of_another_point(tmp_path):
    """LIBERO-like: poses of a point 5 cm past panda_hand in a world where the base sits at
    (-0.6, 0.1, 0.9) turned 90 deg; the JSON map's link, T_base_from_world and T_link_from_ee
    bring them back to our base frame before IK."""
    robot, _ = robot_and_renderer("panda")
    hand = robot.link_names.index("panda_hand")
    q = truth(1)[:, :8]
    T_base_from_hand = forward_kinematics(robot, q)[:, hand]
    T_world_from_base = np.array([[0, -1, 0, -0.6], [1, 0, 0, 0.1], [0, 0, 1, 0.9], [0, 0, 0, 1]], float)
    T_hand_from_ee = np.eye(4)
    T_hand_from_ee[2, 3] = 0.05
    T_world_from_ee = T_world_from_base @ T_base_from_hand @ T_hand_from_ee
    state = np.concatenate([T_world_from_ee[:, :3, 3], so3_log(T_world_from_ee[:, :3, :3]), q[:, 7:8]], axis=1)
    (tmp_path / "map.json").write_text(json.dumps({
        "columns": {str(i): r for i, r in enumerate(["x", "y", "z", "rx", "ry", "rz", "panda_finger_joint1"])},
        "link": "panda_hand", "T_base_from_world": np.linalg.inv(T_world_from_base).tolist(),
        "T_link_from_ee": T_hand_from_ee.tolist()}))
    features = {"observation.state": {"dtype": "float32", "shape": [7], "names": None}}
    mapping = resolve(parse_spec(str(tmp_path / "map.json")), features=features, state_key="observation.state",
                      robot=robot, kind="ee_pose")
    joints, ik = _episode_joints(robot, mapping, {"observation.state": state}, 1)
    assert ik["failed_frames"] == [] and ik["link"] == "panda_hand"
    T = forward_kinematics(robot, joints)[:, hand]
    assert np.linalg.norm(T[:, :3, 3] - T_base_from_hand[:, :3, 3], axis=-1).max() < 1e-3
    assert np.linalg.norm(so3_log(np.swapaxes(T_base_from_hand[:, :3, :3], -1, -2) @ T[:, :3, :3]), axis=-1).max() < 1e-3


def test_parse_spec_inline_forms():
    spec = parse_spec("gripper=panda_finger_joint1*-0.04+0.04, 3=x*0.001, joint_0=panda_joint1-1e-3,a=y*2")
    assert spec["columns"] == {
        "gripper": {"target": "panda_finger_joint1", "scale": -0.04, "offset": 0.04},
        "3": {"target": "x", "scale": 0.001, "offset": 0.0},
        "joint_0": {"target": "panda_joint1", "scale": 1.0, "offset": -0.001},
        "a": {"target": "y", "scale": 2.0, "offset": 0.0}}


NINE = [*ARM, "panda_finger_joint1", "panda_finger_joint2"]


@pytest.mark.parametrize("case, argv, message", [
    ("fixture", ["--state-map", ",".join(f"{n}={n}" for n in ARM) + ",nope=panda_finger_joint1"],
     "column 'nope' is not in observation.state"),
    ("fixture", ["--state-map", ",".join(f"{i}=panda_joint{i + 1}" for i in range(7)) + ",7=gripper_joint"],
     "'gripper_joint' is not a joint of robot 'panda'"),
    ("fixture", ["--state-map", ",".join(f"{i}=panda_joint{i + 1}" for i in range(7)) + ",8=panda_finger_joint2"],
     "is a mimic joint"),
    ("fixture", ["--state-map", ",".join(f"{i}=panda_joint{i + 1}" for i in range(7)) + ",12=panda_finger_joint1"],
     "column '12' is outside observation.state (width 9)"),
    ("fixture", ["--state-map", "0=x"], "add --state-kind ee_pose"),
    ("fixture", ["--state-map", "panda_joint1"], "expected COLUMN=TARGET"),
    ("fixture", ["--state-map", "0=panda_joint1*0"], "non-zero"),
    ("fixture", ["--state-kind", "ee_pose", "--state-map", "0=x,1=y,2=z,3=rx,4=ry"], "one complete rotation"),
    ("fixture", ["--state-kind", "ee_pose", "--state-map", "0=x,1=y,2=z,3=rx,4=ry,5=rz,6=panda_joint1"],
     "arm joints come from IK"),
    ("fixture", ["--state-map", "other.feature[0]=panda_joint1"], "'other.feature' is not a feature"),
    ("width", [], "the state width does not match"),
    ("names", [], "the state width does not match its names"),
])
def test_bad_state_input_one_line_exit_2(tmp_path, capsys, case, argv, message):
    src = FIXTURE
    if case == "width":  # info.json says 8 values, the data files hold 9
        src = with_state(tmp_path / "src", {e: truth(e) for e in (0, 1)}, NINE[:8], shape=8)
    elif case == "names":  # 9 values, 8 names
        src = with_state(tmp_path / "src", {e: truth(e) for e in (0, 1)}, NINE[:8])
    code = run_import(src, tmp_path / "ds", *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("k4d datagen: error:"), err
    assert message in err, err
    assert not (tmp_path / "ds").exists() or open_dataset(tmp_path / "ds").episode_ids == []
