"""Kinematics benchmark: FK and IK of ours next to pinocchio and ikpy, same run, same machine.

    .venv/bin/python benchmarks/kinematics/bench_kinematics.py [--poses 1000] [--trajectories 20]

FK: a 49-frame Panda trajectory, every link (ours: one vectorised call; pinocchio:
framesForwardKinematics per frame; ikpy: forward_kinematics(full_kinematics=True) per
frame, serial arm chain only). IK: random reachable Panda poses (FK of uniform in-limit
configurations), full 6-D pose, 0.1 mm / 1e-3 rad, seed = middle of the joint ranges;
trajectory mode: 49-frame smooth trajectories, warm start from the previous frame.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
import warnings

import numpy as np
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d_kinematics.chain import build_chain
from k4d_kinematics.ik import IKOptions, IkpyFrameSolver, solve_ik


def timed(fn, repeats: int) -> float:
    """Median seconds per call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_fk(model, q: np.ndarray, repeats: int) -> dict:
    import pinocchio as pin

    pmodel = pin.buildModelFromXML(model.urdf_xml)
    pdata = pmodel.createData()
    tree = model.tree
    q_pin = np.zeros((len(q), pmodel.nq))
    for jid in range(1, pmodel.njoints):
        link = model.tree.link_joint_names.index(pmodel.names[jid])
        q_pin[:, pmodel.joints[jid].idx_q] = (q[:, tree.q_index[link]] * tree.q_multiplier[link]
                                              + tree.q_offset[link])  # mimic joints too

    def pinocchio_all():
        for row in q_pin:
            pin.framesForwardKinematics(pmodel, pdata, row)

    chain = build_chain(model)
    ikpy = IkpyFrameSolver(model, chain, IKOptions()).ikpy_chain
    active = np.flatnonzero(ikpy.active_links_mask)
    full = np.zeros((len(q), len(ikpy.links)))
    full[:, active] = q[:, chain.variables]

    def ikpy_all():
        for row in full:
            ikpy.forward_kinematics(row, full_kinematics=True)

    # Agreement with pinocchio on every link, all frames.
    ours = forward_kinematics(model, q)
    worst = 0.0
    for t in range(len(q)):
        pin.framesForwardKinematics(pmodel, pdata, q_pin[t])
        for index, link in enumerate(model.link_names):
            fid = pmodel.getFrameId(link, pin.FrameType.BODY)
            worst = max(worst, float(np.abs(pdata.oMf[fid].homogeneous - ours[t, index]).max()))
    return {"ours": timed(lambda: forward_kinematics(model, q), repeats),
            "pinocchio": timed(pinocchio_all, max(3, repeats // 10)),
            "ikpy": timed(ikpy_all, 3), "max_abs_diff_vs_pinocchio": worst,
            "links": len(model.link_names), "ikpy_links": len(ikpy.links)}


def random_targets(model, count: int, seed: int):
    q = np.random.default_rng(seed).uniform(model.lower, model.upper, (count, model.num_joints))
    return forward_kinematics(model, q)[:, model.link_index(model.ee_link)]


def smooth_trajectories(model, count: int, frames: int, seed: int):
    rng = np.random.default_rng(seed)
    s = np.linspace(0, 1, frames)[:, None]
    for _ in range(count):
        a, b = rng.uniform(model.lower, model.upper, (2, model.num_joints))
        # Random pairs can be far apart; move a third of the way so a frame-to-frame step
        # resembles a real 49-frame clip.
        q = a + (b - a) / 3 * (3 * s**2 - 2 * s**3)
        yield forward_kinematics(model, q)[:, model.link_index(model.ee_link)]


def solve_stats(success: np.ndarray, solve_time_s: np.ndarray) -> dict:
    """Success rate and per-frame solve time figures (milliseconds)."""
    times = solve_time_s * 1e3
    return {"success": float(success.mean()), "median_ms": float(np.median(times)),
            "p95_ms": float(np.percentile(times, 95)), "mean_ms": float(np.mean(times))}


def bench_ik(model, poses: int, ikpy_poses: int, seed: int) -> dict:
    targets = random_targets(model, poses, seed)
    out = {}
    # "ours@1e-5": TRAC-IK's benchmark tolerance (1e-5 on position and rotation).
    tight = IKOptions(position_tolerance=1e-5, rotation_tolerance=1e-5)
    for solver, count, options in (("ours", poses, None), ("ours@1e-5", poses, tight),
                                   ("ikpy", ikpy_poses, None)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = solve_ik(model, targets[:count], mode="independent",
                              solver=solver.split("@")[0], options=options)
        stats = solve_stats(result.success, result.solve_time_s)
        stats["within_limits"] = bool(np.all((result.joints >= model.lower) &
                                             (result.joints <= model.upper)))
        stats["poses"] = count
        out[solver] = stats
    # Whole-call latency of one-pose solve_ik calls (chain lookup, result assembly included).
    walls = []
    for target in targets[:200]:
        start = time.perf_counter()
        solve_ik(model, target[None], mode="independent")
        walls.append(time.perf_counter() - start)
    out["ours_call_median_ms"] = float(np.median(walls) * 1e3)
    return out


def bench_trajectory(model, trajectories: int, seed: int) -> dict:
    out = {}
    for solver in ("ours", "ikpy"):
        times, success = [], []
        for targets in smooth_trajectories(model, trajectories, 49, seed):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = solve_ik(model, targets, mode="trajectory", solver=solver)
            times.append(result.solve_time_s[1:])  # frame 0 is a cold solve
            success.append(result.success)
        success = np.concatenate(success)
        out[solver] = {**solve_stats(success, np.concatenate(times)), "frames": int(success.size)}
    return out


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                     if line.startswith("Model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poses", type=int, default=1000)
    parser.add_argument("--ikpy-poses", type=int, default=None, help="default: --poses")
    parser.add_argument("--trajectories", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    model = load_robot("panda")
    print(f"machine: {machine()}")
    q = np.random.default_rng(args.seed).uniform(model.lower, model.upper, (49, model.num_joints))
    fk = bench_fk(model, q, repeats=200)
    print(f"\nFK, Panda, 49 frames, every link (ours/pinocchio {fk['links']} links, "
          f"ikpy {fk['ikpy_links']} chain links)")
    print(f"  {'':12}{'per trajectory':>16}{'per frame':>12}{'vs ours':>10}")
    for name in ("ours", "pinocchio", "ikpy"):
        seconds = fk[name]
        print(f"  {name:12}{seconds * 1e3:13.3f} ms{seconds / 49 * 1e6:9.2f} us"
              f"{seconds / fk['ours']:9.1f}x")
    print(f"  max |ours - pinocchio| over all links and frames: {fk['max_abs_diff_vs_pinocchio']:.1e}")

    ik = bench_ik(model, args.poses, args.ikpy_poses or args.poses, args.seed)
    print("\nIK, Panda, random reachable poses, full 6-D, 0.1 mm / 1e-3 rad, seed = mid-range")
    print(f"  {'':10}{'poses':>7}{'success':>10}{'median':>11}{'p95':>11}{'mean':>11}{'in limits':>11}")
    for name in ("ours", "ours@1e-5", "ikpy"):
        s = ik[name]
        print(f"  {name:10}{s['poses']:7d}{s['success'] * 100:9.2f}%{s['median_ms']:8.3f} ms"
              f"{s['p95_ms']:8.2f} ms{s['mean_ms']:8.2f} ms{str(s['within_limits']):>11}")
    print(f"  ours, whole solve_ik call for one pose (200 calls): median "
          f"{ik['ours_call_median_ms']:.3f} ms")
    print(f"  median speed-up ours vs ikpy: {ik['ikpy']['median_ms'] / ik['ours']['median_ms']:.0f}x;"
          f" anchor TRAC-IK 99.70% success, 0.38 ms mean (C++)")

    traj = bench_trajectory(model, args.trajectories, args.seed)
    print(f"\nIK trajectory mode, {args.trajectories} x 49 frames, warm start, per frame (frames 1-48)")
    for name in ("ours", "ikpy"):
        s = traj[name]
        print(f"  {name:10}{s['frames']:7d}{s['success'] * 100:9.2f}%{s['median_ms']:8.3f} ms"
              f"{s['p95_ms']:8.2f} ms")
    print(f"  median speed-up ours vs ikpy: {traj['ikpy']['median_ms'] / traj['ours']['median_ms']:.0f}x")


if __name__ == "__main__":
    main()
