"""The viewer really draws: headless Chromium renders viewer.html (its script runs and
paints points, orbiting changes the picture, the static-world banner shows).
Skipped when no Chromium is installed (`apt-get install chromium`)."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from k4d_embedded.viewer import write_viewer
from PIL import Image

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
    "google-chrome")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed")]


def _screenshot(page: Path, out: Path, fragment: str = "") -> np.ndarray:
    subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                    "--window-size=640,480", f"--screenshot={out}",
                    page.resolve().as_uri() + fragment],
                   capture_output=True, timeout=120, check=True)
    return np.asarray(Image.open(out).convert("RGB")).astype(np.int16)


def test_viewer_paints_points_orbits_and_shows_the_static_world_banner(tmp_path):
    T, H, W = 4, 60, 90
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    depth = 2.0 + 0.5 * np.sin(u / 9.0)
    pointmap = np.stack([(u - W / 2) / 70 * depth, (v - H / 2) / 70 * depth, depth], -1)
    pointmap = np.repeat(pointmap[None], T, axis=0).astype(np.float32)
    rgb = np.zeros((T, H, W, 3), np.uint8)
    rgb[..., 1] = 220  # green points on the dark background
    page = write_viewer(tmp_path / "viewer.html", rgb, pointmap, static_world=True,
                        focal_px=70.0)
    front = _screenshot(page, tmp_path / "front.png")
    orbit = _screenshot(page, tmp_path / "orbit.png", "#yaw=0.9&pitch=0.4")
    green = (front[..., 1] > 150) & (front[..., 0] < 80)
    assert green.mean() > 0.2, "the point cloud was not drawn"
    banner = (front[..., 0] > 150) & (front[..., 1] < 70) & (front[..., 2] < 70)
    assert banner[:120].sum() > 2000, "the red static-world banner is missing"
    assert np.abs(front - orbit).mean() > 5, "orbiting did not change the view"
