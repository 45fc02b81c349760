"""Models shipped in the repository (issue 13, k4d_embedded.shipped): the sha256 of every
file is checked before loading, `--model DIR` of such a folder loads its weights, the
default-model switch, and, for the model in models/demo-small/, its manifest and a golden
output slice of a short sampling run on the held-out example scene."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from k4d.cli.main import main
from k4d.errors import InvalidArgument
from k4d_embedded.inputs import model_ref
from k4d_embedded.shipped import (
    DEFAULT_MODEL_ENV,
    SHIPPED_DEFAULT,
    default_model,
    shipped_notice,
    verify_shipped_model,
)

ROOT = Path(__file__).resolve().parents[4]
HELDOUT = ROOT / "examples" / "demo_heldout"
GOLDEN = "golden.json"


def _tiny_shipped(folder: Path, default: bool = False) -> Path:
    """A shipped-model folder around a random `tiny` model, written as the demo's is."""
    from k4d_model.checkpoints import build_components, save_k4d
    from k4d_model.model.configs import get_model_config
    from k4d_model.registry import build_manifest

    components, _ = build_components(get_model_config("tiny"), seed=0, name="tiny-shipped")
    save_k4d(components, folder / "weights")
    manifest = build_manifest(folder / "weights", "tiny-shipped", "1")
    manifest.update(weights_dir="weights", label="early", default=default,
                    description="small Kinema4D model trained on synthetic data (test)")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return _tiny_shipped(tmp_path_factory.mktemp("models") / "tiny")


def test_verified_folder_resolves_to_its_weights(shipped):
    weights, manifest = verify_shipped_model(shipped)
    assert weights == shipped / "weights" and (weights / "k4d_model.json").is_file()
    assert model_ref(str(shipped)).uri == str((shipped / "weights").resolve())
    notice = shipped_notice(str(shipped))
    assert notice["label"] == "early" and "synthetic" in notice["description"]
    assert shipped_notice(str(shipped / "weights")) is None


def test_tampered_or_missing_file_is_refused(shipped, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    weights = copy / "weights" / "transformer" / "diffusion_pytorch_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    weights.write_bytes(bytes(data))
    with pytest.raises(InvalidArgument, match="sha256"):
        verify_shipped_model(copy)
    weights.unlink()
    with pytest.raises(InvalidArgument, match="missing"):
        model_ref(str(copy))
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="not a model manifest"):
        verify_shipped_model(copy)


