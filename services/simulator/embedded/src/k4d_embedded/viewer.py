"""A self-contained HTML 4D viewer: the rollout's coloured point cloud over time, in WebGL.

Zero install and offline: the page carries three.js (vendored in `assets/`, built from the
npm registry; docs/viewing.md) and its data inline, so it opens straight from disk in any
browser with WebGL. Every pixel's point is kept (full resolution; `max_points` subsamples on
a regular pixel grid when asked). Data: positions quantised to uint16 on one grid for all
frames, colours uint8, a flag per pixel (no point / point / robot); each frame is stored as
its difference from the previous one (zeros where the scene stands still) and the whole
stream is deflated, then base64-encoded. The browser inflates it (DecompressionStream).
Controls: drag to orbit, right-drag (or shift-drag) to pan, wheel to zoom, the slider or
space to play; the robot's points can be highlighted.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ASSETS = Path(__file__).resolve().parent / "assets"
STATIC_WORLD_NOTICE = ("static-world backend: the robot is composited onto the UNCHANGED initial "
                       "scene; the world does not react. This is not generated dynamics.")
NO_POINT, POINT, ROBOT_POINT = 0, 1, 2


@dataclass
class EncodedFrames:
    """The viewer's point stream: `data` (zlib) holds, per frame, flags (n uint8), colours
    (n x 3 uint8) and quantised positions (n x 3 uint16 little endian), each as the
    wrapping difference from the previous frame's. A position is lo + q * scale (camera
    frame, metres). n = height x width of the (sub)sampled pixel grid."""

    data: bytes
    frames: int
    height: int
    width: int
    stride: int
    lo: np.ndarray
    scale: np.ndarray
    points: list[int]


def grid_stride(height: int, width: int, max_points: int | None) -> int:
    """Pixel stride of the sampling grid: 1 (every pixel) unless max_points caps it."""
    if max_points is None or height * width <= max_points:
        return 1
    return max(1, math.ceil(math.sqrt(height * width / max_points)))


def encode_frames(rgb: np.ndarray, pointmap: np.ndarray, mask: np.ndarray | None = None,
                  focus: np.ndarray | None = None, max_points: int | None = None,
                  level: int = 1) -> EncodedFrames:
    """rgb (T, H, W, 3) uint8; pointmap (T, H, W, 3) float32 camera frame (zeros = no
    point); mask (T, H, W) bool valid points (default: finite, z > 0); focus (T, H, W)
    bool: the robot's pixels."""
    stride = grid_stride(pointmap.shape[1], pointmap.shape[2], max_points)
    pick = (slice(None), slice(None, None, stride), slice(None, None, stride))
    points, colours = pointmap[pick], rgb[pick]
    # per channel: numpy reduces over a short last axis slowly
    valid = (points[..., 2] > 0) & np.isfinite(points[..., 2])
    valid &= np.isfinite(points[..., 0]) & np.isfinite(points[..., 1])
    if mask is not None:
        valid &= mask[pick]
    T, h, w = valid.shape
    lo, hi = _bounds(points, valid)
    scale = np.maximum(hi - lo, 1e-6) / 65535.0
    flags = valid.astype(np.uint8)
    if focus is not None:
        flags += valid & focus[pick]
    n = h * w
    previous = np.zeros(4 * n, np.uint8), np.zeros(3 * n, "<u2")
    compressor, chunks, counts = zlib.compressobj(level), [], []
    inv_scale = (1.0 / scale).astype(np.float32)
    offset = (lo * inv_scale).astype(np.float32)
    for t in range(T):
        q = np.multiply(points[t], inv_scale, dtype=np.float32)
        q -= offset
        q[~valid[t]] = 0
        np.clip(np.rint(q, out=q), 0, 65535, out=q)
        small = np.concatenate([flags[t].reshape(-1),
                                np.where(valid[t][..., None], colours[t], 0).reshape(-1)])
        big = q.astype("<u2").reshape(-1)
        chunks.append(compressor.compress((small - previous[0]).tobytes()))
        chunks.append(compressor.compress((big - previous[1]).tobytes()))
        previous = small, big
        counts.append(int(valid[t].sum()))
    chunks.append(compressor.flush())
    return EncodedFrames(b"".join(chunks), T, h, w, stride, lo, scale, counts)


