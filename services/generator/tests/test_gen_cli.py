"""`k4d generate` end to end on CPU with a tiny checkpoint: torch and ONNX Runtime agree;
static-world without a model; TensorRT and bad inputs fail with one clear line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from k4d.cli.main import main
from PIL import Image


@pytest.fixture
def inputs(tmp_path, make_robot):
    image, robot = make_robot()
    Image.fromarray(image).save(tmp_path / "first.png")
    np.savez(tmp_path / "robot.npz", rgb=robot["robot_rgb"], pointmap=robot["robot_pointmap"],
             mask=robot["robot_mask"])
    (tmp_path / "cam.json").write_text(json.dumps({
        "width": 48, "height": 32, "fx": 40.0, "fy": 40.0, "cx": 23.5, "cy": 15.5,
        "T_cam_from_world": np.eye(4).tolist()}))
    return ["--image", str(tmp_path / "first.png"), "--robot", str(tmp_path / "robot.npz"),
            "--camera", str(tmp_path / "cam.json")]


def _run(args) -> int:
    return main(["generate", *args])


def test_gen_cli_torch_and_onnx_agree(tiny_model_dir, inputs, tmp_path, onnx_cache):
    common = ["--model", str(tiny_model_dir), *inputs, "--steps", "2", "--seed", "3",
              "--no-progress", "--cache-dir", str(onnx_cache)]
    assert _run([*common, "--out", str(tmp_path / "torch")]) == 0
    assert _run([*common, "--backend", "onnx", "--out", str(tmp_path / "onnx")]) == 0
    a = np.load(tmp_path / "torch" / "pointmap.npz")
    b = np.load(tmp_path / "onnx" / "pointmap.npz")
    assert a["pointmap"].shape == (5, 32, 48, 3) and a["mask"].all()
    assert np.abs(a["pointmap"] - b["pointmap"]).max() < 1e-3 * np.abs(a["pointmap"]).max()
    assert np.abs(a["rgb"].astype(int) - b["rgb"]).max() <= 1
    meta = json.loads((tmp_path / "onnx" / "generation.json").read_text())
    assert meta["backend"]["backend"] == "onnx" and meta["seed"] == 3
    assert (tmp_path / "torch" / "rgb.mp4").stat().st_size > 0
    import imageio.v2 as imageio

    assert len(imageio.mimread(tmp_path / "torch" / "rgb.mp4")) == 5
    # the one pointmap_k4d writer (k4d.pointmap_video): same schema as `k4d simulate`
    meta8 = json.loads((tmp_path / "torch" / "pointmap_k4d.json").read_text())
    assert len(meta8["scale"]) == 5 and len(meta8["centre"][0]) == 3
    assert meta8["version"] == "1" and meta8["clip_percentiles"] == [2.0, 98.0]
    from k4d.pointmap_codec import encode_8bit
    from k4d.pointmap_video import read_pointmap_video

    np.testing.assert_array_equal(read_pointmap_video(tmp_path / "torch").values,
                                  encode_8bit(a["pointmap"], a["mask"]).values)


def test_gen_cli_official_layout_model(tmp_path, inputs):
    out = tmp_path / "official"
    assert main(["generate", "init-model", "--config", "tiny", "--layout", "official",
                 "--variant", "pmcond", "--out", str(out)]) == 0
    assert (out / "base" / "transformer" / "config.json").exists()
    assert (out / "kinema4d" / "added_weights.safetensors").exists()
    assert _run(["--model", str(out), *inputs, "--steps", "1", "--no-progress",
                 "--out", str(tmp_path / "res")]) == 0
    meta = json.loads((tmp_path / "res" / "generation.json").read_text())
    assert meta["model"]["layout"] == "official" and meta["model"]["variant"] == "pmcond"


def test_gen_cli_tensorrt_without_gpu_fails_cleanly(tiny_model_dir, inputs, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = _run(["--model", str(tiny_model_dir), *inputs, "--backend", "tensorrt",
                 "--out", str(tmp_path / "trt")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("k4d generate: error: the tensorrt backend needs a CUDA GPU")


def test_gen_cli_tensorrt_fp8_is_refused_before_loading(tiny_model_dir, inputs, tmp_path,
                                                       capsys):
    code = _run(["--model", str(tiny_model_dir), *inputs, "--backend", "tensorrt",
                 "--precision", "fp8", "--out", str(tmp_path / "trt")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("k4d generate: error: precision: tensorrt fp8 is not supported")


def test_gen_cli_bad_inputs_one_line_exit_2(tiny_model_dir, inputs, tmp_path, capsys):
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    args = list(inputs)
    args[args.index("--robot") + 1] = str(tmp_path / "bad.npz")
    assert _run(["--model", str(tiny_model_dir), *args, "--out", str(tmp_path / "x")]) == 2
    assert "not a readable NPZ" in capsys.readouterr().err
    assert _run(["--model", str(tiny_model_dir), "--out", str(tmp_path / "x")]) == 2
    assert "--image" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--device", "foo", "device: 'foo' is not a device; use cpu or cuda[:N]"),
    ("--shift", "-1", "shift: must be a finite number > 0"),
])
def test_gen_cli_bad_sampling_flags_one_line_exit_2(tiny_model_dir, inputs, tmp_path, capsys,
                                                    flag, value, message):
    assert _run(["--model", str(tiny_model_dir), *inputs, "--no-progress", "--steps", "1",
                 flag, value, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"k4d generate: error: {message}"
    assert not (tmp_path / "x").exists()


def test_gen_cli_out_that_is_a_file_is_refused_before_sampling(tiny_model_dir, inputs, tmp_path,
                                                               capsys):
    (tmp_path / "taken").write_text("")
    assert _run(["--model", str(tiny_model_dir), *inputs, "--no-progress",
                 "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"k4d generate: error: out: {tmp_path / 'taken'} exists and is not a directory"]


@pytest.mark.parametrize("camera", [{"fx": 0.0, "fy": 40.0, "cx": 1.0, "cy": 1.0},
                                    {"fx": 40.0, "fy": 40.0, "cx": float("nan"), "cy": 1.0}])
def test_gen_cli_unusable_camera_is_one_line_exit_2(tiny_model_dir, inputs, tmp_path, capsys,
                                                    camera):
    (tmp_path / "cam.json").write_text(json.dumps(camera))  # `inputs` points here
    assert _run(["--model", str(tiny_model_dir), *inputs, "--no-progress",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("k4d generate: error: camera: ") and "must be finite" in err[-1]
    assert not (tmp_path / "x").exists()


def test_gen_cli_camera_pose_is_the_extrinsics_and_checked(inputs, tmp_path, capsys):
    from k4d_generator.cli import read_camera_pose

    camera = json.loads((tmp_path / "cam.json").read_text())
    lift = np.eye(4)
    lift[2, 3] = 0.5
    (tmp_path / "based.json").write_text(json.dumps({**camera, "T_world_from_base":
                                                     lift.tolist()}))
    assert np.allclose(read_camera_pose(str(tmp_path / "based.json")), lift)
    del camera["T_cam_from_world"]  # intrinsics only: no pose
    (tmp_path / "plain.json").write_text(json.dumps(camera))
    assert read_camera_pose(str(tmp_path / "plain.json")) is None
    (tmp_path / "cam.json").write_text(json.dumps({**camera, "T_cam_from_world":
                                                   (2 * np.eye(4)).tolist()}))
    assert _run([*inputs, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("k4d generate: error: camera.T_cam_from_world: ")
    assert not (tmp_path / "x").exists()


def test_gen_cli_static_world_subprocess(inputs, tmp_path):
    """One real subprocess: the installed `k4d` entry point, no model -> static-world."""
    out = tmp_path / "static"
    proc = subprocess.run([sys.executable, "-m", "k4d.cli.main", "generate", *inputs,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "static-world" in proc.stderr
    meta = json.loads((out / "generation.json").read_text())
    assert meta["generator"] == "static-world" and meta["generated"] is False
    assert np.load(out / "pointmap.npz")["pointmap"].shape == (5, 32, 48, 3)


def test_gen_cli_init_model_refuses_what_host_memory_cannot_hold(tmp_path, capsys):
    import psutil

    if psutil.virtual_memory().available > 200 * 2**30:
        pytest.skip("this machine could hold a random wan14b")
    assert main(["generate", "init-model", "--config", "wan14b", "--out",
                 str(tmp_path / "w")]) == 2
    assert "GiB of host memory" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_cli_bad_flag_and_fp8_exit_2_with_one_line(tiny_model_dir, inputs, tmp_path,
                                                    capsys):
    common = ["generate", "--model", str(tiny_model_dir), *inputs, "--no-progress",
              "--out", str(tmp_path / "o")]
    assert main([*common, "--solver", "dpm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--solver" in err[0]
    assert main([*common, "--quant", "fp8", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sampling.quant" in err[0] and "Hopper" in err[0]
