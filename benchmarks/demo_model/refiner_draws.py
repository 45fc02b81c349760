"""A refiner network's draws (issue 21, rounds 20 and 22): train one of the recipe's refiner
networks alone, exactly as the recipe's refiner stage does (the trainer's own `train_refiner`,
the recipe's section, the stage's seed for that network), at a chosen precision, step count,
seed and process layout, and put it into a copy of a model's weights in place of that model's
network of the same kind; then compare it with the shipped network.

The sections and the stage's seeds (k4d_trainer.refiner_stage.NETWORKS): `colour` is
`refiner` (seed), `geometry` is `refiner.geometry` (seed + 1), `objects` is
`refiner.objects` (seed + 2).

    # the recipe's own geometry draw (2 processes of 1 thread, as `make demo-model` runs):
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 benchmarks/demo_model/refiner_draws.py \
        train --section geometry --precision fp32 --base models/demo-small/weights \
        --out .k4d/geo-fp32
    # round 6's procedure (1 process, the batch of 16); --steps, --seed, --set KEY=VALUE
    # change others:
    OMP_NUM_THREADS=2 python benchmarks/demo_model/refiner_draws.py train --section geometry \
        --precision fp32 --batch 16 --base models/demo-small/weights --out .k4d/geo-fp32-1p
    # the object network at twice the recipe's steps, into the recipe's own model:
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 benchmarks/demo_model/refiner_draws.py \
        train --section objects --steps 2400 --base .k4d/r21-model/weights --out .k4d/obj-2400
    # then score OUT with benchmarks/demo_model/ablate_fidelity.py (the shipped options), and:
    python benchmarks/demo_model/refiner_draws.py compare .k4d/geo-fp32 .k4d/geo-fp32-1p \
        --split .k4d/splits/s4639 --predictions .k4d/abl/NAME/s4639/ship/predictions ...

`compare` prints each network's relative weight distance from the shipped one (`--section`
names which) and, with `--split` and one `--predictions` folder per network (the ablation
harness's), frame 0's point error on the objects and on the rest of the scene (the median
over each episode's pixels, averaged over the episodes): whole-frame depth AbsRel weighs the
objects as the ~1 % of the pixels they are, the priors that move them read exactly those
points.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

SHIPPED = "models/demo-small/weights"
CONFIG = "examples/train/demo-model.yaml"
CLIP = (13, 96, 144)  # the recipe's clip: frames, height, width


def recipe_section(config, kind: str):
    """The recipe's section that trains the `kind` network (colour: without its children)."""
    if kind == "colour":
        return dataclasses.replace(config.refiner, geometry=None, objects=None)
    return getattr(config.refiner, kind)


def with_network(refiner, kind: str, network):
    """`refiner` with `network` in place of its `kind` network, the others kept exactly."""
    from k4d_model.refiner import with_colour, with_geometry, with_objects

    put = {"colour": with_colour, "geometry": with_geometry, "objects": with_objects}[kind]
    return put(refiner, network).eval()


def train(args: argparse.Namespace) -> None:
    import yaml
    from k4d_model.refiner import load_refiner, save_refiner
    from k4d_trainer.clips import ClipSpec
    from k4d_trainer.config import load_config_file, resolve_degrees
    from k4d_trainer.data import open_source, select_episodes
    from k4d_trainer.parallel import init_distributed, stage_dtype
    from k4d_trainer.refiner_stage import (
        NETWORKS,
        network_dtype,
        refiner_episodes,
        train_refiner,
    )

    config = load_config_file(args.config)
    info = init_distributed(lambda world_size: resolve_degrees(config.parallelism, world_size))
    clip = ClipSpec(*CLIP)
    network = NETWORKS[args.section]
    section = recipe_section(config, args.section)
    changes = {"precision": args.precision}
    if args.steps:
        changes["steps"] = args.steps
    if args.batch:
        changes["batch_size"] = args.batch
    for item in args.set or ():
        key, _, value = item.partition("=")
        changes[key] = yaml.safe_load(value)
    section = dataclasses.replace(section, **changes)
    section.validate(network.field)
    dataset, ids = refiner_episodes(section.data_uri, select_episodes(
        open_source(config.data), config.data, clip))
    seed = config.seed + network.seed_offset if args.seed is None else args.seed
    started = time.perf_counter()
    log = (lambda line: print(line, flush=True)) if info.is_main else (lambda line: None)
    network, losses = train_refiner(
        dataset, ids, clip, section, info, seed, None, log=log, network=network,
        compute_dtype=network_dtype(section, stage_dtype(config.model.precision)))
    if info.is_main:
        out = Path(args.out)
        shutil.copytree(args.base, out, dirs_exist_ok=True)
        save_refiner(with_network(load_refiner(args.base), args.section, network), out)
        print(json.dumps({"out": str(out), "section": args.section, "changes": changes,
                          "seed": seed, "precision": section.precision, "steps": section.steps,
                          "batch_per_process": section.batch_size,
                          "processes": info.world_size, "last_loss": round(losses[-1], 4),
                          "minutes": round((time.perf_counter() - started) / 60, 1)}))


