"""Memory a refiner stage holds per episode: a whole clip (k4d_trainer.refiner_stage.RefinerClip)
against what a first-depth network alone on frame 0 keeps (FirstFrameClip), measured as the
growth of the process's peak resident memory while it loads `--episodes` episodes, with the
load time per episode. The two kinds alternate (A B A B), each in a fresh process, so load
on the shared machine falls on both. Prints one JSON line per run and one with the ratio of
the medians.

    .venv/bin/python benchmarks/trainer/bench_refiner_clip_memory.py \
        --data .k4d/demo-model/data/train [--episodes 300] [--repeats 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import subprocess
import sys
import time

KINDS = ("whole", "first-frame")


def measure(data: str, episodes: int, kind: str) -> dict:
    """One load in this process: MiB of peak resident memory and seconds per episode."""
    from k4d.episodes import open_dataset
    from k4d_trainer.clips import OBJECT_IDS, ClipSpec, read_clip
    from k4d_trainer.refiner_stage import FirstFrameClip, RefinerClip

    dataset = open_dataset(data)
    ids = list(dataset.episode_ids)[:episodes]
    make = FirstFrameClip if kind == "first-frame" else RefinerClip
    size = _clip_size(dataset, ids[0])
    clip = ClipSpec(*size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.perf_counter()
    held = [make(read_clip(dataset.open(eid), clip, (OBJECT_IDS,))) for eid in ids]
    seconds = (time.perf_counter() - start) / len(ids)
    gc.collect()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"kind": kind, "episodes": len(held), "mib_per_episode": round(grown / 1024 / len(ids), 3),
            "s_per_episode": round(seconds, 4), "clip": list(size)}


def _clip_size(dataset, eid: str) -> tuple[int, int, int]:
    meta = dataset.open(eid).meta
    return meta.frames, meta.height, meta.width


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a k4d episode dataset (k4d datagen's)")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # a child's own load
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.data, args.episodes, args.one)))
        return
    runs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.repeats):
        for kind in KINDS:  # a fresh process each: peak memory is per process
            out = subprocess.run([sys.executable, __file__, "--data", args.data, "--episodes",
                                  str(args.episodes), "--one", kind],
                                 check=True, capture_output=True, text=True).stdout
            line = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(line), flush=True)
            runs[kind].append(line["mib_per_episode"])
    whole, first = (statistics.median(runs[kind]) for kind in KINDS)
    print(json.dumps({"whole_mib_per_episode": whole, "first_frame_mib_per_episode": first,
                      "ratio": round(whole / first, 2)}))


if __name__ == "__main__":
    main()
