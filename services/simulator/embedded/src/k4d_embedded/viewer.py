"""A self-contained HTML 4D viewer: the rollout's point cloud over time, orbitable.

No network and no libraries: the page carries its data as base64 (points quantised to
int16 on a shared grid, colours as uint8) and draws with canvas 2D (painter's algorithm,
far points first), so it opens offline in any browser, straight from disk.
Controls: drag to orbit, wheel to zoom, the slider or space to play over time.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import numpy as np

DEFAULT_MAX_POINTS = 6000
STATIC_WORLD_NOTICE = ("static-world backend: the robot is composited onto the UNCHANGED initial "
                       "scene; the world does not react. This is not generated dynamics.")


def sample_frames(rgb: np.ndarray, pointmap: np.ndarray, mask: np.ndarray | None = None,
                  max_points: int = DEFAULT_MAX_POINTS, focus: np.ndarray | None = None):
    """Subsample every frame on one regular pixel grid (one grid for all frames: points
    stay put where the scene does), twice as dense inside `focus` (the robot).

    rgb: (T, H, W, 3) uint8; pointmap: (T, H, W, 3) float32 camera frame (zeros = no
    point); mask: optional (T, H, W) bool; focus: optional (T, H, W) bool. Returns
    ([(xyz (n, 3) float32, colour (n, 3) uint8) per frame], the coarse pixel stride).
    """
    T, H, W = pointmap.shape[:3]
    stride = max(1, math.ceil(math.sqrt(H * W / max_points)))
    fine = max(1, stride // 2)
    coarse_grid = np.zeros((H, W), bool)
    coarse_grid[::stride, ::stride] = True
    fine_grid = np.zeros((H, W), bool)
    fine_grid[::fine, ::fine] = True
    frames = []
    for t in range(T):
        pick = coarse_grid if focus is None else coarse_grid | (fine_grid & focus[t])
        xyz = pointmap[t][pick].astype(np.float32)
        colour = rgb[t][pick]
        valid = np.all(np.isfinite(xyz), axis=1) & (xyz[:, 2] > 0)
        if mask is not None:
            valid &= mask[t][pick]
        frames.append((xyz[valid], colour[valid]))
    return frames, stride


def _encode(frames) -> dict:
    """Pack frames into base64 blobs: int16 positions on a grid shared by all frames."""
    all_xyz = np.concatenate([xyz for xyz, _ in frames]) if frames else np.zeros((0, 3))
    if len(all_xyz) == 0:
        all_xyz = np.zeros((1, 3), np.float32)
    lo, hi = all_xyz.min(axis=0), all_xyz.max(axis=0)
    centre = (lo + hi) / 2
    scale = float(max((hi - lo).max() / 2, 1e-6)) / 32000.0
    q = [np.round((xyz - centre) / scale).astype("<i2") for xyz, _ in frames]
    return {
        "counts": [int(len(x)) for x, _ in frames],
        "centre": [float(c) for c in centre],
        "scale": scale,
        "positions": base64.b64encode(b"".join(a.tobytes() for a in q)).decode(),
        "colours": base64.b64encode(b"".join(np.ascontiguousarray(c, np.uint8).tobytes()
                                             for _, c in frames)).decode(),
        # Orbit about the cloud's middle, starting from the original camera.
        "target": [float(v) for v in np.median(all_xyz, axis=0)],
    }


def write_viewer(path: str | Path, rgb: np.ndarray, pointmap: np.ndarray,
                 mask: np.ndarray | None = None, *, title: str = "Kinema4D rollout",
                 static_world: bool = False, info: dict | None = None,
                 fps: float = 12.0, max_points: int = DEFAULT_MAX_POINTS,
                 focal_px: float | None = None, focus: np.ndarray | None = None) -> Path:
    """Write the viewer HTML; returns its path. `info` lines show under the title;
    `focus` (T, H, W) bool pixels (the robot) get a denser sampling."""
    path = Path(path)
    frames, stride = sample_frames(rgb, pointmap, mask, max_points, focus)
    data = _encode(frames)
    data.update({"stride": stride, "fps": fps, "width": int(pointmap.shape[2]), "height": int(pointmap.shape[1]),
                 "focal": float(focal_px or pointmap.shape[2] * 0.75)})
    notice = (f'<div id="notice">{html.escape(STATIC_WORLD_NOTICE)}</div>' if static_world else "")
    info_html = "".join(f"<div>{html.escape(str(k))}: {html.escape(str(v))}</div>"
                        for k, v in (info or {}).items())
    page = (_TEMPLATE.replace("__TITLE__", html.escape(title))
            .replace("__NOTICE__", notice).replace("__INFO__", info_html)
            .replace("__DATA__", json.dumps(data)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
 body{margin:0;background:#111;color:#ddd;font:13px sans-serif;overflow:hidden}
 #hud{position:absolute;left:10px;top:8px;right:10px;pointer-events:none}
 #hud h1{font-size:15px;margin:0 0 4px 0;color:#fff}
 #notice{background:#b3261e;color:#fff;padding:6px 10px;margin:4px 0;font-weight:bold;
   display:inline-block;border-radius:3px}
 #bar{position:absolute;left:0;right:0;bottom:0;padding:8px 12px;background:rgba(0,0,0,.6);
   display:flex;gap:10px;align-items:center}
 #time{flex:1} canvas{display:block}
</style></head>
<body>
<canvas id="view"></canvas>
<div id="hud"><h1>__TITLE__</h1>__NOTICE__<div id="meta">__INFO__</div></div>
<div id="bar"><button id="play">play</button><input id="time" type="range" min="0" value="0">
<span id="label"></span><span>drag: orbit &middot; wheel: zoom &middot; space: play</span></div>
<script>
"use strict";
const D = __DATA__;
function b64(s){const b=atob(s),a=new Uint8Array(b.length);for(let i=0;i<b.length;i++)a[i]=b.charCodeAt(i);return a;}
const pos = new Int16Array(b64(D.positions).buffer), col = b64(D.colours);
const starts=[0]; for(const c of D.counts) starts.push(starts[starts.length-1]+c);
const T = D.counts.length, canvas=document.getElementById("view"), ctx=canvas.getContext("2d");
const slider=document.getElementById("time"), label=document.getElementById("label");
slider.max = Math.max(0, T-1);
// View state: orbit (yaw, pitch) about D.target, starting at the recording camera.
const tgt = D.target; let yaw=0, pitch=0, dist=Math.hypot(tgt[0],tgt[1],tgt[2])||1, frame=0, playing=false;
function resize(){canvas.width=innerWidth; canvas.height=innerHeight; draw();}
function draw(){
  const w=canvas.width, h=canvas.height, f=D.focal*Math.min(w/D.width,h/D.height);
  ctx.fillStyle="#111"; ctx.fillRect(0,0,w,h);
  const cy=Math.cos(yaw), sy=Math.sin(yaw), cp=Math.cos(pitch), sp=Math.sin(pitch);
  const s0=starts[frame], n=D.counts[frame]||0, px=new Float32Array(n), py=new Float32Array(n), pz=new Float32Array(n);
  const order=new Uint32Array(n), z0=new Float32Array(n);
  for(let i=0;i<n;i++){
    const k=3*(s0+i);
    let x=pos[k]*D.scale+D.centre[0]-tgt[0], y=pos[k+1]*D.scale+D.centre[1]-tgt[1], z=pos[k+2]*D.scale+D.centre[2]-tgt[2];
    const x1=cy*x+sy*z, z1=-sy*x+cy*z;           // yaw about the camera's y (down) axis
    const y2=cp*y-sp*z1, z2=sp*y+cp*z1+dist;      // pitch about x, then back off by dist
    px[i]=x1; py[i]=y2; pz[i]=z2; z0[i]=z+tgt[2]; order[i]=i;
  }
  order.sort((a,b)=>pz[b]-pz[a]);                 // painter's algorithm: far first
  // A point covers its grid cell: stride pixels at its recorded depth, rescaled to now.
  const cell=1.15*f*D.stride/D.focal;
  for(const i of order){
    if(pz[i]<=0.01) continue;
    const u=f*px[i]/pz[i]+w/2, v=f*py[i]/pz[i]+h/2, k=3*(s0+i);
    ctx.fillStyle=`rgb(${col[k]},${col[k+1]},${col[k+2]})`;
    const size=Math.max(1, Math.min(40, cell*z0[i]/pz[i]));
    ctx.fillRect(u-size/2, v-size/2, size, size);
  }
  label.textContent=`frame ${frame+1}/${T} (${n} points)`;
}
let drag=null;
canvas.addEventListener("mousedown",e=>{drag=[e.clientX,e.clientY];});
addEventListener("mouseup",()=>{drag=null;});
addEventListener("mousemove",e=>{if(!drag)return; yaw+=(e.clientX-drag[0])*0.005;
  pitch=Math.max(-1.5,Math.min(1.5,pitch-(e.clientY-drag[1])*0.005)); drag=[e.clientX,e.clientY]; draw();});
canvas.addEventListener("wheel",e=>{e.preventDefault(); dist*=Math.exp(e.deltaY*0.001); draw();},{passive:false});
slider.addEventListener("input",()=>{frame=+slider.value; draw();});
function toggle(){playing=!playing; document.getElementById("play").textContent=playing?"pause":"play";}
document.getElementById("play").addEventListener("click",toggle);
addEventListener("keydown",e=>{if(e.code==="Space"){e.preventDefault();toggle();}});
setInterval(()=>{if(playing&&T>1){frame=(frame+1)%T; slider.value=frame; draw();}}, 1000/D.fps);
// A URL hash such as #yaw=0.6&pitch=0.3&frame=10 opens a given view (handy for links).
for(const [k,v] of new URLSearchParams(location.hash.slice(1))){
  if(k==="yaw")yaw=+v; if(k==="pitch")pitch=+v; if(k==="zoom")dist*=+v;
  if(k==="frame"){frame=Math.max(0,Math.min(T-1,+v)); slider.value=frame;}}
addEventListener("resize",resize); resize();
</script></body></html>
"""