def test_cli_with_a_tampered_model_exits_2_with_one_line(shipped, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    vae = next((copy / "weights" / "vae").glob("*.safetensors"))
    vae.write_bytes(vae.read_bytes()[:-8])
    args = ["simulate", "--robot", "panda", "--actions", str(HELDOUT / "actions.json"),
            "--image", str(HELDOUT / "scene.png"), "--camera", str(HELDOUT / "camera.json"),
            "--model", str(copy), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sha256" in err[0] and err[0].startswith("k4d simulate: error:")


def test_default_model_switch(tmp_path, monkeypatch):
    monkeypatch.delenv(DEFAULT_MODEL_ENV, raising=False)
    assert default_model(tmp_path / "absent") == ""
    off = _tiny_shipped(tmp_path / "off", default=False)
    on = _tiny_shipped(tmp_path / "on", default=True)
    assert default_model(off) == ""
    assert default_model(on) == str(on)
    monkeypatch.setenv(DEFAULT_MODEL_ENV, "static-world")
    assert default_model(on) == ""
    monkeypatch.setenv(DEFAULT_MODEL_ENV, str(off))
    assert default_model(on) == str(off)


# ------------------------------------------------------------ the model in models/demo-small

needs_shipped = pytest.mark.skipif(not (SHIPPED_DEFAULT / "manifest.json").is_file(),
                                   reason="no model shipped in models/demo-small yet")


@needs_shipped
def test_shipped_demo_model_verifies_and_fits_the_size_limit():
    weights, manifest = verify_shipped_model(SHIPPED_DEFAULT)
    total = sum(f["size_bytes"] for f in manifest["files"])
    assert total <= 50 * 2 ** 20
    assert all(f["path"].endswith((".json", ".safetensors", ".txt")) for f in manifest["files"])
    info = json.loads((weights / "k4d_model.json").read_text())
    clip = manifest["clip"]
    assert (info["num_frames"], info["height"], info["width"]) == (
        clip["num_frames"], clip["height"], clip["width"])
    camera = json.loads((HELDOUT / "camera.json").read_text())
    assert (camera["height"], camera["width"]) == (clip["height"], clip["width"])
    assert "synthetic" in manifest["description"] and manifest["label"]


@needs_shipped
def test_shipped_demo_model_golden_slice(tmp_path, capsys):
    """A sampling run with the shipped settings on the example scene reproduces the stored
    slice (models/demo-small/golden.json, written by examples/train/demo_model.py golden):
    the transformer is sampled with the model's own steps, and frames t >= 1 carry its
    sample (the ablation that repeats frame 0's latent gives other pixels). The terminal,
    summary.json and viewer.html say which model made it and what it is."""
    golden = json.loads((SHIPPED_DEFAULT / GOLDEN).read_text())
    out = tmp_path / "run"
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in golden["args"]]
    assert main(["simulate", *args, "--model", str(SHIPPED_DEFAULT),
                 "--out", str(out), "--no-progress", "--no-recording"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generator"] == "kinema4d" and not summary["static_world"]
    assert summary["model"]["label"] and "synthetic" in summary["model"]["description"]
    info = json.loads((SHIPPED_DEFAULT / "weights" / "k4d_model.json").read_text())
    assert "--steps" not in golden["args"]  # the shipped settings
    assert summary["sampling"]["num_steps"] == info["num_inference_steps"] > 0
    printed = capsys.readouterr().out
    assert f"model: {summary['model']['id']} (" in printed and "synthetic" in printed
    assert "about the model" in (out / "viewer.html").read_text()
    with np.load(out / "pointmap.npz") as data:
        rgb, points = data["rgb"], data["pointmap"]
    frames, rows, cols = (np.array(golden["index"][k]) for k in ("frames", "rows", "cols"))
    rgb_slice = rgb[np.ix_(frames, rows, cols)].astype(np.int32)
    pts_slice = points[np.ix_(frames, rows, cols)]
    # Thread counts change float summation order: a few grey levels, sub-millimetre.
    assert np.abs(rgb_slice - np.array(golden["rgb"])).max() <= 3
    np.testing.assert_allclose(pts_slice, np.array(golden["pointmap"]), atol=2e-3)
    # The slice is not constant: a broken sampler giving flat frames would not pass.
    assert np.ptp(np.array(golden["rgb"])) > 10


@needs_shipped
def test_shipped_demo_model_frames_come_from_its_transformer(tmp_path):
    """Issue 45's ablation on the example scene: with the transformer's sample replaced by
    frame 0's latent repeated (a sample that changes nothing), frames t >= 1 off the robot
    change; frame 0, the given image, does not."""
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model.pipeline import ABLATION_FIRST_FRAME
    from PIL import Image

    out = tmp_path / "run"
    golden = json.loads((SHIPPED_DEFAULT / GOLDEN).read_text())
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in golden["args"]]
    assert main(["simulate", *args, "--model", str(SHIPPED_DEFAULT), "--out", str(out),
                 "--no-progress", "--no-recording"]) == 0
    image = np.asarray(Image.open(HELDOUT / "scene.png").convert("RGB"))
    with np.load(out / "robot.npz") as data:
        condition = (data["rgb"], data["pointmap"], data["mask"])
    pipe = Kinema4DPipeline.from_pretrained(str(SHIPPED_DEFAULT / "weights"))  # shipped settings
    sampled = pipe(image, *condition, seed=0)
    assert sampled.metadata["num_steps"] == pipe.info.num_inference_steps > 0
    ablated = pipe(image, *condition, seed=0, ablation=ABLATION_FIRST_FRAME)
    off_robot = ~(condition[2] | condition[2][:1])
    difference = np.abs(sampled.rgb.astype(int) - ablated.rgb.astype(int)).max(axis=-1)
    assert (difference[0] == 0).all()
    assert (difference[1:][off_robot[1:]] > 8).mean() > 0.01


@needs_shipped
def test_make_demo_runs_the_shipped_default_model(tmp_path):
    """`make demo` (examples/demo.sh) with no K4D_DEFAULT_MODEL: the rollout is generated by
    the shipped model, on the held-out scene at the model's clip."""
    import os
    import subprocess
    import sys

    manifest = json.loads((SHIPPED_DEFAULT / "manifest.json").read_text())
    if manifest.get("default") is not True:
        pytest.skip("the shipped model is not the default")
    env = {k: v for k, v in os.environ.items() if k != DEFAULT_MODEL_ENV}
    env["K4D_DEMO_OUT"] = str(tmp_path / "demo")
    k4d = Path(sys.executable).parent / "k4d"
    done = subprocess.run(["bash", str(ROOT / "examples" / "demo.sh"), str(k4d)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["generator"] == "kinema4d" and not summary["static_world"]
    assert summary["model"]["name"] == manifest["name"]
    assert "synthetic" in summary["model"]["description"]
    with np.load(tmp_path / "demo" / "pointmap.npz") as data:
        assert data["rgb"].shape[:3] == (manifest["clip"]["num_frames"],
                                         manifest["clip"]["height"], manifest["clip"]["width"])
    assert "model: " in done.stdout and "synthetic" in done.stdout


def test_heldout_line_names_the_figures_and_the_floor(tmp_path):
    from k4d_embedded.shipped import heldout_line

    manifest = {"name": "k4d-demo-small", "version": "step-1", "files": [],
                "weights_dir": "weights"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert heldout_line(tmp_path) == ""  # no held-out evaluation recorded
    manifest["heldout"] = {"episodes": 16, "frame0_psnr_min": 100.0, "static_psnr": 51.23,
                           "static_psnr_floor": 84.0, "changed_mse": 3001.2,
                           "changed_mse_floor": 9435.9, "robot_psnr": 16.4,
                           "robot_psnr_floor": 10.1, "depth_absrel": 0.04,
                           "depth_absrel_floor": 0.36, "success_agreement": 0.875}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    line = heldout_line(tmp_path)
    assert "16 held-out episodes" in line and "static region 51.2 dB (floor 84.0 dB)" in line
    assert "changed-region RGB MSE 3001 (floor 9436)" in line and "agreement 0.88" in line
