"""`k4d simulate` writes rollout.rrd: read back with rerun's own tools (`rerun rrd verify`
and its chunk reader) it has the camera, the full-resolution world and robot points, the
robot's FK link frames with meshes, joints and actions on every frame; `--no-recording`
leaves it out. `k4d generate` writes one too."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from k4d.cli.main import main
from k4d.recording import read_recording_index
from k4d.tensor_io import load_npz

pytest.importorskip("rerun", reason="rerun-sdk (k4d-runtime[viz]) not installed")

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "panda_pick"
ARGS = ["--robot", "panda", "--actions", str(EXAMPLE / "actions.json"), "--image",
        str(EXAMPLE / "scene.png"), "--camera", str(EXAMPLE / "camera.json"),
        "--downscale", "8", "--frames", "5", "--no-progress"]  # 60x90 px, 5 frames
T, H, W = 5, 60, 90


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "out"
    assert main(["simulate", *ARGS, "--out", str(out)]) == 0
    return out


def test_simulate_recording_has_every_layer_on_every_frame(rollout):
    path = rollout / "rollout.rrd"
    verify = subprocess.run([str(Path(sys.executable).with_name("rerun")), "rrd", "verify",
                             str(path)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr
    robot = load_npz(rollout / "robot.npz")
    index = read_recording_index(path)
    frames = list(range(T))
    for entity in ("/world/camera/image", "/world/camera/points", "/world/camera/robot_points",
                   "/world/camera/image/robot_mask", "/plots/joints", "/plots/actions"):
        assert index.frames[entity] == frames, entity
    for link in robot["link_names"]:
        assert index.frames[f"/world/robot/{link}"] == frames, link
    meshes = {e for e in index.static if e.endswith("/mesh")}
    assert {"/world/robot/panda_link0/mesh", "/world/robot/panda_hand/mesh"} <= meshes
    assert {"/world", "/world/camera", "/world/camera/image", "/notes"} <= index.static
    # every pixel of the (all-valid) static-world pointmap is a point
    counts = [len(p) for b in index.batches["/world/camera/points"]
              for p in b.column("Points3D:positions").to_pylist()]
    assert counts == [H * W] * T
    robot_counts = [len(p) for b in index.batches["/world/camera/robot_points"]
                    for p in b.column("Points3D:positions").to_pylist()]
    assert robot_counts == [int(m.sum()) for m in robot["mask"]]
    notes = index.batches["/notes"][0].column("TextDocument:text").to_pylist()[0][0]
    assert "STATIC-WORLD" in notes and "not generated dynamics" in notes


def test_no_recording_flag_leaves_it_out(tmp_path, capsys):
    assert main(["simulate", *ARGS, "--frames", "3", "--out", str(tmp_path / "o"),
                 "--no-recording"]) == 0
    assert not (tmp_path / "o" / "rollout.rrd").exists()
    assert (tmp_path / "o" / "viewer.html").is_file()


def test_generate_writes_a_recording_from_a_robot_condition(rollout, tmp_path):
    import json

    from PIL import Image

    camera = json.loads((EXAMPLE / "camera.json").read_text())
    camera.update(width=W, height=H, fx=camera["fx"] / 8, fy=camera["fy"] / 8,
                  cx=(W - 1) / 2, cy=(H - 1) / 2)
    (tmp_path / "camera.json").write_text(json.dumps(camera))
    Image.open(EXAMPLE / "scene.png").resize((W, H)).save(tmp_path / "scene.png")
    assert main(["generate", "--image", str(tmp_path / "scene.png"), "--robot",
                 str(rollout / "robot.npz"), "--camera", str(tmp_path / "camera.json"),
                 "--out", str(tmp_path / "gen")]) == 0
    index = read_recording_index(tmp_path / "gen" / "rollout.rrd")
    for entity in ("/world/camera/image", "/world/camera/points", "/world/camera/robot_points",
                   "/plots/joints", "/world/robot/panda_hand"):
        assert index.frames[entity] == list(range(T)), entity
    pointmap = load_npz(tmp_path / "gen" / "pointmap.npz")["pointmap"]
    assert np.isfinite(pointmap).all()
