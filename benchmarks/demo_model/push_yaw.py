"""Why pushes fail in physics with no planned failure (issue 21, round 19): a pushed cube's
yaw against how far it went, from the data engine's object poses (no model involved).

    python benchmarks/demo_model/push_yaw.py --data .k4d/demo-model/data/train-clip \
        .k4d/splits/heldout9013 .k4d/splits/s7031 ... --picture models/demo-small/eval/round19_push_yaw.png

Over every push episode without a planned failure (`source.failure == "none"`): the pushed
object's yaw at frame 0, folded to 0-45 deg from the push axis (0: a face square to the push,
45: a corner first; a cube's faces repeat every 90 deg), its displacement along the push
(towards the goal) and sideways by the last frame, the data engine's success, and its width
in pixels in frame 0 (object id 1 of `object_ids`, the task's object). Prints one JSON line
per yaw band (cubes) and one for cylinders; the picture shows every cube.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

BANDS_DEG = ((0.0, 17.0), (17.0, 22.0), (22.0, 35.0), (35.0, 45.01))
TARGET_ID = 1  # object_ids (k4d.tabletop.physics.object_id_image): -1 background, 0 robot,
# k >= 1 object k; object 1 is the task's


def folded_yaw_deg(quat_xyzw: np.ndarray) -> float:
    """A box's yaw about the vertical (z) from the nearest of its four face normals, 0-45
    deg (a box pose upright on the table: its quaternion turns about z only)."""
    from k4d.rotations import quat_to_matrix

    R = quat_to_matrix(quat_xyzw)
    yaw = np.degrees(np.arctan2(R[1, 0], R[0, 0]))
    return float(abs(((yaw + 45.0) % 90.0) - 45.0))


def push_rows(data: str) -> list[dict]:
    """One row per unplanned push of a dataset (module docstring)."""
    from k4d.episodes import open_dataset

    dataset = open_dataset(data)
    rows = []
    for episode_id in dataset.episode_ids:
        meta = dataset.meta(episode_id)
        if meta.task_kind != "push" or (meta.source or {}).get("failure") != "none":
            continue
        episode = dataset.open(episode_id)
        poses = episode.read("object_poses")[:, 0]  # (T, 7) the task's object, world frame
        goal = np.asarray(meta.source["goal_xy"], np.float64)
        direction = goal - poses[0, :2]
        direction /= np.linalg.norm(direction)
        moved = poses[-1, :2] - poses[0, :2]
        target = episode.read("object_ids")[0] == TARGET_ID
        columns = np.flatnonzero(target.any(axis=0))
        rows.append({
            "data": data, "episode_id": episode_id, "task": meta.task,
            "shape": "cube" if meta.object_names[0].endswith("cube") else "cylinder",
            "yaw_deg": folded_yaw_deg(poses[0, 3:]), "success": bool(meta.success),
            "along_m": float(moved @ direction),
            "sideways_m": float(abs(direction[0] * moved[1] - direction[1] * moved[0])),
            "width_px": int(columns[-1] - columns[0] + 1) if len(columns) else 0,
        })
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Failures per yaw band of the cubes, and of the cylinders."""
    cubes = [r for r in rows if r["shape"] == "cube"]
    out = []
    for low, high in BANDS_DEG:
        band = [r for r in cubes if low <= r["yaw_deg"] < high]
        out.append({"shape": "cube", "yaw_deg": [low, min(high, 45.0)], "pushes": len(band),
                    "failed": sum(not r["success"] for r in band)})
    cylinders = [r for r in rows if r["shape"] == "cylinder"]
    out.append({"shape": "cylinder", "pushes": len(cylinders),
                "failed": sum(not r["success"] for r in cylinders)})
    widths = [r["width_px"] for r in cubes]
    if widths:
        out.append({"shape": "cube", "width_px_p10_p50_p90": np.percentile(widths, [10, 50, 90]).tolist()})
    return out


def picture(rows: list[dict], path: Path) -> None:
    import matplotlib
    from k4d.judge import PUSH_M

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cubes = [r for r in rows if r["shape"] == "cube"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for success, colour, label in ((True, "tab:green", "succeeded"), (False, "tab:red", "failed")):
        group = [r for r in cubes if r["success"] == success]
        yaw = [r["yaw_deg"] for r in group]
        axes[0].scatter(yaw, [100 * r["along_m"] for r in group], c=colour, s=18,
                        label=f"{label} ({len(group)})")
        axes[1].scatter(yaw, [100 * r["sideways_m"] for r in group], c=colour, s=18)
    for ax in axes:
        ax.axvspan(22, 35, color="0.9", zorder=-1)
        ax.set_xlabel("cube's yaw from the push axis (deg): 0 a face, 45 a corner")
    axes[0].axhline(100 * PUSH_M, ls="--", c="k", lw=0.8)
    axes[0].set_ylabel(f"moved along the push (cm); the judge needs {100 * PUSH_M:.1f}")
    axes[1].set_ylabel("moved sideways (cm)")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"{len(cubes)} unplanned cube pushes: physics (MuJoCo) outcome against the "
                 "cube's yaw at frame 0", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="k4d datagen datasets")
    parser.add_argument("--picture", type=Path)
    args = parser.parse_args()
    rows = [row for data in args.data for row in push_rows(data)]
    for line in summary(rows):
        print(json.dumps(line))
    if args.picture:
        picture(rows, args.picture)


if __name__ == "__main__":
    main()
