"""Which pixels of frame 0 are objects: the colour rule the shipped options use against a
small learned classifier (issue 21, round 17; measured, not shipped).

On an RGB image the estimate lays objects flat, so the `estimated_objects`, `grasp_centre_m`
and `push_colour` options find them by colour (k4d_model.surface.object_pieces: pixels unlike
every shaded surface colour). White and black objects on the grey tables are like a lit or
shaded table, and they are where the judge's agreement is lost (model card, round 16). This
script trains a ChangeRefiner of its own (k4d_model.refiner; the refiner's input channels of
frame 0, `refiner_inputs`) whose first output channel is an object logit (object ids >= 1 in
the data engine's segmentation), on a training-seed dataset, and scores both on held-out
splits' frame 0, on the pixels the shipped geometry network puts on a floor (where the rule
looks):

    python benchmarks/demo_model/object_pixels.py --model models/demo-small/weights \
        --train .k4d/splits/train160 --split .k4d/ev/h9013=.k4d/splits/heldout9013 \
        --split ... --steps 1500 --out .k4d/object-pixels

With --objects MODEL it trains nothing and scores that model's own object network (the
refiner's, RefinerConfig.objects; round 18), as `object_pixels: learned` reads it (the mean
logit over the rollout's frames), alone and as it completes the colour rule
(k4d_model.surface.object_pieces with `found`: "merged"):

    python benchmarks/demo_model/object_pixels.py --model models/demo-small/weights \
        --objects models/demo-small/weights --split ... --out .k4d/object-pixels-r18

--split RUN=DATA: a finished `k4d eval run` directory (its inputs and robot condition) and
its dataset. Prints, per object colour, the mean share of an object's pixels found and how
many objects had >= 30 % of them; and false pieces (found pieces of >= 3 pixels touching no
object). Writes OUT/object_pixels.json and the classifier (OUT/object_pixels.safetensors).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

FOUND_SHARE = 0.3  # an object counts as found with this share of its pixels
MIN_PIECE = 3
BATCH = 16
LEARNING_RATE = 2e-3
POSITIVE_WEIGHT = 5.0  # objects are ~0.3 % of the pixels


def frame_inputs(rgb, robot_rgb, robot_pointmap, robot_mask, t: int):
    """(1, INPUT_CHANNELS, H, W): frame t of an episode as the refiner reads a given image."""
    from k4d_model.refiner import refiner_inputs
    from k4d_model.results import RobotCondition

    robot = RobotCondition(robot_rgb[t:t + 1], robot_pointmap[t:t + 1].astype(np.float32),
                           robot_mask[t:t + 1].astype(bool))
    return refiner_inputs(rgb[t], robot, frames=[0])


def training_frames(uri: str):
    """(inputs (N, C, H, W), targets (N, 1, H, W)): every frame of every episode."""
    import torch
    from k4d.episodes import open_dataset

    dataset = open_dataset(uri)
    inputs, targets = [], []
    for episode_id in dataset.episode_ids:
        ep = dataset.open(episode_id)
        arrays = [ep.read(n) for n in ("rgb", "robot_rgb", "robot_pointmap", "robot_mask")]
        ids = ep.read("object_ids")
        for t in range(len(ids)):
            inputs.append(frame_inputs(*arrays, t))
            targets.append(torch.from_numpy((ids[t] >= 1).astype(np.float32))[None, None])
    return torch.cat(inputs), torch.cat(targets)


def train(uri: str, steps: int, seed: int = 0):
    """The classifier, trained `steps` Adam steps (cosine schedule, horizontal flips)."""
    import torch
    import torch.nn.functional as F
    from k4d_model.refiner import ChangeRefiner, RefinerConfig

    torch.manual_seed(seed)
    inputs, targets = training_frames(uri)
    net = ChangeRefiner(RefinerConfig(channels=(16, 32, 64), groups=4))
    optimizer = torch.optim.AdamW(net.parameters(), LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    weight, started = torch.tensor(POSITIVE_WEIGHT), time.time()
    for step in range(steps):
        pick = torch.randint(0, len(inputs), (BATCH,))
        x, y = inputs[pick], targets[pick]
        if step % 2:
            x, y = x.flip(-1), y.flip(-1)
        loss = F.binary_cross_entropy_with_logits(net(x)[:, :1], y, pos_weight=weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - started:.0f} s)",
                  flush=True)
    return net.eval()


def score(found: np.ndarray, ids: np.ndarray, names: list[str], tally: dict) -> int:
    """Adds each object's found share to tally[colour]; -> false pieces."""
    from scipy import ndimage

    labels, count = ndimage.label(found, structure=np.ones((3, 3)))
    touched = set()
    for k, name in enumerate(names, start=1):
        pixels = ids == k
        if pixels.any():
            tally.setdefault(name.split()[0], []).append(float(found[pixels].mean()))
            touched |= set(np.unique(labels[pixels]).tolist())
    sizes = np.bincount(labels.ravel(), minlength=count + 1)
    return sum(1 for k in range(1, count + 1) if k not in touched and sizes[k] >= MIN_PIECE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the shipped model (its refiner)")
    parser.add_argument("--train", help="training-seed dataset (to train a classifier)")
    parser.add_argument("--objects", help="a model whose refiner has an object network: "
                                          "score it instead of training one")
    parser.add_argument("--split", action="append", required=True, help="RUN=DATA")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    import torch
    from ablate_fidelity import episode_inputs
    from k4d.episodes import open_dataset
    from k4d.generation import FidelityOptions
    from k4d_generator.pipeline import Kinema4DPipeline
    from k4d_model.refiner import PLANE_HORIZONTAL, predict_change
    from k4d_model.surface import object_pieces
    from safetensors.torch import save_file

    torch.set_num_threads(2)
    if not (args.train or args.objects):
        parser.error("give --train (train a classifier) or --objects (score a model's)")
    args.out.mkdir(parents=True, exist_ok=True)
    net = None
    if args.objects:
        objects = Kinema4DPipeline.from_pretrained(args.objects).refiner
        if objects is None or objects.objects is None:
            parser.error(f"--objects: {args.objects} has no refiner object network")
    else:
        net = train(args.train, args.steps)
        save_file(net.state_dict(), str(args.out / "object_pixels.safetensors"))
    pipe = Kinema4DPipeline.from_pretrained(args.model)
    opts = FidelityOptions.from_extra(pipe.info.extra)
    names = ("colour rule", "learned", "merged")
    tallies = {name: {} for name in names}
    false = dict.fromkeys(names, 0)
    for spec in args.split:
        run, _, uri = spec.partition("=")
        dataset = open_dataset(uri)
        for episode_id in dataset.episode_ids:
            ep = dataset.open(episode_id)
            image, _, robot = episode_inputs(Path(run), episode_id)
            pose = ep.meta.camera_at(0).T_cam_from_base
            change = predict_change(pipe.refiner, image, robot, T_cam_from_base=pose,
                                    plane_mode_share=opts.plane_mode_share,
                                    plane_top_convex=opts.plane_top_convex)
            floor = (change.first_plane == PLANE_HORIZONTAL) & ~robot.mask[0]
            if net is None:
                learned = predict_change(objects, image, robot, T_cam_from_base=pose
                                         ).object_probability > 0.5
            else:
                with torch.no_grad():
                    learned = net(frame_inputs(image[None], robot.rgb, robot.pointmap,
                                               robot.mask, 0))[0, 0].numpy() > 0
            found = {"colour rule": object_pieces(image, floor, robot.mask[0]) > 0,
                     "learned": learned & floor,
                     "merged": object_pieces(image, floor, robot.mask[0], learned) > 0}
            ids = ep.read("object_ids")[0]
            for name, mask in found.items():
                false[name] += score(mask, ids, ep.meta.object_names, tallies[name])
    results = {name: {"false_pieces": false[name], "colours": {
        colour: {"mean_share": float(np.mean(v)), "found": int(np.sum(np.array(v) >= FOUND_SHARE)),
                 "objects": len(v)} for colour, v in sorted(tally.items())}}
        for name, tally in tallies.items()}
    (args.out / "object_pixels.json").write_text(json.dumps(results, indent=1))
    colours = sorted(results["learned"]["colours"])
    print("| | " + " | ".join(colours) + " | false pieces |")
    print("|---" * (len(colours) + 2) + "|")
    for name, result in results.items():
        cells = [f"{c['mean_share']:.2f} ({c['found']}/{c['objects']})"
                 for c in (result["colours"][k] for k in colours)]
        print(f"| {name} | " + " | ".join(cells) + f" | {result['false_pieces']} |")


if __name__ == "__main__":
    main()
