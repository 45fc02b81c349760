"""Data engine figures (issue 10): episodes per minute at 49x480x720 and 17x128x192 with
`--workers` processes, bytes per stored episode, robot-mask IoU against MuJoCo's robot-only
segmentation and robot pointmap error against MuJoCo's depth.

Anchor measured in the same run: the MuJoCo render passes alone (one shaded RGB+depth pass
and one segmentation pass per frame, the part of an episode no code of ours can speed up),
as a share of the episode time.

    MUJOCO_GL=osmesa .venv/bin/python benchmarks/datagen/bench_datagen.py \
        [--big-episodes 2] [--small-episodes 6] [--workers 2] [--json out.json]
        [--strip docs/benchmarks/datagen_episodes.png --only-strip]

--strip writes a picture: one row per task (first, middle and last frame of the scene, the
robot-only render, the robot mask and the object ids) at 160x240.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
from k4d.episodes import open_dataset  # noqa: E402
from k4d_datagen.engine import (  # noqa: E402
    EpisodeConfig,
    Simulation,
    episode_rng,
    generate_episode,
    plan_episode,
)
from k4d_datagen.runner import generate_dataset  # noqa: E402
from k4d_tabletop.physics import SceneCamera  # noqa: E402


def throughput(frames, height, width, episodes, workers, seed=7) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        template = EpisodeConfig(index=0, seed=seed, task="mix", failures=0.3, frames=frames,
                                 height=height, width=width)
        start = time.perf_counter()
        generate_dataset(f"{tmp}/ds", template, list(range(episodes)), workers=workers, progress=False)
        wall = time.perf_counter() - start
        ds = open_dataset(f"{tmp}/ds")
        sizes = [ds.size_bytes(e) for e in ds.episode_ids]
    return {"clip": f"{frames}x{height}x{width}", "episodes": episodes, "workers": workers,
            "wall_s": wall, "episodes_per_min": 60.0 * episodes / wall,
            "bytes_per_episode": float(np.mean(sizes)), "raw_bytes_per_episode": raw_bytes(frames, height, width)}


def raw_bytes(T, H, W, K=3) -> int:
    px = T * H * W
    return px * (3 + 4 + 12 + 1 + 3 + 12 + 2) + T * (8 * 8 + K * 7 * 8)


def render_anchor(frames, height, width, seed=7) -> dict:
    """Seconds of the MuJoCo render passes alone for one episode's frames, vs the whole episode."""
    config = EpisodeConfig(index=0, seed=seed, task="pick", frames=frames, height=height, width=width)
    start = time.perf_counter()
    generate_episode(config)
    episode_s = time.perf_counter() - start
    sim = Simulation(config, plan_episode(config, episode_rng(seed, 0)))
    camera = SceneCamera(sim)
    try:
        start = time.perf_counter()
        for _ in range(frames):
            camera.render()
        render_s = time.perf_counter() - start
    finally:
        camera.close()
    return {"clip": f"{frames}x{height}x{width}", "episode_s": episode_s, "mujoco_render_s": render_s,
            "render_share": render_s / episode_s}


def accuracy(frames, height, width, seeds, seed=7) -> dict:
    ious, errors, scene_errors = [], [], []
    for i, task in enumerate(seeds):
        _, a = generate_episode(EpisodeConfig(index=i, seed=seed, task=task, frames=frames, height=height,
                                              width=width), verify=True)
        ours, theirs = a["robot_mask"], a["_mujoco_robot_mask"]
        ious += [float((ours[t] & theirs[t]).sum() / (ours[t] | theirs[t]).sum()) for t in range(frames)]
        both = ours & theirs
        errors.append(np.abs(a["robot_pointmap"][..., 2] - a["_mujoco_robot_depth"])[both])
        visible = ours & (a["object_ids"] == 0)
        scene_errors.append(np.linalg.norm(a["pointmap"] - a["robot_pointmap"], axis=-1)[visible])
    err, scene = np.concatenate(errors), np.concatenate(scene_errors)
    return {"clip": f"{frames}x{height}x{width}", "episodes": len(seeds), "frames": len(ious),
            "mask_iou_min": min(ious), "mask_iou_mean": float(np.mean(ious)),
            "robot_depth_err_median_m": float(np.median(err)), "robot_depth_err_p99_m": float(np.percentile(err, 99)),
            "scene_pointmap_vs_projection_median_m": float(np.median(scene)),
            "scene_pointmap_vs_projection_p99_m": float(np.percentile(scene, 99))}


def strip(path: str, seed: int = 7) -> None:
    from PIL import Image

    rows = []
    for i, task in enumerate(("pick", "push", "stack")):
        meta, a = generate_episode(EpisodeConfig(index=i, seed=seed, task=task, frames=9, height=160, width=240))
        ids = a["object_ids"][-1]
        palette = np.array([[40, 40, 40], [255, 255, 255], [230, 60, 50], [60, 160, 230], [240, 200, 40]], np.uint8)
        rows.append(np.concatenate([a["rgb"][0], a["rgb"][4], a["rgb"][-1], a["robot_rgb"][4],
                                    np.repeat(a["robot_mask"][4][..., None] * np.uint8(255), 3, -1),
                                    palette[np.clip(ids + 1, 0, len(palette) - 1)]], axis=1))
        print(f"{task}: {meta.task!r} success={meta.success} ({meta.success_judge})", flush=True)
    Image.fromarray(np.concatenate(rows, axis=0)).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-episodes", type=int, default=2)
    parser.add_argument("--small-episodes", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default="")
    parser.add_argument("--strip", default="", help="also write a PNG of three episodes")
    parser.add_argument("--only-strip", action="store_true")
    args = parser.parse_args()
    if args.strip:
        strip(args.strip)
        if args.only_strip:
            return
    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
               "load_avg_start": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    results["accuracy_small"] = accuracy(17, 128, 192, ["pick", "push", "stack"])
    print(json.dumps(results["accuracy_small"], indent=1), flush=True)
    results["throughput_small"] = throughput(17, 128, 192, args.small_episodes, args.workers)
    print(json.dumps(results["throughput_small"], indent=1), flush=True)
    results["throughput_big"] = throughput(49, 480, 720, args.big_episodes, args.workers)
    print(json.dumps(results["throughput_big"], indent=1), flush=True)
    results["anchor_big"] = render_anchor(49, 480, 720)
    print(json.dumps(results["anchor_big"], indent=1), flush=True)
    results["accuracy_big"] = accuracy(49, 480, 720, ["stack"])
    print(json.dumps(results["accuracy_big"], indent=1), flush=True)
    results["load_avg_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
