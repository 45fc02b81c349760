"""Projection speed: 49 frames of a Panda at 480x720, our ray caster (end to end: FK +
depth/pointmap/mask/link-id/normals/RGB) vs MuJoCo's own OSMesa depth rendering of the
same frames, measured in the same run, plus the accuracy of ours against MuJoCo.

    .venv/bin/python benchmarks/projection/bench_projection.py [--repeats 5]

Needs `mujoco` (k4d-projection[bench]) and Debian `libosmesa6`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
from k4d_kinematics.fk import forward_kinematics  # noqa: E402
from k4d_kinematics.robots import load_robot  # noqa: E402
from k4d_projection.camera import Camera  # noqa: E402
from k4d_projection.mujoco_reference import MujocoReference  # noqa: E402
from k4d_projection.renderer import (  # noqa: E402
    DEFAULT_OUTPUTS,
    RenderWorkspace,
    RobotRenderer,
)

VIEWS = {  # name: (eye, target, fovy): a DROID-like third-person view and a wide one
    "near": ((1.0, 0.55, 0.75), (0.25, 0.0, 0.35), 60.0),
    "wide": ((1.6, 0.9, 1.0), (0.2, 0.0, 0.4), 50.0),
}


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def trajectory(model, frames: int, seed: int) -> np.ndarray:
    """A smooth random joint trajectory within limits, (frames, J)."""
    rng = np.random.default_rng(seed)
    mid, half = (model.lower + model.upper) / 2, (model.upper - model.lower) / 2
    a, b = mid + 0.5 * half * rng.uniform(-1, 1, (2, len(mid)))
    s = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, frames))[:, None]
    return a + (b - a) * s


def timed(fn, repeats: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=49)
    parser.add_argument("--width", type=int, default=720)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    T = args.frames
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; {T} frames {args.width}x{args.height}")

    start = time.perf_counter()
    model = load_robot("panda")
    renderer = RobotRenderer.from_robot(model)
    print(f"robot build (meshes + {len(renderer.link_meshes)} BVHs, {renderer.num_triangles} "
          f"triangles, once per robot): {time.perf_counter() - start:.2f} s")
    joints = trajectory(model, T, seed=0)

    for view, (eye, target, fovy) in VIEWS.items():
        camera = Camera.look_at(eye, target, width=args.width, height=args.height,
                                fovy_deg=fovy)
        measure_view(view, model, renderer, joints, camera, args.repeats)


def measure_view(view, model, renderer, joints, camera, repeats: int) -> None:
    T = joints.shape[0]
    workspace = RenderWorkspace()  # what a long-lived service thread keeps

    def ours_cold():  # fresh output memory every call (one-shot CLI)
        return renderer.render(forward_kinematics(model, joints), camera, DEFAULT_OUTPUTS)

    def ours_full():
        return renderer.render(forward_kinematics(model, joints), camera, DEFAULT_OUTPUTS,
                               workspace=workspace)

    def ours_depth():
        return renderer.render(forward_kinematics(model, joints), camera,
                               ("depth", "mask", "link_id"), workspace=workspace)

    poses = forward_kinematics(model, joints)
    reference = MujocoReference(renderer.link_meshes, camera)
    try:
        reference.render_depth(poses[:2])  # warm up GL
        cold_med, cold_min, _ = timed(ours_cold, repeats)
        full_med, full_min, result = timed(ours_full, repeats)
        depth_med, depth_min, _ = timed(ours_depth, repeats)
        mj_med, mj_min, mj_depth = timed(lambda: reference.render_depth(poses), repeats)
    finally:
        reference.close()

    ious, errors = [], []
    for t in range(T):
        a, b = result.mask[t], mj_depth[t] > 0
        ious.append((a & b).sum() / max((a | b).sum(), 1))
        both = a & b
        errors.append(np.median(np.abs(result.depth[t][both] - mj_depth[t][both])))
    ms = 1000.0 / T
    print(f"\nview {view!r}: robot covers {result.mask.mean():.1%} of pixels")
    print(f"  ours, all outputs (depth, pointmap, mask, link_id, normals, rgb), reused "
          f"workspace: {full_med:.3f} s for {T} frames = {full_med * ms:.1f} ms/frame "
          f"(best {full_min * ms:.1f})")
    print(f"  ours, all outputs, fresh memory per call: {cold_med:.3f} s = "
          f"{cold_med * ms:.1f} ms/frame (best {cold_min * ms:.1f})")
    print(f"  ours, depth + mask + link_id only: {depth_med:.3f} s = {depth_med * ms:.1f} "
          f"ms/frame (best {depth_min * ms:.1f})")
    print(f"  MuJoCo OSMesa depth render:        {mj_med:.3f} s = {mj_med * ms:.1f} ms/frame "
          f"(best {mj_min * ms:.1f})")
    print(f"  ratio ours(all outputs) / MuJoCo(depth): {full_med / mj_med:.2f}x; "
          f"ours(depth) / MuJoCo(depth): {depth_med / mj_med:.2f}x")
    print(f"  accuracy vs MuJoCo: mask IoU min {min(ious):.4f} mean {np.mean(ious):.4f}; "
          f"median |depth error| max over frames {max(errors) * 1e6:.1f} um")

if __name__ == "__main__":
    main()
