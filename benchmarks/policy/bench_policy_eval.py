"""Policy evaluation figures (issue 18): the cost of `k4d policy-eval` per episode and world,
and the agreement of world-model with physics success, for a configuration given on the
command line (default: a small one, so that `make bench` stays short).

Anchor measured in the same run: the physics world's seconds per episode (MuJoCo steps and
renders, the part that is not the world model), against the world model's.

    MUJOCO_GL=osmesa .venv/bin/python benchmarks/policy/bench_policy_eval.py \
        [--policies expert,noisy-4cm] [--tasks pick] [--scenes 1] [--seed 7000] [--chunk 6] \
        [--mode closed] [--workers 2] [--model M] [--out DIR] [--json out.json]

The full evaluation of docs/benchmarks.md: --policies with all six built-ins, --tasks
pick,push,stack --scenes 16 --workers 2 (resumable: rerun the same command to continue).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "osmesa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="expert,noisy-4cm")
    parser.add_argument("--tasks", default="pick")
    parser.add_argument("--scenes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7000)
    parser.add_argument("--chunk", type=int, default=6)
    parser.add_argument("--mode", default="closed", choices=("closed", "open"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    from k4d_policy.cli import parse_policies
    from k4d_policy.evaluate import EvalConfig, evaluate, plan_clip
    from k4d_policy.report import write_report

    out = args.out or tempfile.mkdtemp(prefix="k4d-bench-policy-")
    cfg = plan_clip(EvalConfig(policies=parse_policies(args.policies), tasks=args.tasks.split(","),
                               scenes=args.scenes, seed=args.seed, out=out, model=args.model, mode=args.mode,
                               chunk=args.chunk, workers=args.workers, progress=False))
    load_start = [round(v, 2) for v in os.getloadavg()]
    started = time.perf_counter()
    ran = evaluate(cfg)
    report = write_report(cfg, recordings=False)
    wall = time.perf_counter() - started
    result = {
        "episodes_planned": report["episodes"]["planned"], "episodes_run": ran["ran"],
        "wall_s": round(wall, 1), "wall_s_per_episode": round(wall / max(ran["ran"], 1), 2),
        **report["timing"], "correlation": report["correlation"],
        "episode_agreement": report["episode_agreement"], "confusion": report["confusion"],
        "settings": report["settings"], "out": out, "load_average_start": load_start,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    result["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
