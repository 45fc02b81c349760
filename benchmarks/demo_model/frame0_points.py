"""How far frame 0's points are from the truth when a rollout is given an RGB image alone: the
points a `k4d eval run` wrote for frame 0 (the model's own, whichever way it made them) and,
with `--model`, the estimate of that model's first-depth network (k4d_model.refiner's
first-depth head cast along the camera's rays, `refiner_first_depth: estimated`), each per
pixel against the ground truth's, on frame 0's object pixels and on the rest (off the robot,
where the truth's depth is known).

    .venv/bin/python benchmarks/demo_model/frame0_points.py --run .k4d/eval/shipped-val \
        --data .k4d/demo-model/data/val [--model models/demo-small/weights] \
        [--picture docs/benchmarks/demo-first-depth.png --picture-episodes ep000000 ep000005]

The run gives the image and the robot condition (each prediction's robot.npz) the network
reads, so the two rows see the same rollouts. Prints one line per row and region (mean and
median L1 of the xyz error, depth AbsRel) and one RESULT line (JSON). `--picture` (with
`--model`) draws, per chosen episode, the image, the true depth, the run's frame-0 depth, the
network's and the network's error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from k4d.episodes import open_dataset
from k4d_eval.inputs import load_episode, load_sim_dir
from k4d_model.fidelity import estimated_first_points
from k4d_model.refiner import load_refiner, predict_change
from k4d_model.results import RobotCondition

REGIONS = ("objects", "rest")


def frame0_errors(points: np.ndarray, truth: np.ndarray, where: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(the L1 xyz error in metres, the depth AbsRel) of each pixel in `where`."""
    l1 = np.abs(points - truth).sum(-1)
    absrel = np.abs(points[..., 2] - truth[..., 2]) / truth[..., 2]
    return l1[where], absrel[where]


def summarise(errors: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> dict[str, dict]:
    out = {}
    for key, pieces in errors.items():
        l1 = np.concatenate([p[0] for p in pieces])
        absrel = np.concatenate([p[1] for p in pieces])
        out[key] = {"l1_mean_m": float(l1.mean()), "l1_median_m": float(np.median(l1)),
                    "absrel": float(absrel.mean()), "pixels": int(l1.size)}
    return out


def draw(rows: list[dict[str, np.ndarray]], path: Path) -> None:
    """One row per episode: image, true depth, the run's, the network's (one colour scale per
    row: the truth's 2-98th percentile) and |network - truth| from 0 to 10 cm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = ("frame 0 (given)", "true depth", "the run's frame-0 depth", "first-depth network",
              "|network - truth| (0-10 cm)")
    fig, axes = plt.subplots(len(rows), 5, figsize=(15, 2.2 * len(rows) + 0.4), squeeze=False)
    for r, row in enumerate(rows):
        truth = np.where(row["known"], row["truth"], np.nan)
        low, high = np.nanpercentile(truth, [2, 98])
        panels = ((row["image"], {}), (truth, {"vmin": low, "vmax": high}),
                  (row["run"], {"vmin": low, "vmax": high}),
                  (row["network"], {"vmin": low, "vmax": high}),
                  (np.abs(row["network"] - truth), {"cmap": "magma", "vmin": 0, "vmax": 0.1}))
        for c, (image, style) in enumerate(panels):
            axes[r, c].imshow(image, **style)
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
            if r == 0:
                axes[r, c].set_title(titles[c], fontsize=9)
    fig.suptitle("Frame 0's depth from an RGB image", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def measure(run: Path, data: str, model: str | None, picture: Path | None = None,
            picture_episodes: list[str] | None = None) -> dict:
    dataset = open_dataset(data)
    network = None
    if model is not None:
        network = load_refiner(model)
        if network is None or not network.geometry_source.config.first_depth:
            raise SystemExit(f"frame0_points: error: --model {model} has no refiner with a "
                             "first-depth head (refiner/config.json \"first_depth\": true)")
    ids = sorted(p.name for p in (run / "predictions").iterdir() if p.is_dir())
    if not ids:
        raise SystemExit(f"frame0_points: error: no episode under {run}/predictions")
    errors: dict[str, list] = {}
    drawn = []
    for episode_id in ids:
        gt = load_episode(dataset, episode_id)
        if gt.object_ids is None:
            raise SystemExit(f"frame0_points: error: {episode_id} has no object ids "
                             "(synthetic data only)")
        folder = run / "predictions" / episode_id
        pred, _, _ = load_sim_dir(folder, gt.T_cam_from_world)
        rows = {"run": pred.pointmap[0]}
        if network is not None:
            arrays = np.load(folder / "robot.npz")
            robot = RobotCondition(arrays["rgb"], arrays["pointmap"], arrays["mask"])
            depth = predict_change(network, gt.rgb[0], robot).first_depth_m
            rows["first_depth_network"] = estimated_first_points(depth, robot)
        truth = gt.pointmap[0]
        known = gt.valid[0] & np.isfinite(truth).all(-1) & (truth[..., 2] > 0) & ~gt.robot_mask[0]
        objects = gt.object_ids[0] > 0
        if picture is not None and episode_id in (picture_episodes or ids[:2]):
            drawn.append({"image": gt.rgb[0], "truth": truth[..., 2], "known": known,
                          "run": rows["run"][..., 2], "network": rows["first_depth_network"][..., 2]})
        for row, points in rows.items():
            if points is None:
                continue
            for region, where in (("objects", known & objects), ("rest", known & ~objects)):
                errors.setdefault(f"{row}/{region}", []).append(
                    frame0_errors(points, truth, where))
    if picture is not None:
        draw(drawn, picture)
    return {"episodes": len(ids), **summarise(errors)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True,
                        help="a `k4d eval run --out` directory of an RGB frame 0 (predictions/)")
    parser.add_argument("--data", required=True, help="the dataset the run scored")
    parser.add_argument("--model", help="a model's weights directory with a first-depth network")
    parser.add_argument("--picture", type=Path, help="a PNG of the depths (needs --model)")
    parser.add_argument("--picture-episodes", nargs="*",
                        help="the episodes drawn (default: the first two)")
    args = parser.parse_args(argv)
    if not (args.run / "predictions").is_dir():
        parser.error(f"--run {args.run}: no predictions/ (a k4d eval run directory)")
    if args.picture is not None and args.model is None:
        parser.error("--picture needs --model (it draws the network's depth)")
    result = measure(args.run, args.data, args.model, args.picture, args.picture_episodes)
    for key, row in result.items():
        if key != "episodes":
            print(f"{key:28s} L1 mean {row['l1_mean_m'] * 100:5.2f} cm, median "
                  f"{row['l1_median_m'] * 100:5.2f} cm, AbsRel {row['absrel']:.4f}")
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
