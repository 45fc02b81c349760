"""How much of the objects' motion the transformer's sample shows: a flow matcher
(k4d_model.cascade.FlowMatcher, what `cascade.matching` adds to a warping refiner) trained
on the ground truth's backward flow (k4d_trainer.object_flow) of stored rollouts, and its
end-point error on moving pixels of other rollouts, beside that of no flow at all.

`--look sample` matches what the sample refiner reads for frame t (frame 0 plus the
sample's colour and point change); `--look truth` matches the ground truth's frame t
instead: the bound, what the same matcher finds when each object is drawn where it is.
The gap between the two is what the sample does not show.

    .venv/bin/python benchmarks/demo_model/match_flow.py --run .k4d/exp/run-cont \
        --data .k4d/demo-model/data/cascade --look sample

Rollouts are read in name order: the first `--train` train the matcher, the last `--test`
score it. `moving`: pixels off the robot whose true flow is over 1 px. Prints the error
every `--every` steps and one RESULT line (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from k4d_model.cascade import FLOW_SCALE, POINT_GAIN, FlowMatcher, matcher_looks
from k4d_trainer.cascade_stage import (
    ROLLOUTS_FOLDER,
    CascadeExample,
    read_rollout,
    rollout_example,
    with_flow,
)
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import CascadeSection, DataSection
from k4d_trainer.data import open_source
from k4d_trainer.runs import RunDir


def looks(example: CascadeExample, look: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame 0's look and frame t's, as the refiner's matcher reads them (`sample`), or
    with frame t's colour and depth-known points from the ground truth (`truth`)."""
    first, current = matcher_looks(example.x)
    if look == "truth":
        image, points = example.x[:, :3], example.x[:, 9:12]
        moved = points + example.known * example.points / POINT_GAIN
        current = torch.cat([image + example.colour, moved], dim=1)
    return first, current


def moving_error(matcher: FlowMatcher, examples: list[CascadeExample], look: str
                 ) -> tuple[float, float, int]:
    """Mean end-point error (px) of the matcher and of no flow on moving pixels, and their
    count."""
    error = still = count = 0.0
    with torch.no_grad():
        for example in examples:
            flow = matcher(*looks(example, look))[0]
            truth = example.flow * FLOW_SCALE
            norm = truth.norm(dim=1, keepdim=True)
            moving = example.flow_known * (norm > 1.0)
            error += float((moving * (flow - truth).norm(dim=1, keepdim=True)).sum())
            still += float((moving * norm).sum())
            count += float(moving.sum())
    count = max(count, 1.0)
    return error / count, still / count, int(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run whose cascade_rollouts/ to read")
    parser.add_argument("--data", required=True, help="the rollouts' episodes (cascade.data_uri)")
    parser.add_argument("--look", choices=("sample", "truth"), default="sample")
    parser.add_argument("--train", type=int, default=64, help="rollouts that train the matcher")
    parser.add_argument("--test", type=int, default=16, help="rollouts that score it")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8, help="frames a step")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--flow-pixels", choices=("objects", "all"), default="objects",
                        help="where the flow is a training target (cascade.flow_pixels)")
    parser.add_argument("--every", type=int, default=100, help="steps between scores")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--frames", type=int, default=13)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=144)
    args = parser.parse_args(argv)
    run, clip = RunDir(args.run), ClipSpec(args.frames, args.height, args.width)
    stored = run.fs.ls(f"{run.path}/{ROLLOUTS_FOLDER}", detail=False) if run.exists(
        ROLLOUTS_FOLDER) else []
    ids = sorted(Path(name).stem for name in stored if name.endswith(".npz"))
    if min(args.train, args.test, args.steps, args.batch) < 1 or args.train + args.test > len(ids):
        print(f"error: --train {args.train} + --test {args.test} rollouts (each >= 1, and "
              f"--steps, --batch >= 1) from the {len(ids)} stored in {args.run}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dataset = open_source(DataSection(uri=args.data), None)

    def examples(chosen: list[str], pixels: str) -> list[CascadeExample]:
        section = CascadeSection(warp=True, flow_pixels=pixels)
        return [rollout_example(with_flow(read_rollout(run, e), dataset, e, clip, section))
                for e in chosen]

    started = time.perf_counter()
    train = examples(ids[:args.train], args.flow_pixels)
    test = examples(ids[-args.test:], "all")
    frames = [(i, t) for i, example in enumerate(train) for t in range(example.x.shape[0])]
    matcher = FlowMatcher(args.features)
    optimizer = torch.optim.AdamW(matcher.parameters(), lr=args.lr, weight_decay=1e-4)
    error, still, moving = moving_error(matcher, test, args.look)
    print(f"step 0: moving pixels {error:.1f} px off (no flow {still:.1f})", flush=True)
    for step in range(1, args.steps + 1):
        picks = [frames[p] for p in torch.randint(0, len(frames), (args.batch,)).tolist()]
        batch = CascadeExample.gather(train, picks)
        flow = matcher(*looks(batch, args.look))[0] / FLOW_SCALE
        known = batch.flow_known
        loss = (known * (flow - batch.flow).abs()).sum() / (2.0 * known.sum().clamp_min(1.0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.every == 0 or step == args.steps:
            error, still, moving = moving_error(matcher, test, args.look)
            print(f"step {step}: moving pixels {error:.1f} px off (no flow {still:.1f}), "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    print("RESULT " + json.dumps({
        "look": args.look, "train_rollouts": args.train, "test_rollouts": args.test,
        "steps": args.steps, "moving_pixels": moving, "moving_flow_error_px": round(error, 2),
        "moving_no_flow_error_px": round(still, 2), "seconds": round(time.perf_counter() - started)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
