"""The viewer really draws: headless Chromium (WebGL on SwiftShader) opens viewer.html from
disk, inflates the points and renders them with three.js; pixel statistics show the cloud,
the highlighted robot, the static-world banner, orbiting and the frame slider at work.
Skipped when no Chromium is installed (`bash tools/install-system-deps.sh --browser`)."""

import time

import numpy as np
import pytest
from k4d.testing.browser import HeadlessBrowser, find_chromium
from k4d_embedded.viewer import write_viewer

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_chromium() is None, reason="no headless Chromium installed")]

T, H, W, F = 4, 120, 180, 140.0


def _page(tmp_path):
    """A green wall 2.5 m away; a white robot block 1 m nearer that moves right each frame."""
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    depth = np.full((T, H, W), 2.5, np.float32)
    robot = np.zeros((T, H, W), bool)
    for t in range(T):
        robot[t, 40:80, 30 + 30 * t:70 + 30 * t] = True
    depth[robot] = 1.5
    pointmap = np.stack([(u - W / 2) / F * depth, (v - H / 2) / F * depth, depth], -1)
    rgb = np.zeros((T, H, W, 3), np.uint8)
    rgb[..., 1] = 220
    rgb[robot] = 255
    return write_viewer(tmp_path / "viewer.html", rgb, pointmap, static_world=True,
                        focal_px=F, focus=robot)


def _shot(browser, hash_: str) -> np.ndarray:
    browser.evaluate(f"location.hash = {hash_!r}")
    time.sleep(0.3)
    return browser.screenshot().astype(np.int16)


def test_viewer_renders_points_robot_banner_orbit_and_frames(tmp_path):
    page = _page(tmp_path)
    with HeadlessBrowser(width=720, height=480) as browser:
        browser.open(page.resolve().as_uri())
        browser.wait_for("window.k4dReady === true", timeout_s=90)
        assert browser.evaluate("document.getElementById('status').textContent") == ""
        front = _shot(browser, "frame=0")
        r, g, b = front[..., 0], front[..., 1], front[..., 2]
        green = (g > 150) & (r < 80) & (b < 80)
        assert green.mean() > 0.3, f"the cloud was not drawn ({green.mean():.2f} green)"
        orange = (r > 200) & (g > 130) & (g < 220) & (b < 150)  # white robot tinted orange
        assert orange.sum() > 2000, "the robot is not highlighted"
        banner = (r > 150) & (g < 70) & (b < 70)
        assert banner[:120].sum() > 2000, "the red static-world banner is missing"
        # frame 3: the robot moved right
        last = _shot(browser, "frame=3")
        cols = np.nonzero(((last[..., 0] > 200) & (last[..., 2] < 150)).any(axis=0))[0]
        cols0 = np.nonzero(orange.any(axis=0))[0]
        assert cols.mean() > cols0.mean() + 50, "the frame slider did not move the robot"
        # orbiting changes the picture; the highlight switches off
        orbit = _shot(browser, "frame=0&yaw=0.9&pitch=0.4")
        assert np.abs(front - orbit).mean() > 5, "orbiting did not change the view"
        browser.evaluate("document.getElementById('highlight').click()")
        time.sleep(0.3)
        plain = _shot(browser, "frame=0")
        white = (plain[..., 0] > 230) & (plain[..., 1] > 230) & (plain[..., 2] > 230)
        assert white.sum() > 2000, "switching the highlight off did not restore the colours"
