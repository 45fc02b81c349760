"""`k4d simulate`, `k4d view`, `k4d submit`, `k4d jobs`: in-process and one subprocess."""

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from k4d.bus import InProcessBus
from k4d.cli.main import main
from k4d.config import Config
from k4d.grpc_server import create_server
from k4d.store import LocalStore
from k4d.tensor_io import load_npz
from k4d_embedded.view import view_directory
from k4d_simulator.api import SimulatorServicer
from k4d_simulator.feed import JobFeed
from k4d_simulator.jobs import JobTable
from kinema4d.v1 import simulator_pb2_grpc

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "panda_pick"
QUICK = ["--downscale", "8", "--frames", "7", "--no-progress"]  # 60x90 px, 7 frames


def _example_args(**override):
    args = {"--robot": "panda", "--actions": str(EXAMPLE / "actions.json"),
            "--image": str(EXAMPLE / "scene.png"), "--camera": str(EXAMPLE / "camera.json")}
    args.update(override)
    return [x for kv in args.items() for x in kv]


@pytest.fixture(scope="module")
def quick_rollout(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "out"
    assert main(["simulate", *_example_args(), "--out", str(out), *QUICK]) == 0
    return out


def test_simulate_writes_every_output_with_design_keys(quick_rollout):
    out = quick_rollout
    robot = load_npz(out / "robot.npz")
    assert set(robot) == {"link_names", "joint_names", "joints", "poses", "depth", "pointmap",
                          "mask", "link_id", "rgb"}
    T, H, W = 7, 60, 90
    assert robot["joints"].shape == (T, 8) and robot["poses"].shape[0] == T
    assert robot["pointmap"].shape == (T, H, W, 3) and robot["mask"].dtype == bool
    assert robot["mask"].any(), "the Panda must be in view of the example camera"
    assert robot["link_id"].dtype == np.int16 and robot["link_id"].min() == -1
    world = load_npz(out / "pointmap.npz")
    assert world["pointmap"].shape == (T, H, W, 3) and world["rgb"].shape == (T, H, W, 3)
    # static-world: the robot's own points are composited into the world pointmap
    np.testing.assert_array_equal(world["pointmap"][robot["mask"]], robot["pointmap"][robot["mask"]])
    from k4d.video import read_video

    assert read_video(out / "rgb.mp4").shape == (T, H, W, 3)
    meta = json.loads((out / "pointmap_k4d.json").read_text())
    assert len(meta["scale"]) == T and len(meta["centre"]) == T


def test_summary_and_viewer_label_static_world(quick_rollout):
    summary = json.loads((quick_rollout / "summary.json").read_text())
    assert summary["static_world"] is True and summary["model"]["id"] == "static-world"
    assert "not generated dynamics" in summary["notice"]
    assert set(summary["stage_seconds"]) == {"kinematics", "projection", "generation"}
    assert summary["seed"] == 42 and summary["clip"] == {"num_frames": 7, "height": 60, "width": 90}
    html = (quick_rollout / "viewer.html").read_text()
    assert "STATIC-WORLD" in html and "not generated dynamics" in html
    # self-contained: nothing loaded from anywhere (test_sim_viewer.py checks every URL)
    assert "<script" in html and "src=" not in html and "k4d-points" in html


def test_8bit_pointmap_video_decodes_to_metric_points(quick_rollout):
    from k4d.video import read_video

    meta = json.loads((quick_rollout / "pointmap_k4d.json").read_text())
    codes = read_video(quick_rollout / "pointmap_k4d.mp4").astype(np.float64)
    world = load_npz(quick_rollout / "pointmap.npz")
    scale, centre = np.array(meta["scale"]), np.array(meta["centre"])
    decoded = (codes / 127.5 - 1) * scale[:, None, None, None] + centre[:, None, None, :]
    mask = world["mask"]
    err = np.abs(decoded[mask] - world["pointmap"][mask])
    # inside the 2/98 percentile clip box the error is one code step; allow clipped tails
    assert np.median(err) < (scale.max() / 127.5)


def test_view_prints_and_serves_on_loopback(quick_rollout, capsys):
    assert main(["view", str(quick_rollout), "--html"]) == 0
    assert str(quick_rollout / "viewer.html") in capsys.readouterr().out
    stop, lines = threading.Event(), []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    thread = threading.Thread(target=view_directory, args=(quick_rollout,),
                              kwargs={"serve": True, "stop": stop, "out": Out()})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not any("http://127.0.0.1:" in s for s in lines) and time.monotonic() < deadline:
            time.sleep(0.02)
        url = next(s for s in lines if "http://" in s).split(" at ")[1].split(" ")[0]
        assert urllib.request.urlopen(url, timeout=5).read().startswith(b"<!DOCTYPE html>")
    finally:
        stop.set()
        thread.join(10)


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    assert main(["simulate", *_example_args(**{"--image": str(tmp_path / "none.png")}),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--image" in err[0] and "no such file" in err[0]
    camera = json.loads((EXAMPLE / "camera.json").read_text())
    camera["fx"] = -5
    (tmp_path / "cam.json").write_text(json.dumps(camera))
    assert main(["simulate", *_example_args(**{"--camera": str(tmp_path / "cam.json")}),
                 "--out", str(tmp_path / "o")]) == 2
    assert "camera.fx" in capsys.readouterr().err
    assert main(["simulate", *_example_args(**{"--robot": "ur5"}), "--out", str(tmp_path)]) == 2
    assert "for robot 'panda'" in capsys.readouterr().err
    assert main(["view", str(tmp_path)]) == 2


def test_subprocess_simulate_help_and_bad_input():
    done = subprocess.run([sys.executable, "-m", "k4d.cli.main", "simulate", "--robot", "panda",
                           "--actions", "/nonexistent.json", "--image", "x.png", "--camera",
                           "c.json", "--out", "/tmp/never"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("k4d simulate: error:")


@pytest.fixture
def simulator_address(tmp_path):
    bus, table = InProcessBus(), JobTable()
    feed = JobFeed(bus, table, poll_timeout_s=0.05).start()
    servicer = SimulatorServicer(bus, LocalStore(tmp_path / "store"), table, watch_poll_s=0.05)

    def register(server, config):
        simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(servicer, server)
        return ["kinema4d.v1.SimulatorService"]

    server, port = create_server(Config(grpc_host="127.0.0.1", grpc_port=0), [register])
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)
    feed.stop()


def test_submit_and_jobs_against_a_simulator(simulator_address, capsys):
    args = [*_example_args(), "--downscale", "8", "--address", simulator_address]
    assert main(["submit", *args, "--idempotency-key", "cli-1"]) == 0
    job_id = capsys.readouterr().out.split()[0]
    assert main(["submit", *args, "--idempotency-key", "cli-1"]) == 0
    assert capsys.readouterr().out.startswith(f"{job_id}  (existing job")
    assert main(["jobs", "--address", simulator_address]) == 0
    assert f"{job_id}  queued" in capsys.readouterr().out
    assert main(["jobs", job_id, "--cancel", "--address", simulator_address]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert main(["jobs", job_id, "--watch", "--json", "--address", simulator_address]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["state"] == "JOB_STATE_CANCELLED"
    assert main(["jobs", "sim-unknown", "--address", simulator_address]) == 2
    assert main(["jobs", "--state", "bogus", "--address", simulator_address]) == 2


def test_unreachable_simulator_is_one_clear_line(capsys):
    with grpc.insecure_channel("127.0.0.1:1"):
        pass
    assert main(["jobs", "--address", "127.0.0.1:1"]) == 1
    assert "unavailable" in capsys.readouterr().err


@pytest.mark.parametrize("args, field", [
    (["simulate", *_example_args(), "--out", "OUT", "--downscale", "100000"], "--downscale"),
    (["simulate", *_example_args(), "--out", "OUT", "--fps", "nan"], "--fps"),
    (["simulate", *_example_args(), "--out", "OUT", "--viewer-points", "0"], "--viewer-points"),
    (["jobs", "--limit", "0", "--address", "127.0.0.1:1"], "--limit"),
    (["view", str(EXAMPLE), "--serve", "--port", "70000"], "--port"),
])
def test_out_of_range_numbers_exit_2_with_one_line(args, field, tmp_path, capsys):
    args = [str(tmp_path / "o") if a == "OUT" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err


def test_simulate_with_depth_keeps_the_observed_scene(tmp_path, capsys):
    capsys.readouterr()
    from PIL import Image

    depth = np.full((480, 720), 2.0, np.float32)
    depth[:, :8] = 0.0  # unknown: the stand-in plane fills it
    np.save(tmp_path / "depth.npy", depth)
    Image.fromarray((depth * 1000).astype(np.uint16)).save(tmp_path / "depth.png")
    for name in ("depth.npy", "depth.png"):
        out = tmp_path / f"out-{name}"
        assert main(["simulate", *_example_args(), "--depth", str(tmp_path / name),
                     "--out", str(out), *QUICK]) == 0
        world, robot = load_npz(out / "pointmap.npz"), load_npz(out / "robot.npz")
        scene = ~robot["mask"]
        scene[:, :, :1] = False  # the first downscaled column knew no depth
        np.testing.assert_allclose(world["pointmap"][..., 2][scene], 2.0, rtol=1e-6)
    small = np.ones((48, 72), np.float32)
    np.save(tmp_path / "small.npy", small)
    assert main(["simulate", *_example_args(), "--depth", str(tmp_path / "small.npy"),
                 "--out", str(tmp_path / "bad"), *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--depth" in err[-1] and "must match" in err[-1]


def test_simulate_refuses_a_misspelt_model_option(tmp_path, capsys):
    """A model whose k4d_model.json misspells an option value, or carries a key no model
    reads, is refused at load with one line naming it (exit 2), not run without it."""
    model = tmp_path / "model"
    assert main(["generate", "init-model", "--config", "tiny", "--out", str(model)]) == 0
    meta = json.loads((model / "k4d_model.json").read_text())
    for extra, field in (({"grasp": "rigdi"}, "extra.grasp"), ({"grasp_strength": 2}, "extra.grasp_strength")):
        (model / "k4d_model.json").write_text(json.dumps({**meta, "extra": extra}))
        capsys.readouterr()
        assert main(["simulate", *_example_args(), "--model", str(model),
                     "--out", str(tmp_path / "o"), *QUICK]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and field in err[0], err
