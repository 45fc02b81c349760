"""Where a released object ends up in height, against physics (issue 21, round 16: the
`grasp_release: settle` option). For rollouts with a measured frame 0 (RGB-D), where the
option runs.

    python benchmarks/demo_model/ablate_fidelity.py --depth --model models/demo-small/weights \
        --data .k4d/splits/val7031g --run .k4d/val7031/eval --out OUT \
        --variant 'r15={...round 15 extra}' --variant 'r16={..., "grasp_release": "settle"}'
    python benchmarks/demo_model/release_heights.py --data .k4d/splits/val7031g \
        --run "round 15=OUT/r15/predictions" --run "round 16=OUT/r16/predictions" \
        --episodes ep000029 ep000010 ep000019 --picture models/demo-small/eval/round16.png

Over every pick and stack episode whose object physics lifted more than 5 cm (the data
engine's object poses), the final height change of object 1 as the judge reads it (its track
of the object's colour and points, as a displacement from frame 0: k4d.judge.object_track)
against the true one. Prints one JSON line per run: objects, the mean and median absolute
error in metres. The picture: per episode, the true height over the frames and each run's.
A prediction directory holds <episode>/pointmap.npz with `rgb` and `pointmap` (the harness's
predictions/ layout).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

LIFTED_M = 0.05  # the judge's LIFT_M: physics lifted the object


def _prediction(path: Path, robot_mask: np.ndarray):
    """The judge's view (k4d.judge.JudgeClip) of a prediction's pointmap.npz, with the true
    robot mask."""
    from k4d.judge import JudgeClip

    arrays = np.load(path)
    pointmap = arrays["pointmap"]
    return JudgeClip(arrays["rgb"], pointmap, pointmap[..., 2] > 0, robot_mask)


def heights(dataset, episode_id: str, runs: dict[str, Path]) -> tuple[np.ndarray, dict] | None:
    """(true height of object 1 per frame (T,), {run: judged height per frame (T,)}), metres
    in the base frame; None when the episode is no pick or stack."""
    from k4d.judge import object_track
    from k4d_eval.inputs import load_episode

    if dataset.open(episode_id).meta.task_kind not in ("pick", "stack"):
        return None
    truth = load_episode(dataset, episode_id)
    T = np.asarray(truth.T_cam_from_world)
    T_world_from_cam0 = np.linalg.inv(T[0] if T.ndim == 3 else T)
    poses = np.asarray(truth.object_poses)
    true_z = poses[:, 0, 2, 3] if poses.ndim == 4 else poses[:, 0, 2]
    start = truth.object_ids[0] == 1
    judged = {}
    for name, root in runs.items():
        clip = _prediction(root / episode_id / "pointmap.npz", truth.robot_mask)
        track = object_track(clip, None, start, T_world_from_cam0)
        judged[name] = track[:, 2] - track[0, 2] + true_z[0]  # a displacement, as the judge
    return true_z, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the dataset the predictions are of")
    parser.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                        help="a prediction directory (repeat)")
    parser.add_argument("--episodes", nargs="*", default=[], help="episodes to draw")
    parser.add_argument("--picture", type=Path)
    args = parser.parse_args()
    from k4d.episodes import open_dataset

    runs = dict(run.split("=", 1) for run in args.run)
    runs = {name: Path(root) for name, root in runs.items()}
    dataset = open_dataset(args.data)
    errors = {name: [] for name in runs}
    drawn = {}
    first_run = next(iter(runs.values()))
    for episode_id in sorted(p.name for p in first_run.iterdir() if p.is_dir()):
        found = heights(dataset, episode_id, runs)
        if found is None:
            continue
        true_z, judged = found
        if episode_id in args.episodes:
            drawn[episode_id] = found
        if true_z.max() - true_z[0] <= LIFTED_M:
            continue
        for name, z in judged.items():
            if not np.isnan(z[-1]):
                errors[name].append(abs((z[-1] - z[0]) - (true_z[-1] - true_z[0])))
    for name, values in errors.items():
        print(json.dumps({"run": name, "objects": len(values),
                          "final_height_error_mean_m": round(float(np.mean(values)), 4),
                          "final_height_error_median_m": round(float(np.median(values)), 4)}))
    if args.picture and drawn:
        _draw(drawn, args.episodes, dataset, args.picture)


def _draw(drawn: dict, order: list[str], dataset, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes = [e for e in order if e in drawn]
    fig, axes = plt.subplots(1, len(episodes), figsize=(4.2 * len(episodes), 3.4), sharey=True,
                             squeeze=False)
    styles = ["r--", "b-", "g-.", "m:"]
    for ax, episode_id in zip(axes[0], episodes, strict=True):
        true_z, judged = drawn[episode_id]
        ax.plot(true_z * 100, "k-", lw=2.5, label="physics (object pose)")
        for style, (name, z) in zip(styles, judged.items(), strict=False):
            ax.plot(z * 100, style, marker="o", ms=3, label=name)
        meta = dataset.open(episode_id).meta
        ax.set_title(f"{episode_id}: {meta.task[:44]}", fontsize=8)
        ax.set_xlabel("frame")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("object 1 height (cm, base frame)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("object 1's height as the judge reads it, against physics", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
