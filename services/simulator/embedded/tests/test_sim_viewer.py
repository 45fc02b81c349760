"""The HTML viewer's data: subsampling, validity, robot focus, quantisation."""

import base64
import json
import re

import numpy as np
from k4d_embedded.viewer import sample_frames, write_viewer


def _scene(T=3, H=40, W=60):
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    pointmap = np.stack([(u - W / 2) / 50, (v - H / 2) / 50, np.full_like(u, 2.0)], -1)
    pointmap = np.repeat(pointmap[None], T, axis=0)
    pointmap[:, :5] = 0  # no points in the top rows
    rgb = np.full((T, H, W, 3), 90, np.uint8)
    focus = np.zeros((T, H, W), bool)
    focus[:, 20:30, 20:40] = True
    return rgb, pointmap, focus


def test_sampling_drops_invalid_points_and_densifies_the_focus():
    rgb, pointmap, focus = _scene()
    plain, stride = sample_frames(rgb, pointmap, max_points=600)
    dense, _ = sample_frames(rgb, pointmap, max_points=600, focus=focus)
    assert stride == 2
    assert all((xyz[:, 2] > 0).all() for xyz, _ in plain)
    assert len(dense[0][0]) > len(plain[0][0])
    assert len(plain[0][0]) == 17 * 30  # even rows 6..38 x even columns


def test_page_embeds_quantised_points_that_decode_back():
    rgb, pointmap, focus = _scene()
    html = write_viewer("/tmp/k4d-viewer-test.html", rgb, pointmap, focus=focus).read_text()
    data = json.loads(re.search(r"const D = (\{.*?\});\n", html).group(1))
    q = np.frombuffer(base64.b64decode(data["positions"]), "<i2").reshape(-1, 3)
    xyz = q * data["scale"] + np.array(data["centre"])
    frames, _ = sample_frames(rgb, pointmap, focus=focus)
    n0 = data["counts"][0]
    np.testing.assert_allclose(xyz[:n0], frames[0][0], atol=data["scale"])
    assert "STATIC-WORLD" not in html and "static-world backend" not in html
