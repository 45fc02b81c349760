"""Ablation of the world model's fidelity options (issue 21; k4d_model.fidelity), one change
at a time, on held-out episodes, with the model loaded once.

It reuses a finished `k4d eval run` directory for what does not change between variants:
its inputs/ (first frame of every episode) and its static-world/ rollouts (the floor, and
robot.npz: the robot condition kinematics and projection computed for the episode). Each
variant's rollouts are written in `k4d simulate`'s layout under OUT/<variant>/predictions/
and scored by the evaluator's own `eval_dataset` against the same floor, so the figures are
those `k4d eval run` reports.

    .venv/bin/python benchmarks/demo_model/ablate_fidelity.py --model models/demo-small \
        --data .k4d/demo-model/data/heldout --run .k4d/abl/prev --out .k4d/abl \
        --variant 'given={"first_frame": "given"}' --variant ... [--depth]

Prints one RESULT line (JSON) per variant with the issue's goal figures, and writes
OUT/ablation.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np


def goal_figures(report: dict) -> dict:
    """The issue-21 goal figures of a `k4d eval` report (model and floor)."""
    model, floor = report, report.get("baseline") or {}

    def region(sec, name, key):
        return (sec.get("regions", {}).get(name) or {}).get(key)

    agreement = (report.get("policy") or {}).get("agreement") or {}
    abstained = ((report.get("policy") or {}).get("judge_abstentions") or {}).get(
        "prediction") or {}
    return {
        "frame0_psnr_mean": (model.get("first_frame") or {}).get("psnr_mean"),
        "frame0_psnr_min": (model.get("first_frame") or {}).get("psnr_min"),
        "static_psnr": region(model, "static", "psnr"),
        "changed_mse": region(model, "changed", "mse"),
        "changed_mse_floor": region(floor, "changed", "mse"),
        "changed_cd_l1": region(model, "changed", "chamfer_l1"),
        "changed_cd_l1_floor": region(floor, "changed", "chamfer_l1"),
        "robot_psnr": region(model, "robot", "psnr"),
        "robot_psnr_floor": region(floor, "robot", "psnr"),
        "environment_psnr": region(model, "environment", "psnr"),
        "whole_psnr": region(model, "whole", "psnr"),
        "depth_absrel": region(model, "whole", "depth_absrel"),
        "depth_absrel_floor": region(floor, "whole", "depth_absrel"),
        "agreement": agreement.get("accuracy"),
        "abstained": abstained.get("count"),
    }


def first_pointmap(dataset, episode_id: str) -> np.ndarray:
    """Frame 0's ground-truth points in the camera frame (zeros where no depth): what an
    RGB-D camera would give with the image."""
    from k4d_eval.inputs import load_episode

    clip = load_episode(dataset, episode_id)
    return np.where(clip.valid[0][..., None], clip.pointmap[0], 0.0).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="held-out dataset URI")
    parser.add_argument("--run", required=True, type=Path, help="a finished k4d eval run dir")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=JSON of k4d_model.json extra keys (added to the model's)")
    parser.add_argument("--depth", action="store_true",
                        help="give the pipeline the first frame's points (RGB-D input)")
    parser.add_argument("--steps", type=int, default=0)
    args = parser.parse_args()

    from k4d.episodes import open_dataset
    from k4d_embedded.outputs import world_point_mask, write_pointmap_npz
    from k4d_eval.eval_runs import eval_dataset
    from k4d_eval.evaluate import Settings
    from k4d_generator.pipeline import Kinema4DPipeline
    from PIL import Image

    pipe = Kinema4DPipeline.from_pretrained(args.model)
    base_extra = dict(pipe.info.extra)
    dataset = open_dataset(args.data)
    floor = args.run / "static-world"
    ids = sorted(p.name for p in floor.iterdir() if (p / "summary.json").is_file())
    results = {}
    for spec in args.variant:
        name, _, text = spec.partition("=")
        pipe.info.extra = {**base_extra, **json.loads(text or "{}")}
        root = args.out / name
        pred = root / "predictions"
        started = time.perf_counter()
        for episode_id in ids:
            where = pred / episode_id
            where.mkdir(parents=True, exist_ok=True)
            image = np.asarray(Image.open(args.run / "inputs" / episode_id / "image.png")
                               .convert("RGB"))
            robot = np.load(floor / episode_id / "robot.npz")
            initial = first_pointmap(dataset, episode_id) if args.depth else None
            result = pipe(image, robot["rgb"], robot["pointmap"].astype(np.float32),
                          robot["mask"].astype(bool), initial_pointmap=initial,
                          num_steps=args.steps or None)
            write_pointmap_npz(where / "pointmap.npz", result.pointmap,
                               world_point_mask(result.pointmap), result.rgb)
            shutil.copyfile(floor / episode_id / "robot.npz", where / "robot.npz")
            summary = json.loads((floor / episode_id / "summary.json").read_text())
            summary["model"] = {"id": pipe.model_id, "name": pipe.info.name}
            (where / "summary.json").write_text(json.dumps(summary))
        generation_s = time.perf_counter() - started
        report = eval_dataset(str(pred), args.data, root / "eval", Settings(),
                              baseline_uri=str(floor), episodes=ids, progress=False,
                              method=f"model: {args.model} [{name}]")
        figures = {"variant": name, "extra": pipe.info.extra, "depth_input": args.depth,
                   "generation_s_per_episode": generation_s / len(ids), **goal_figures(report)}
        results[name] = figures
        print("RESULT " + json.dumps(figures), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "ablation.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**old, **results}, indent=1))


if __name__ == "__main__":
    main()
