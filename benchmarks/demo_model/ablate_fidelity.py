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

`--ablate-transformer` adds two variants with the model's own options: `model`, and
`transformer-ablated`, where the transformer's sample is replaced by frame 0's latent in
every frame (issue 45's ablation: how much of the objects' motion the transformer carries).

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

TABLE_COLUMNS = (("frame 0 dB (min)", "frame0_psnr_min", ".1f"),
                 ("static dB", "static_psnr", ".2f"),
                 ("changed MSE (x floor)", "changed_mse", ".0f"),
                 ("objects MSE (x floor)", "objects_mse", ".0f"),
                 ("objects point L1 m", "objects_point_l1_m", ".4f"),
                 ("changed CD-L1 m", "changed_cd_l1_m", ".3f"),
                 ("robot dB", "robot_psnr", ".2f"),
                 ("depth AbsRel", "depth_absrel", ".3f"),
                 ("agreement (abstained)", "success_agreement", ".2f"))
# What ablation.json files written before k4d_eval.report.goal_figures called them.
FORMER_NAMES = {"changed_cd_l1_m": "changed_cd_l1", "success_agreement": "agreement",
                "judge_abstained": "abstained"}


def markdown_table(rows: dict) -> str:
    """The ablation as a markdown table (generated frames t >= 1 for region figures)."""
    head = "| variant | " + " | ".join(c[0] for c in TABLE_COLUMNS) + " |"
    lines = [head, "|---" * (len(TABLE_COLUMNS) + 1) + "|"]
    for name, r in rows.items():
        cells = []
        r = {**{new: r[old] for new, old in FORMER_NAMES.items() if old in r}, **r}
        for _, key, fmt in TABLE_COLUMNS:
            v = r.get(key)
            text = "-" if v is None else format(v, fmt)
            if key in ("changed_mse", "objects_mse") and v is not None and r.get(f"{key}_floor"):
                text += f" ({v / r[f'{key}_floor']:.2f})"
            if key == "success_agreement" and v is not None:
                text += f" ({r.get('judge_abstained') or 0})"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def episode_inputs(run: Path, episode_id: str):
    """What a finished `k4d eval run` directory gave an episode's rollout: the given image
    (H, W, 3) uint8, its static-world robot.npz arrays (joints and link poses too) and their
    RobotCondition."""
    from k4d_model.results import RobotCondition
    from PIL import Image

    image = np.asarray(Image.open(run / "inputs" / episode_id / "image.png").convert("RGB"))
    robot = dict(np.load(run / "static-world" / episode_id / "robot.npz"))
    condition = RobotCondition(robot["rgb"], robot["pointmap"].astype(np.float32),
                               robot["mask"].astype(bool))
    return image, robot, condition


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
    parser.add_argument("--ablate-transformer", action="store_true",
                        help="add the variant transformer-ablated (k4d_model.pipeline "
                             "ablation='first-frame', the model's own options)")
    parser.add_argument("--depth", action="store_true",
                        help="give the pipeline the first frame's points (RGB-D input)")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--episodes", default="",
                        help="comma-separated episode ids (default: every episode of --run)")
    parser.add_argument("--eval-only", action="store_true",
                        help="score the variants' existing rollouts again (no sampling)")
    parser.add_argument("--table", action="store_true",
                        help="print OUT/ablation.json as a markdown table and stop")
    args = parser.parse_args()
    if args.table:
        print(markdown_table(json.loads((args.out / "ablation.json").read_text())))
        return

    from k4d.episodes import open_dataset
    from k4d.robots.descriptions import load_robot
    from k4d.tool import tool_track
    from k4d_embedded.outputs import world_point_mask, write_pointmap_npz
    from k4d_eval.eval_runs import eval_dataset
    from k4d_eval.evaluate import Settings
    from k4d_eval.report import goal_figures
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model.conditions import PointmapNormalization
    from k4d_model.options import FidelityOptions
    from k4d_model.pipeline import ABLATION_FIRST_FRAME

    pipe = Kinema4DPipeline.from_pretrained(args.model)
    from k4d_model.options import FIDELITY_KEYS

    # Each variant states its options in full: the model's own are left out of the base.
    base_extra = {k: v for k, v in pipe.info.extra.items() if k not in FIDELITY_KEYS}
    dataset = open_dataset(args.data)
    floor = args.run / "static-world"
    ids = sorted(p.name for p in floor.iterdir() if (p / "summary.json").is_file())
    if args.episodes:
        wanted = args.episodes.split(",")
        missing = sorted(set(wanted) - set(ids))
        if missing:
            parser.error(f"--episodes: not in {floor}: {', '.join(missing)}")
        ids = [i for i in ids if i in wanted]
    variants = []  # (name, the model's extra, the pipeline's ablation)
    for spec in args.variant:
        name, _, text = spec.partition("=")
        variants.append((name, {**base_extra, **json.loads(text or "{}")}, None))
    if args.ablate_transformer:
        variants += [("model", dict(pipe.info.extra), None),
                     ("transformer-ablated", dict(pipe.info.extra), ABLATION_FIRST_FRAME)]
    # Variants that differ only in output options share one sampling: the latents depend on
    # `latent_anchor` alone (and the seed), so each episode is sampled once per anchor
    # setting and every output option is applied to the same decoded latents.
    decoded: dict[tuple[str, bool], tuple] = {}
    original_decode = pipe.decode_float
    static_of: dict[bytes, np.ndarray] = {}  # the static reconstruction, once per image
    original_static = pipe.static_reconstruction

    def static_reconstruction(image):
        key = image.tobytes()
        if key not in static_of:
            static_of.clear()
            static_of[key] = original_static(image)
        return static_of[key]

    pipe.static_reconstruction = static_reconstruction
    seconds = {name: 0.0 for name, _, _ in variants}
    for episode_id in [] if args.eval_only else ids:
        image, robot, condition = episode_inputs(args.run, episode_id)
        initial = first_pointmap(dataset, episode_id) if args.depth else None
        meta = dataset.open(episode_id).meta
        pose = meta.camera_at(0).T_cam_from_base
        tool = tool_track(load_robot(meta.robot), robot["joints"], robot["poses"])
        for name, extra, ablation in variants:
            pipe.info.extra = extra
            count = pipe.samples_drawn(FidelityOptions.from_extra(extra))
            key = (episode_id, bool(extra.get("latent_anchor", False)), ablation, count)
            cache = args.out / "_decoded" / (f"{episode_id}-anchor{int(key[1])}"
                                             f"{'-' + ablation if ablation else ''}"
                                             f"{f'-samples{count}' if count > 1 else ''}.npz")
            if key not in decoded and cache.is_file():  # sampled by an earlier run
                with np.load(cache) as data:
                    decoded[key] = (data["rgb"], data["pointmap"])
            started = time.perf_counter()
            if key in decoded:
                norm = PointmapNormalization.from_points(condition.pointmap, condition.mask)
                rgb, points = pipe.finish_output(image, condition, *decoded[key], norm,
                                                 initial, pose)
            else:
                pieces = []  # each sample's decoding (a refiner may read several)

                def remember(latents, _pieces=pieces):
                    _pieces.append(original_decode(latents))
                    return _pieces[-1]

                pipe.decode_float = remember
                result = pipe(image, condition.rgb, condition.pointmap, condition.mask,
                              initial_pointmap=initial, T_cam_from_base=pose, tool=tool,
                              num_steps=args.steps or None, ablation=ablation)
                pipe.decode_float = original_decode
                rgb, points = result.rgb, result.pointmap
                if pieces:  # `decode: input` with frame 0's points known samples nothing
                    decoded[key] = (pieces[0] if len(pieces) == 1 else
                                    tuple(np.stack(a) for a in zip(*pieces, strict=True)))
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    np.savez(cache, rgb=decoded[key][0], pointmap=decoded[key][1])
            seconds[name] += time.perf_counter() - started
            where = args.out / name / "predictions" / episode_id
            where.mkdir(parents=True, exist_ok=True)
            write_pointmap_npz(where / "pointmap.npz", points, world_point_mask(points), rgb)
            shutil.copyfile(floor / episode_id / "robot.npz", where / "robot.npz")
            summary = json.loads((floor / episode_id / "summary.json").read_text())
            summary["model"] = {"id": pipe.model_id, "name": pipe.info.name}
            (where / "summary.json").write_text(json.dumps(summary))
        print(f"generated {episode_id}", flush=True)
    results = {}
    for name, extra, ablation in variants:
        root = args.out / name
        report = eval_dataset(str(root / "predictions"), args.data, root / "eval", Settings(),
                              baseline_uri=str(floor), episodes=ids, progress=False,
                              method=f"model: {args.model} [{name}]")
        figures = {"variant": name, "extra": extra, "ablation": ablation, "depth_input": args.depth,
                   "output_s_per_episode": seconds[name] / len(ids), **goal_figures(report)}
        results[name] = figures
        print("RESULT " + json.dumps(figures), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "ablation.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**old, **results}, indent=1))


if __name__ == "__main__":
    main()
