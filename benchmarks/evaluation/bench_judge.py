"""Accuracy of the automatic success judge (k4d_tabletop.judge) on ground truth against the data
engine's labels, with and without the objects' known start positions (`start_xyz`, issue 21
round 8). A fresh synthetic set, 13x96x144 (the demo model's clip), never used in training.

    MUJOCO_GL=osmesa .venv/bin/python benchmarks/evaluation/bench_judge.py [--episodes 24]
        [--seed 5151] [--data DIR]

Prints one RESULT line (JSON): episodes judged right, abstentions, per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def judged(uri: str, with_start: bool) -> dict:
    from k4d.episodes import open_dataset
    from k4d_eval.inputs import load_episode
    from k4d_tabletop.judge import judge, start_positions

    dataset = open_dataset(uri)
    right = wrong = abstained = 0
    for episode_id in dataset.episode_ids:
        clip = load_episode(dataset, episode_id)
        starts = None
        if with_start and clip.object_poses is not None:
            starts = start_positions(clip.object_poses[0])
        verdict = judge(clip, clip.object_ids[0], clip.meta.get("task_kind", ""),
                        clip.T_cam_from_world[0], clip.meta.get("task", ""), start_xyz=starts)
        if verdict["success"] is None:
            abstained += 1
        elif verdict["success"] == clip.meta.get("success"):
            right += 1
        else:
            wrong += 1
    return {"right": right, "wrong": wrong, "abstained": abstained}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--seed", type=int, default=5151)
    parser.add_argument("--data", default="", help="an existing dataset instead of a fresh one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = args.data
        if not uri:
            uri = str(Path(tmp) / "episodes")
            k4d = Path(sys.executable).with_name("k4d")
            subprocess.run([str(k4d), "datagen", "synthetic", "--episodes", str(args.episodes),
                            "--seed", str(args.seed), "--task", "mix", "--failures", "0.25",
                            "--frames", "13", "--height", "96", "--width", "144",
                            "--out", uri], check=True, env={**os.environ, "MUJOCO_GL":
                                                            os.environ.get("MUJOCO_GL", "osmesa")},
                           stdout=subprocess.DEVNULL)
        result = {"data": args.data or f"seed {args.seed}, {args.episodes} episodes",
                  "visible_surface": judged(uri, False), "known_start": judged(uri, True)}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
