"""Seconds per 49 x 480 x 720 episode for every CPU metric of `k4d eval` (PSNR, SSIM,
Chamfer L1/L2, F-score, temporal variants, depth AbsRel/delta1, in metres and in the
Kinema4D normalisation, over the whole/robot/environment/moving-object regions).

Anchor, measured in the same run: scikit-image's PSNR + SSIM on the same frames (what the
video half would cost with the reference implementation alone).

The episode: the shipped example scene (examples/panda_pick) as the first frame, a depth
field from its camera (table plane at z = 0, back walls), a square "robot" region sweeping
across, an object moving; the prediction is the ground truth with RGB noise, 1 cm depth
noise and the object displaced.

    .venv/bin/python benchmarks/evaluation/bench_eval.py [--repeats 2] [--geometry-pixels N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
T, H, W = 49, 480, 720


def make_episode(seed: int = 0):
    from k4d_eval.clip import Clip
    from PIL import Image

    rng = np.random.default_rng(seed)
    cam = json.loads((ROOT / "examples/panda_pick/camera.json").read_text())
    scene = np.asarray(Image.open(ROOT / "examples/panda_pick/scene.png").convert("RGB"))
    T_cam_from_world = np.asarray(cam["T_cam_from_world"])
    R, t = T_cam_from_world[:3, :3], T_cam_from_world[:3, 3]
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    rays = np.stack([(u - cam["cx"]) / cam["fx"], (v - cam["cy"]) / cam["fy"], np.ones_like(u)], -1)
    # Depth of the world plane z = 0 (table), capped by a back wall 3 m away.
    origin_w = -R.T @ t
    dirs_w = rays @ R  # R^T applied to each ray
    s = np.where(dirs_w[..., 2] < -1e-6, -origin_w[2] / np.minimum(dirs_w[..., 2], -1e-6), np.inf)
    z = np.minimum(s, 3.0)
    z = z * (1 + 0.02 * np.sin(u / 37) * np.cos(v / 23))
    gt_rgb = np.repeat(scene[None], T, 0)
    depth = np.repeat(z[None], T, 0).astype(np.float32)
    robot = np.zeros((T, H, W), bool)
    ids = np.full((T, H, W), -1, np.int16)
    for k in range(T):
        x0 = 150 + 6 * k
        robot[k, 100:260, x0:x0 + 120] = True
        ids[k, 300:340, 300 + 2 * k:360 + 2 * k] = 1
        gt_rgb[k][ids[k] == 1] = (200, 40, 40)
        gt_rgb[k][robot[k]] = (230, 230, 230)
        depth[k][ids[k] == 1] -= 0.05
        depth[k][robot[k]] = 1.2
    pm = (rays[None] * depth[..., None]).astype(np.float32)
    poses = np.zeros((T, 1, 7))
    poses[:, 0, 6] = 1
    poses[:, 0, 1] = np.linspace(0, 0.1, T)
    gt = Clip(rgb=gt_rgb, pointmap=pm, valid=depth > 0, depth=depth, robot_mask=robot,
              object_ids=ids, object_poses=poses)
    noisy = np.clip(gt_rgb.astype(np.int16) + rng.integers(-12, 13, gt_rgb.shape), 0, 255)
    pdepth = (depth * (1 + rng.normal(0, 0.01 / 1.5, depth.shape))).astype(np.float32)
    ppm = (rays[None] * pdepth[..., None]).astype(np.float32)
    pred = Clip(rgb=noisy.astype(np.uint8), pointmap=ppm, valid=pdepth > 0, depth=pdepth)
    return pred, gt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--geometry-pixels", type=int, nargs="+", default=[20_000, 10_000])
    args = parser.parse_args()
    from k4d_eval.evaluate import Settings, evaluate_clips, summarise
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    pred, gt = make_episode()
    load_before = os.getloadavg()[0]
    rows = {}
    for pixels in args.geometry_pixels:
        times, cpu = [], []
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = evaluate_clips(pred, gt, Settings(geometry_pixels=pixels), synthetic=True)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        whole = summarise(result.stats["whole"])
        rows[pixels] = {"seconds": min(times), "cpu": min(cpu), "psnr": whole["psnr"], "ssim": whole["ssim"],
                        "chamfer_l1": whole["chamfer_l1"], "fscore": whole["fscore"],
                        "chamfer_l1_k4d": whole["chamfer_l1_k4d"]}
    from dataclasses import replace

    start, start_cpu = time.perf_counter(), time.process_time()
    evaluate_clips(replace(pred, pointmap=None), replace(gt, pointmap=None), Settings(), synthetic=True)
    video_wall, video_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    start, start_cpu = time.perf_counter(), time.process_time()
    for t in range(T):
        peak_signal_noise_ratio(gt.rgb[t], pred.rgb[t], data_range=255)
        structural_similarity(gt.rgb[t], pred.rgb[t], gaussian_weights=True, sigma=1.5,
                              use_sample_covariance=False, data_range=255, channel_axis=-1)
    anchor, anchor_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {load_before:.1f} before, {load:.1f} after; episode {T}x{H}x{W}")
    for pixels, row in rows.items():
        label = "all pixels" if pixels == 0 else f"{pixels} sampled pixels/frame"
        print(f"all CPU metrics, 4 regions, geometry on {label}: {row['seconds']:.2f} s/episode "
              f"wall, {row['cpu']:.2f} s CPU, {os.cpu_count()} threads "
              f"(PSNR {row['psnr']:.2f}, SSIM {row['ssim']:.4f}, CD-L1 {row['chamfer_l1']:.4f} m, "
              f"F {row['fscore']:.4f}, CD-L1 k4d {row['chamfer_l1_k4d']:.4f})")
    print(f"of which PSNR + SSIM, 4 regions (no geometry): {video_wall:.2f} s wall, {video_cpu:.2f} s CPU")
    first = rows[args.geometry_pixels[0]]
    print(f"anchor: scikit-image PSNR + SSIM alone, same frames, one thread: {anchor:.2f} s wall, "
          f"{anchor_cpu:.2f} s CPU (ours, every metric, first setting: "
          f"{first['seconds'] / anchor:.2f}x wall, {first['cpu'] / anchor_cpu:.2f}x CPU)")
    # The one line to quote (docs/benchmarks.md): the goal is < 10 s wall per episode.
    pixels = args.geometry_pixels[0]
    print(f"RESULT k4d eval, all CPU metrics, one {T}x{H}x{W} episode, {pixels or 'all'} "
          f"px/frame: {first['seconds']:.2f} s wall, {first['cpu']:.2f} s CPU, "
          f"{os.cpu_count()} threads, load {load_before:.1f}->{load:.1f} "
          f"(goal < 10 s wall: {'met' if first['seconds'] < 10 else 'NOT met'})")


if __name__ == "__main__":
    main()