def _bounds(points: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for t in range(points.shape[0]):
        if valid[t].any():
            for c in range(3):  # 1-D reductions: fast
                values = points[t, ..., c][valid[t]]
                lo[c], hi[c] = min(lo[c], values.min()), max(hi[c], values.max())
    if not np.all(np.isfinite(lo)):
        return np.zeros(3), np.ones(3)
    return lo.astype(np.float64), hi.astype(np.float64)


def decode_frames(encoded: EncodedFrames) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """What the page does, in numpy (for tests): per frame (xyz (m, 3) float64, colours
    (m, 3) uint8, robot (m,) bool) of the pixels that have a point, in pixel order."""
    raw = np.frombuffer(zlib.decompress(encoded.data), np.uint8)
    n = encoded.height * encoded.width
    small, big = np.zeros(4 * n, np.uint8), np.zeros(3 * n, "<u2")
    out, offset = [], 0
    for _ in range(encoded.frames):
        small = small + raw[offset:offset + 4 * n]
        big = big + raw[offset + 4 * n:offset + 10 * n].view("<u2")
        offset += 10 * n
        flags = small[:n]
        keep = flags > 0
        xyz = big.reshape(n, 3)[keep] * encoded.scale + encoded.lo
        out.append((xyz, small[n:].reshape(n, 3)[keep], flags[keep] == ROBOT_POINT))
    return out


def write_viewer(path: str | Path, rgb: np.ndarray, pointmap: np.ndarray,
                 mask: np.ndarray | None = None, *, title: str = "Kinema4D rollout",
                 static_world: bool = False, info: dict | None = None,
                 fps: float = 12.0, max_points: int | None = None,
                 focal_px: float | None = None, focus: np.ndarray | None = None) -> Path:
    """Write the viewer HTML; returns its path. `info` lines show under the title; `focus`
    (T, H, W) bool pixels (the robot) can be highlighted; focal_px: the camera's fy (sets
    the opening view's field of view)."""
    path = Path(path)
    encoded = encode_frames(rgb, pointmap, mask, focus, max_points)
    H = pointmap.shape[1]
    meta = {"frames": encoded.frames, "height": encoded.height, "width": encoded.width,
            "stride": encoded.stride, "lo": encoded.lo.tolist(), "scale": encoded.scale.tolist(),
            "points": encoded.points, "fps": fps, "image_height": H,
            "focal": float(focal_px or pointmap.shape[2] * 0.75)}
    notice = (f'<div id="notice">{html.escape(STATIC_WORLD_NOTICE)}</div>' if static_world else "")
    info_html = "".join(f"<div>{html.escape(str(k))}: {html.escape(str(v))}</div>"
                        for k, v in (info or {}).items())
    values = {"TITLE": html.escape(title), "NOTICE": notice, "INFO": info_html,
              "THREE_VERSION": (ASSETS / "THREE_VERSION").read_text().strip(),
              "THREE_LICENSE": (ASSETS / "THREE_LICENSE").read_text().replace("*/", "* /"),
              "THREE": (ASSETS / "three.min.js").read_text(), "META": json.dumps(meta),
              "DATA": base64.b64encode(encoded.data).decode()}
    # one pass, so nothing inserted (a title, the library) is itself substituted
    page = re.sub(r"__([A-Z_]+)__", lambda m: values[m.group(1)], _TEMPLATE)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<meta name="generator" content="k4d simulate; three.js __THREE_VERSION__ inlined">
<style>
 body{margin:0;background:#111;color:#ddd;font:13px sans-serif;overflow:hidden}
 #hud{position:absolute;left:10px;top:8px;right:10px;pointer-events:none}
 #hud h1{font-size:15px;margin:0 0 4px 0;color:#fff}
 #notice{background:#b3261e;color:#fff;padding:6px 10px;margin:4px 0;font-weight:bold;
   display:inline-block;border-radius:3px}
 #status{color:#fc6}
 #bar{position:absolute;left:0;right:0;bottom:0;padding:8px 12px;background:rgba(0,0,0,.6);
   display:flex;gap:10px;align-items:center}
 #time{flex:1} canvas{display:block}
</style></head>
<body>
<div id="hud"><h1>__TITLE__</h1>__NOTICE__<div id="meta">__INFO__</div><div id="status">loading&hellip;</div></div>
<div id="bar"><button id="play">play</button><input id="time" type="range" min="0" value="0">
<span id="label"></span><label><input id="highlight" type="checkbox" checked> highlight robot</label>
<span>drag: orbit &middot; right-drag: pan &middot; wheel: zoom &middot; space: play</span></div>
<script>
/* three.js __THREE_VERSION__ licence:
__THREE_LICENSE__*/
__THREE__
</script>
<script type="application/octet-stream" id="k4d-points">__DATA__</script>
<script>
"use strict";
const M = __META__;
const N = M.height * M.width, T = M.frames, ROBOT = [255, 140, 0];
const status = document.getElementById("status"), slider = document.getElementById("time");
const label = document.getElementById("label"), highlight = document.getElementById("highlight");
window.k4dReady = false;

