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
from k4d.camera import Camera  # noqa: E402
from k4d.robots.descriptions import load_robot  # noqa: E402
from k4d.robots.fk import forward_kinematics  # noqa: E402
from k4d_projection.renderer import (  # noqa: E402
    DEFAULT_OUTPUTS,
    RenderWorkspace,
    RobotRenderer,
)
from k4d_projection.testing.mujoco_reference import MujocoReference  # noqa: E402

VIEWS = {  # name: (eye, target, fovy): third-person views, the robot small to large
    "wide": ((1.6, 0.9, 1.0), (0.2, 0.0, 0.4), 50.0),
    "near": ((1.0, 0.55, 0.75), (0.25, 0.0, 0.35), 60.0),
    "close": ((0.75, 0.35, 0.6), (0.3, 0.0, 0.35), 70.0),
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


def timed(fn, repeats: int) -> tuple[float, float, float, object]:
    """-> (median wall s, best wall s, median CPU s of this process, last result). On a
    shared machine the CPU time is the steadier measure of the work done."""
    times, cpu, out = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), min(times), statistics.median(cpu), out


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
        cold_med, cold_min, cold_cpu, _ = timed(ours_cold, repeats)
        full_med, full_min, full_cpu, result = timed(ours_full, repeats)
        depth_med, depth_min, depth_cpu, _ = timed(ours_depth, repeats)
        mj_med, mj_min, mj_cpu, mj_depth = timed(lambda: reference.render_depth(poses), repeats)
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
    rows = [("ours, all outputs, reused workspace", full_med, full_min, full_cpu),
            ("ours, all outputs, fresh memory", cold_med, cold_min, cold_cpu),
            ("ours, depth + mask + link_id", depth_med, depth_min, depth_cpu),
            ("MuJoCo OSMesa depth render", mj_med, mj_min, mj_cpu)]
    print("  (all outputs = depth, pointmap, mask, link_id, normals, rgb)")
    for name, med, best, cpu in rows:
        print(f"  {name:<36} wall {med:6.3f} s = {med * ms:5.1f} ms/frame "
              f"(best {best * ms:5.1f}); CPU {cpu:6.3f} s = {cpu * ms:5.1f} ms/frame")
    print(f"  ratio ours / MuJoCo depth, wall: all outputs {full_med / mj_med:.2f}x, depth "
          f"{depth_med / mj_med:.2f}x; CPU: all outputs {full_cpu / mj_cpu:.2f}x, depth "
          f"{depth_cpu / mj_cpu:.2f}x")
    print(f"  accuracy vs MuJoCo: mask IoU min {min(ious):.4f} mean {np.mean(ious):.4f}; "
          f"median |depth error| max over frames {max(errors) * 1e6:.1f} um")

if __name__ == "__main__":
    main()
