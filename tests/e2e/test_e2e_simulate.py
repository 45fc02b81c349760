"""`k4d simulate` (embedded mode) on the shipped example: the README's main job."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from k4d.cli.main import main
from k4d.tensor_io import load_npz

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "panda_pick"
OUTPUTS = ("rgb.mp4", "pointmap.npz", "robot.npz", "pointmap_k4d.mp4", "pointmap_k4d.json",
           "summary.json", "viewer.html")


def _example(out: Path, *extra: str) -> list[str]:
    return ["simulate", "--robot", "panda", "--actions", str(EXAMPLE / "actions.json"),
            "--image", str(EXAMPLE / "scene.png"), "--camera", str(EXAMPLE / "camera.json"),
            "--out", str(out), "--no-progress", *extra]


def test_shipped_example_default_settings(tmp_path):
    """The demo command itself (49 frames at 480x720, static-world), as a subprocess."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "k4d.cli.main", *_example(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STATIC-WORLD" in done.stderr  # labelled in the logs
    out = tmp_path / "demo"
    for name in OUTPUTS:
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clip"] == {"num_frames": 49, "height": 480, "width": 720}
    assert summary["kinematics"]["ik_failed_frames"] == 0
    robot = load_npz(out / "robot.npz")
    visible = robot["mask"].reshape(49, -1).mean(axis=1)
    assert (visible > 0.01).all(), "the Panda is in view in every frame"
    # the gripper closes and opens again during the pick
    finger = robot["joints"][:, robot["joint_names"].tolist().index("panda_finger_joint1")]
    assert finger.min() < 0.005 and finger[0] > 0.035 and finger[-1] > 0.035
    print(f"shipped example, default settings: {elapsed:.1f} s")


@pytest.mark.integration
def test_embedded_with_a_real_tiny_model_goes_through_the_sampler(tiny_model, tmp_path):
    out = tmp_path / "tiny"
    assert main(_example(out, "--model", str(tiny_model), "--frames", "5", "--downscale", "15",
                         "--steps", "2", "--seed", "7")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["static_world"] is False and summary["generator"] == "kinema4d"
    assert summary["model"]["id"] != "static-world" and summary["seed"] == 7
    assert summary["sampling"]["num_steps"] == 2
    assert "STATIC-WORLD" not in (out / "viewer.html").read_text()
    world = load_npz(out / "pointmap.npz")
    assert world["pointmap"].shape == (5, 32, 48, 3) and np.isfinite(world["pointmap"]).all()
    # same seed, same model, same backend -> same rollout
    again = tmp_path / "again"
    assert main(_example(again, "--model", str(tiny_model), "--frames", "5", "--downscale", "15",
                         "--steps", "2", "--seed", "7")) == 0
    np.testing.assert_array_equal(load_npz(again / "pointmap.npz")["rgb"], world["rgb"])


@pytest.mark.integration
def test_embedded_with_a_registry_model_records_name_and_version(tiny_model, tmp_path,
                                                                 monkeypatch):
    store_uri = (tmp_path / "store").resolve().as_uri()
    assert main(["generate", "publish", "--model", str(tiny_model), "--name", "pick-act",
                 "--version", "7", "--store", store_uri]) == 0
    monkeypatch.setenv("K4D_STORE_URI", store_uri)
    out = tmp_path / "registry"
    assert main(_example(out, "--model", "pick-act/7", "--frames", "5", "--downscale", "15",
                         "--steps", "1")) == 0
    model = json.loads((out / "summary.json").read_text())["model"]
    assert (model["name"], model["version"]) == ("pick-act", "7")
    assert main(_example(tmp_path / "missing", "--model", "pick-act/8", "--frames", "5",
                         "--downscale", "15")) == 2