// 1. inflate the point stream and rebuild every frame (each frame is a difference).
async function decode() {
  const b64 = document.getElementById("k4d-points").textContent;
  const zipped = await (await fetch("data:application/octet-stream;base64," + b64)).blob();
  const raw = new Uint8Array(await new Response(
    zipped.stream().pipeThrough(new DecompressionStream("deflate"))).arrayBuffer());
  const small = new Uint8Array(4 * N), big = new Uint16Array(3 * N), frames = [];
  for (let t = 0, off = 0; t < T; t++, off += 10 * N) {
    const ds = raw.subarray(off, off + 4 * N);
    const db = new Uint16Array(raw.buffer, raw.byteOffset + off + 4 * N, 3 * N);
    for (let i = 0; i < 4 * N; i++) small[i] += ds[i];
    for (let i = 0; i < 3 * N; i++) big[i] += db[i];
    const m = M.points[t], pos = new Uint16Array(3 * m), col = new Uint8Array(3 * m), robot = [];
    for (let i = 0, k = 0; i < N; i++) {
      const f = small[i];
      if (!f) continue;
      pos[3*k] = big[3*i]; pos[3*k+1] = big[3*i+1]; pos[3*k+2] = big[3*i+2];
      col[3*k] = small[N+3*i]; col[3*k+1] = small[N+3*i+1]; col[3*k+2] = small[N+3*i+2];
      if (f === 2) robot.push(k);
      k++;
    }
    frames.push({pos, col, robot: Uint32Array.from(robot), original: null});
  }
  return frames;
}

// 2. colour the robot's points orange (keeping the originals to switch back).
function paint(frame, on) {
  if (on && !frame.original) {
    frame.original = new Uint8Array(3 * frame.robot.length);
    frame.robot.forEach((k, j) => { for (let c = 0; c < 3; c++) {
      frame.original[3*j+c] = frame.col[3*k+c];
      frame.col[3*k+c] = (frame.col[3*k+c] + 2 * ROBOT[c]) / 3; } });
  } else if (!on && frame.original) {
    frame.robot.forEach((k, j) => { for (let c = 0; c < 3; c++) frame.col[3*k+c] = frame.original[3*j+c]; });
    frame.original = null;
  }
}

