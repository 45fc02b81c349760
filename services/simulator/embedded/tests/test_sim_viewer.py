"""viewer.html's data: every pixel's point kept, quantised, frame-differenced, deflated, and
decoded back (as the page does) to the input points; the vendored three.js is the recorded
build and the page loads nothing from anywhere."""

import base64
import hashlib
import json
import re
import zlib

import numpy as np
from k4d_embedded.viewer import (
    ASSETS,
    ROBOT_POINT,
    decode_frames,
    encode_frames,
    grid_stride,
    write_viewer,
)

THREE_SHA256 = "aa7aa77714804ae43ddf597a2d432a62b7892aeac3a4a3c03261166992b8688d"


def _scene(T=3, H=40, W=60):
    v, u = np.mgrid[0:H, 0:W].astype(np.float32)
    depth = 2.0 + 0.3 * np.sin(u / 7.0)
    pointmap = np.stack([(u - W / 2) / 50 * depth, (v - H / 2) / 50 * depth, depth], -1)
    pointmap = np.repeat(pointmap[None], T, axis=0)
    pointmap[:, :5] = 0  # no points in the top rows
    pointmap[:, 6, 7] = np.nan  # nor where the pointmap is not finite
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (T, H, W, 3), dtype=np.uint8)
    focus = np.zeros((T, H, W), bool)
    for t in range(T):
        focus[t, 20:30, 20 + 5 * t:40 + 5 * t] = True  # the robot moves
        pointmap[t, 20:30, 20 + 5 * t:40 + 5 * t, 2] -= 0.5
    return rgb, pointmap, focus


def test_every_valid_pixel_decodes_back_to_its_point_colour_and_robot_flag():
    rgb, pointmap, focus = _scene()
    encoded = encode_frames(rgb, pointmap, focus=focus)
    assert encoded.stride == 1 and (encoded.height, encoded.width) == (40, 60)
    valid = np.isfinite(pointmap).all(-1) & (pointmap[..., 2] > 0)
    assert encoded.points == [int(v.sum()) for v in valid] == [35 * 60 - 1] * 3
    for t, (xyz, colours, robot) in enumerate(decode_frames(encoded)):
        np.testing.assert_allclose(xyz, pointmap[t][valid[t]], atol=float(encoded.scale.max()))
        np.testing.assert_array_equal(colours, rgb[t][valid[t]])
        np.testing.assert_array_equal(robot, focus[t][valid[t]])


def test_still_pixels_cost_almost_nothing_after_the_first_frame():
    rgb, pointmap, _ = _scene(T=6)
    rgb[:] = rgb[0]
    still = encode_frames(rgb, np.repeat(pointmap[:1], 6, axis=0))
    one = encode_frames(rgb[:1], pointmap[:1])
    assert len(still.data) < 1.1 * len(one.data)


def test_max_points_subsamples_on_a_pixel_grid():
    rgb, pointmap, focus = _scene()
    assert grid_stride(40, 60, None) == 1 and grid_stride(40, 60, 600) == 2
    encoded = encode_frames(rgb, pointmap, focus=focus, max_points=600)
    assert (encoded.stride, encoded.height, encoded.width) == (2, 20, 30)
    xyz, colours, _ = decode_frames(encoded)[0]
    assert len(xyz) == 17 * 30  # even rows 6..38 x even columns
    np.testing.assert_array_equal(colours[0], rgb[0, 6, 0])


def test_page_embeds_the_recorded_three_js_and_loads_nothing(tmp_path):
    three = (ASSETS / "three.min.js").read_bytes()
    assert hashlib.sha256(three).hexdigest() == THREE_SHA256
    assert (ASSETS / "THREE_VERSION").read_text().strip() == "0.187.0"
    rgb, pointmap, focus = _scene()
    page = write_viewer(tmp_path / "viewer.html", rgb, pointmap, focus=focus,
                        title="a <b> title __DATA__", static_world=True).read_text()
    assert three.decode() in page and "MIT License" in page
    assert "a &lt;b&gt; title __DATA__" in page and "static-world backend" in page
    # nothing is fetched: no src/href attributes, and the only URLs are the licence's
    # homepage and the XHTML namespace inside three.js
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)\s*=", page)
    urls = set(re.findall(r"https?://[^\s\"')]+", page))
    assert urls <= {"https://threejs.org", "http://www.w3.org/1999/xhtml"}, urls
    meta = json.loads(re.search(r"const M = (\{.*?\});\n", page).group(1))
    blob = re.search(r'<script type="application/octet-stream" id="k4d-points">([^<]*)</script>',
                     page).group(1)
    raw = zlib.decompress(base64.b64decode(blob))
    assert len(raw) == 3 * 10 * meta["height"] * meta["width"]
    assert meta["points"] == encode_frames(rgb, pointmap, focus=focus).points


def test_robot_flag_is_two():
    rgb, pointmap, focus = _scene(T=1)
    encoded = encode_frames(rgb, pointmap, focus=focus)
    flags = np.frombuffer(zlib.decompress(encoded.data), np.uint8)[:40 * 60].reshape(40, 60)
    assert (flags[focus[0]] == ROBOT_POINT).all() and flags[0, 0] == 0
