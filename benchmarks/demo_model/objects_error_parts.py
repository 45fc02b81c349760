"""Where in the objects region is a `k4d eval run`'s RGB error? Its three parts (k4d_eval.regions:
`objects_arrived`, where an object is at frame t but was not at frame 0; `objects_left`,
where one was and is not; `objects_stayed`, where the same object is at both), each with its
share of the region's pixels and of its squared error, for the model and for the floor
(the run's static-world predictions), pooled over the generated frames t >= 1 of every
episode.

The report gives each part's MSE as a ratio to the floor's (0.49x where objects left, say);
the shares say which part a model must fix to move the whole region. The objects region's
MSE x floor is the pooled sum of each part's pixel share times its MSE, so a part's error
share times the region's ratio is what that part adds to the ratio.

    .venv/bin/python benchmarks/demo_model/objects_error_parts.py \
        --run .k4d/eval/shipped-val --data .k4d/demo-model/data/val

Prints one line per part and one RESULT line (JSON). The regions are those `k4d eval run`
scores: the robot's mask is the rollout's condition (its robot.npz), else the ground truth's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from k4d.episodes import open_dataset
from k4d_eval.inputs import load_episode, load_sim_dir
from k4d_eval.regions import build_regions

PARTS = ("objects_arrived", "objects_left", "objects_stayed")


def part_sums(pred_rgb: np.ndarray, gt_rgb: np.ndarray, regions: dict[str, np.ndarray]
              ) -> dict[str, tuple[float, int]]:
    """part -> (sum of the squared RGB error over its pixels, pixel count), frames t >= 1."""
    error = ((pred_rgb[1:].astype(np.float64) - gt_rgb[1:].astype(np.float64)) ** 2).mean(-1)
    return {part: (float(error[regions[part][1:]].sum()), int(regions[part][1:].sum()))
            for part in PARTS}


def shares(totals: dict[str, tuple[float, int]]) -> dict[str, dict[str, float]]:
    """part -> its pixel share, error share and MSE (pooled)."""
    error = sum(s for s, _ in totals.values())
    pixels = sum(n for _, n in totals.values())
    return {part: {"pixel_share": n / pixels if pixels else float("nan"),
                   "error_share": s / error if error else float("nan"),
                   "mse": s / n if n else float("nan")}
            for part, (s, n) in totals.items()}


def measure(run: Path, data: str, episodes: list[str] | None = None) -> dict:
    dataset = open_dataset(data)
    ids = episodes or sorted(p.name for p in (run / "predictions").iterdir() if p.is_dir())
    if not ids:
        raise SystemExit(f"objects_error_parts: error: no episode under {run}/predictions")
    totals = {side: {part: (0.0, 0) for part in PARTS} for side in ("model", "floor")}
    for episode_id in ids:
        gt = load_episode(dataset, episode_id)
        if gt.object_ids is None:
            raise SystemExit(f"objects_error_parts: error: {episode_id} has no object ids "
                             "(synthetic data only)")
        for side, folder in (("model", "predictions"), ("floor", "static-world")):
            pred, condition, _ = load_sim_dir(run / folder / episode_id, gt.T_cam_from_world)
            regions = build_regions(gt, condition, synthetic=True)
            for part, (s, n) in part_sums(pred.rgb, gt.rgb, regions).items():
                before = totals[side][part]
                totals[side][part] = (before[0] + s, before[1] + n)
    result = {side: shares(t) for side, t in totals.items()}
    model_error = sum(s for s, _ in totals["model"].values())
    floor_error = sum(s for s, _ in totals["floor"].values())
    result["objects_mse_x_floor"] = model_error / floor_error if floor_error else float("nan")
    result["episodes"] = len(ids)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True,
                        help="a `k4d eval run --out` directory (predictions/, static-world/)")
    parser.add_argument("--data", required=True, help="the dataset the run scored")
    parser.add_argument("--episodes", nargs="*", help="only these episode ids")
    args = parser.parse_args(argv)
    for folder in ("predictions", "static-world"):
        if not (args.run / folder).is_dir():
            parser.error(f"--run {args.run}: no {folder}/ (a k4d eval run with its floor)")
    result = measure(args.run, args.data, args.episodes)
    for part in PARTS:
        m, f = result["model"][part], result["floor"][part]
        print(f"{part:16s} pixels {m['pixel_share']:.3f}  error share {m['error_share']:.3f} "
              f"(floor {f['error_share']:.3f})  MSE {m['mse']:.0f} ({m['mse'] / f['mse']:.2f}x "
              f"the floor's)")
    print(f"objects region, pooled over frames t >= 1: {result['objects_mse_x_floor']:.3f}x "
          "the floor's squared error")
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