function start(frames) {
  // 3. scene: the camera frame is OpenCV (x right, y down, z forward); a half turn about x
  // makes it three.js's (y up, looking down -z), so the opening view is the recording camera.
  const renderer = new THREE.WebGLRenderer({antialias: false, preserveDrawingBuffer: true});
  renderer.setPixelRatio(Math.min(2, devicePixelRatio || 1));
  // The colours are the image's sRGB values: draw them as they are (no linear-to-sRGB step).
  renderer.outputColorSpace = "srgb-linear";
  document.body.prepend(renderer.domElement);
  const scene = new THREE.Scene(), world = new THREE.Group();
  world.rotation.x = Math.PI;
  scene.add(world);
  const fov = 2 * Math.atan(M.image_height / 2 / M.focal) * 180 / Math.PI;
  const camera = new THREE.PerspectiveCamera(fov, innerWidth / innerHeight, 0.01, 1000);
  const geometry = new THREE.BufferGeometry();
  const cloud = new THREE.Points(geometry, new THREE.PointsMaterial({vertexColors: true,
                                                                     sizeAttenuation: true}));
  cloud.scale.set(M.scale[0], M.scale[1], M.scale[2]);
  cloud.position.set(M.lo[0], M.lo[1], M.lo[2]);
  cloud.frustumCulled = false;
  world.add(cloud);
  const attrs = frames.map(f => ({pos: new THREE.BufferAttribute(f.pos, 3),
                                  col: new THREE.BufferAttribute(f.col, 3, true)}));
  // orbit about the cloud's middle (median depth in front of the camera)
  const mid = frames[0].pos.length ? medianPoint(frames[0].pos) : [0, 0, 1];
  const target = new THREE.Vector3(mid[0], -mid[1], -mid[2]);
  const orbit = new THREE.Spherical().setFromVector3(target.clone().negate());
  // From the recording camera a point covers its pixel cell (stride pixels) at the target's
  // depth; three.js scales a point by 1 / depth and not by the field of view.
  cloud.material.size = 1.25 * M.stride * target.length() * 2 / M.image_height;
  let frame = 0, playing = false;
  function show(t) {
    frame = t; paint(frames[t], highlight.checked);
    attrs[t].col.needsUpdate = true;
    geometry.setAttribute("position", attrs[t].pos);
    geometry.setAttribute("color", attrs[t].col);
    slider.value = t;
    label.textContent = `frame ${t + 1}/${T} (${frames[t].pos.length / 3} points)`;
    draw();
  }
  function draw() {
    const offset = new THREE.Vector3().setFromSpherical(orbit);
    camera.position.copy(target).add(offset);
    camera.lookAt(target);
    renderer.render(scene, camera);
  }
  function resize() {
    renderer.setSize(innerWidth, innerHeight);
    camera.aspect = innerWidth / innerHeight; camera.updateProjectionMatrix(); draw();
  }
  // 4. controls: orbit, pan, zoom, play
  let drag = null;
  renderer.domElement.addEventListener("contextmenu", e => e.preventDefault());
  renderer.domElement.addEventListener("mousedown", e => { drag = {x: e.clientX, y: e.clientY,
    pan: e.button === 2 || e.shiftKey}; });
  addEventListener("mouseup", () => { drag = null; });
  addEventListener("mousemove", e => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    drag.x = e.clientX; drag.y = e.clientY;
    if (drag.pan) {
      const k = orbit.radius * 0.0015, right = new THREE.Vector3(), up = new THREE.Vector3();
      camera.matrix.extractBasis(right, up, new THREE.Vector3());
      target.addScaledVector(right, -dx * k).addScaledVector(up, dy * k);
    } else {
      orbit.theta -= dx * 0.005;
      orbit.phi = Math.max(0.05, Math.min(Math.PI - 0.05, orbit.phi - dy * 0.005));
    }
    draw();
  });
  renderer.domElement.addEventListener("wheel", e => { e.preventDefault();
    orbit.radius *= Math.exp(e.deltaY * 0.001); draw(); }, {passive: false});
  slider.max = Math.max(0, T - 1);
  slider.addEventListener("input", () => show(+slider.value));
  highlight.addEventListener("change", () => show(frame));
  function toggle() { playing = !playing;
    document.getElementById("play").textContent = playing ? "pause" : "play"; }
  document.getElementById("play").addEventListener("click", toggle);
  addEventListener("keydown", e => { if (e.code === "Space") { e.preventDefault(); toggle(); } });
  setInterval(() => { if (playing && T > 1) show((frame + 1) % T); }, 1000 / M.fps);
  // A URL hash such as #yaw=0.6&pitch=0.3&zoom=1.5&frame=10 opens a given view (for links),
  // relative to the recording camera's.
  const home = orbit.clone(), homeTarget = target.clone();
  function applyHash() {
    orbit.copy(home); target.copy(homeTarget);
    for (const [k, v] of new URLSearchParams(location.hash.slice(1))) {
      if (k === "yaw") orbit.theta += +v;
      if (k === "pitch") orbit.phi = Math.max(0.05, Math.min(Math.PI - 0.05, orbit.phi - +v));
      if (k === "zoom") orbit.radius *= +v;
      if (k === "frame") frame = Math.max(0, Math.min(T - 1, Math.round(+v)));
    }
    show(frame);
  }
  addEventListener("hashchange", applyHash);
  addEventListener("resize", resize);
  resize(); applyHash();
  status.textContent = "";
  window.k4dViewer = {show, frames, draw};
  window.k4dReady = true;
}

function medianPoint(pos) {
  const m = pos.length / 3, out = [];
  for (let c = 0; c < 3; c++) {
    const v = new Float64Array(m);
    for (let i = 0; i < m; i++) v[i] = pos[3*i+c] * M.scale[c] + M.lo[c];
    v.sort(); out.push(v[m >> 1]);
  }
  return out;
}

function webglAvailable() {
  try { const c = document.createElement("canvas");
        return !!(c.getContext("webgl2") || c.getContext("webgl")); } catch (e) { return false; }
}

if (!webglAvailable()) status.textContent = "this viewer needs WebGL, which this browser does not offer";
else if (typeof DecompressionStream === "undefined") status.textContent = "this viewer needs a browser with DecompressionStream (Chrome 80+, Firefox 113+, Safari 16.4+)";
else decode().then(start).catch(e => { status.textContent = "could not load the points: " + e; });
</script></body></html>
"""