def weight_distance(model: str, kind: str, shipped: str = SHIPPED) -> float:
    """||n - n_shipped|| / ||n_shipped|| over the `kind` network's tensors."""
    from safetensors.torch import load_file

    def network(path: str) -> dict:
        tensors = load_file(str(Path(path) / "refiner" / "model.safetensors"))
        if kind == "colour":
            return {k: v for k, v in tensors.items()
                    if not k.startswith(("geometry.", "objects."))}
        return {k: v for k, v in tensors.items() if k.startswith(f"{kind}.")}

    ours, theirs = network(model), network(shipped)
    num = sum(float(((ours[k] - theirs[k]) ** 2).sum()) for k in theirs)
    return (num / sum(float((v ** 2).sum()) for v in theirs.values())) ** 0.5


def frame0_point_errors(split: str, predictions: str) -> dict:
    """Frame 0's point error (m): the median over each episode's object pixels (object_ids
    >= 1) and over its other pixels off the robot, averaged over the episodes."""
    from k4d.episodes import open_dataset

    dataset = open_dataset(split)
    objects, rest = [], []
    for eid in sorted(dataset.episode_ids):
        episode = dataset.open(eid)
        truth = np.asarray(episode["pointmap"][0])
        ids = np.asarray(episode["object_ids"][0])
        off_robot = ~np.asarray(episode["robot_mask"][0])
        predicted = np.load(Path(predictions) / eid / "pointmap.npz")["pointmap"][0]
        error = np.linalg.norm(predicted - truth, axis=-1)
        if ((ids > 0) & off_robot).any():
            objects.append(float(np.median(error[(ids > 0) & off_robot])))
        rest.append(float(np.median(error[(ids < 0) & off_robot])))
    return {"object_points_m": round(float(np.mean(objects)), 4),
            "background_points_m": round(float(np.mean(rest)), 4), "episodes": len(rest)}


def compare(args: argparse.Namespace) -> None:
    if args.predictions and len(args.predictions) != len(args.models):
        raise SystemExit("refiner_draws: error: give one --predictions folder per model")
    for i, model in enumerate(args.models):
        row = {"model": model, "section": args.section,
               "weight_distance": round(weight_distance(model, args.section), 4)}
        if args.split and args.predictions:
            row.update(frame0_point_errors(args.split, args.predictions[i]))
        print(json.dumps(row))


def main() -> None:
    from k4d_trainer.refiner_stage import NETWORKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train one of the recipe's refiner networks into a model "
                                      "copy")
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--section", choices=sorted(NETWORKS), default="geometry")
    p.add_argument("--seed", type=int, help="the network's seed; default: the stage's")
    p.add_argument("--precision", choices=["model", "fp32", "bf16"], default="model")
    p.add_argument("--steps", type=int, default=0, help="0: the recipe's")
    p.add_argument("--batch", type=int, default=0, help="frames per process; 0: the recipe's")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="another field of the section, e.g. object_weight=10")
    p.add_argument("--base", default=SHIPPED,
                   help="the weights whose network of that kind is replaced")
    p.add_argument("--out", required=True)
    p.set_defaults(run=train)
    p = sub.add_parser("compare", help="weight distance and frame 0's point errors")
    p.add_argument("models", nargs="+")
    p.add_argument("--section", choices=sorted(NETWORKS), default="geometry")
    p.add_argument("--split", help="the episodes the predictions were made on")
    p.add_argument("--predictions", action="append", help="one per model, in order")
    p.set_defaults(run=compare)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
