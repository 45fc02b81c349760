"""How much of the objects' motion a warping sample refiner's flow learned (`cascade.warp`,
k4d_model.cascade): its backward flow against the ground truth's (k4d_trainer.object_flow)
on stored rollouts, beside the error of no flow at all, and the weight it gives the warp.

    .venv/bin/python benchmarks/demo_model/warp_flow.py --model .k4d/exp/model-warp2/weights \
        --run .k4d/exp/run-cont --data .k4d/demo-model/data/cascade --every 12

Pixels: `moving` are those off the robot whose true flow is over 1 px (an object that moved
since frame 0), `valid` every pixel with a true flow (the table included). Errors are the
mean end-point error in pixels. Prints one RESULT line (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from k4d_model.cascade import FLOW_SCALE, load_cascade
from k4d_trainer.cascade_stage import ROLLOUTS_FOLDER, read_rollout, rollout_example, with_flow
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import CascadeSection, DataSection
from k4d_trainer.data import open_source
from k4d_trainer.runs import RunDir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model's weights folder (cascade/ in it)")
    parser.add_argument("--run", required=True, help="a run whose cascade_rollouts/ to read")
    parser.add_argument("--data", required=True, help="the rollouts' episodes (cascade.data_uri)")
    parser.add_argument("--every", type=int, default=12, help="read every Nth rollout")
    parser.add_argument("--frames", type=int, default=13)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=144)
    args = parser.parse_args(argv)
    network = load_cascade(args.model)
    if network is None or not network.config.warp:
        print(f"error: {args.model} holds no warping sample refiner (cascade.warp)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    run, clip = RunDir(args.run), ClipSpec(args.frames, args.height, args.width)
    dataset = open_source(DataSection(uri=args.data), None)
    section = CascadeSection(warp=True, flow_pixels="all")
    stored = run.fs.ls(f"{run.path}/{ROLLOUTS_FOLDER}", detail=False)
    ids = sorted(Path(name).stem for name in stored if name.endswith(".npz"))[::args.every]
    sums = dict.fromkeys(("moving_error", "moving_still", "moving_weight", "moving",
                          "valid_error", "valid_still", "valid_weight", "valid"), 0.0)
    for episode_id in ids:
        example = rollout_example(with_flow(read_rollout(run, episode_id), dataset, episode_id,
                                            clip, section))
        with torch.no_grad():
            out = network(example.x)
        truth, valid = example.flow * FLOW_SCALE, example.flow_known
        error = (out[:, 6:8] * FLOW_SCALE - truth).norm(dim=1, keepdim=True)
        still, weight = truth.norm(dim=1, keepdim=True), torch.sigmoid(out[:, 8:9])
        moving = valid * (still > 1.0)
        for name, mask in (("moving", moving), ("valid", valid)):
            sums[f"{name}_error"] += float((mask * error).sum())
            sums[f"{name}_still"] += float((mask * still).sum())
            sums[f"{name}_weight"] += float((mask * weight).sum())
            sums[name] += float(mask.sum())
    result = {"rollouts": len(ids), "moving_pixels": int(sums["moving"])}
    for name in ("moving", "valid"):
        count = max(sums[name], 1.0)
        result |= {f"{name}_flow_error_px": sums[f"{name}_error"] / count,
                   f"{name}_no_flow_error_px": sums[f"{name}_still"] / count,
                   f"{name}_warp_weight": sums[f"{name}_weight"] / count}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
