"""`k4d view PATH` with Rerun: what PATH stands for, the display decision, an episode of the
shared format recorded on the fly, and the served web viewer really rendering a recording
offline in headless Chromium (WebGL on SwiftShader), checked by pixel statistics."""

import threading
import time
import urllib.request

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.cli.main import main
from k4d.recording import read_recording_index, write_episode_recording
from k4d.testing.browser import BrowserError, HeadlessBrowser, find_chromium
from k4d_embedded.view import find_recordings, has_display, is_episode_dir, record_episode, view

pytest.importorskip("rerun", reason="rerun-sdk (k4d-runtime[viz]) not installed")

T, H, W = 3, 48, 64
CAMERA = Camera(width=W, height=H, fx=60.0, fy=60.0, cx=(W - 1) / 2, cy=(H - 1) / 2)


def _green_wall() -> dict[str, np.ndarray]:
    """A green wall 2 m in front of the camera, filling the image."""
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    pointmap = np.stack([(u - CAMERA.cx) / 60 * 2, (v - CAMERA.cy) / 60 * 2,
                         np.full_like(u, 2.0)], -1)
    rgb = np.zeros((T, H, W, 3), np.uint8)
    rgb[..., 1] = 230
    return {"rgb": rgb, "pointmap": np.repeat(pointmap[None], T, axis=0)}


def test_path_stands_for_its_recordings(tmp_path):
    rollout = tmp_path / "rollout"
    rollout.mkdir()
    (rollout / "rollout.rrd").write_bytes(b"")
    (rollout / "other.rrd").write_bytes(b"")
    assert find_recordings(rollout) == [(rollout / "rollout.rrd").resolve()]
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    for name in ("b.rrd", "a.rrd"):
        (evaluation / name).write_bytes(b"")
    assert [p.name for p in find_recordings(evaluation)] == ["a.rrd", "b.rrd"]
    assert find_recordings(evaluation / "b.rrd") == [(evaluation / "b.rrd").resolve()]
    nested = tmp_path / "runs"
    for name in ("r2", "r1"):
        (nested / name).mkdir(parents=True)
        (nested / name / "rollout.rrd").write_bytes(b"")
    assert [p.parent.name for p in find_recordings(nested)] == ["r1", "r2"]


@pytest.mark.parametrize("name, message", [
    ("missing", "no such file"), ("", "no Rerun recording"), ("notes.txt", "not a .rrd")])
def test_bad_paths_exit_2_with_one_line(tmp_path, capsys, name, message):
    (tmp_path / "notes.txt").write_text("not a recording")
    assert main(["view", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("k4d view: error:") and message in err[0], err


def test_native_viewer_only_where_a_display_exists():
    assert has_display({"DISPLAY": ":0"}, "linux")
    assert has_display({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not has_display({}, "linux")
    assert has_display({}, "darwin") and has_display({}, "win32")


def test_an_episode_is_recorded_on_the_fly(tmp_path):
    episodes = pytest.importorskip("k4d.episodes")
    pytest.importorskip("zarr")
    wall = _green_wall()
    meta = episodes.EpisodeMeta(
        episode_id="ep-0", frames=T, height=H, width=W, fps=10.0, task="look at the wall",
        task_kind="push", success=True, success_judge="test", robot="panda",
        joint_names=["j1", "j2"], actions={"type": "joint_position", "steps": [[0, 0], [1, 1]]},
        camera=CAMERA, source={"kind": "synthetic"})
    arrays = {"rgb": wall["rgb"], "pointmap": wall["pointmap"],
              "robot_mask": np.zeros((T, H, W), bool),
              "robot_rgb": np.zeros((T, H, W, 3), np.uint8),
              "robot_pointmap": np.zeros((T, H, W, 3), np.float32),
              "joints": np.zeros((T, 2))}
    writer = episodes.DatasetWriter(tmp_path / "ds")
    writer.write_episode(meta, arrays)
    writer.close()
    episode_dir = tmp_path / "ds" / "episodes" / "ep-0"
    assert is_episode_dir(episode_dir) and not is_episode_dir(tmp_path / "ds")
    index = read_recording_index(record_episode(episode_dir, tmp_path))
    for entity in ("/world/camera/image", "/world/camera/points", "/plots/joints",
                   "/plots/actions"):
        assert index.frames[entity] == list(range(T)), entity


class _Lines:
    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines.append(text)

    def flush(self):
        pass

    def url(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.lines:
                if "http://127.0.0.1:" in line:
                    return line.split(": ", 1)[1].strip()
            time.sleep(0.05)
        raise AssertionError(f"no URL printed: {self.lines}")


@pytest.mark.integration
@pytest.mark.skipif(find_chromium() is None, reason="no headless Chromium installed")
def test_served_web_viewer_renders_the_recording_offline(tmp_path):
    path = write_episode_recording(tmp_path / "rollout.rrd", **_green_wall(), camera=CAMERA,
                                   title="green wall")
    stop, out = threading.Event(), _Lines()
    server = threading.Thread(target=view, args=(tmp_path,),
                              kwargs={"web": True, "stop": stop, "out": out})
    server.start()
    try:
        url = out.url()
        assert url.startswith("http://127.0.0.1:") and "proxy" in url
        # the web viewer's page and wasm come from the local server (no network here)
        assert b"<html" in urllib.request.urlopen(url, timeout=10).read().lower()
        with HeadlessBrowser(width=1024, height=640) as browser:
            browser.open(url)
            green = 0.0
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and green < 0.05:
                time.sleep(3)
                try:
                    pixels = browser.screenshot().astype(np.int16)
                except BrowserError:
                    continue  # busy compiling the viewer's wasm; try again
                green = float(((pixels[..., 1] > 150) & (pixels[..., 0] < 90)
                               & (pixels[..., 2] < 90)).mean())
        # the 3D view (the points) and the camera view (the image) are green
        assert green > 0.05, f"no recording drawn: {green:.3f} of the pixels are green"
        assert path.is_file()
    finally:
        stop.set()
        server.join(30)
    assert not server.is_alive()
    with pytest.raises(OSError):  # the web viewer server stopped with `k4d view`
        urllib.request.urlopen(url, timeout=5)
