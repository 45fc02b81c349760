"""Write examples/panda_pick/actions.json: a Panda pick-and-place in end-effector poses.

The gripper (TCP, pointing down) starts at the Panda's home pose, moves above the red
cube of scene.png, descends, closes, lifts, carries the cube over the green plate,
lowers, opens and retreats. Poses are absolute, base frame, position + quaternion
(x, y, z, w); the kinematics stage solves IK per frame and resamples to 49 frames.

    python examples/make_actions.py [--out examples/panda_pick/actions.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HOME_JOINTS = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04]  # 7 arm joints + finger
DOWN_XYZW = [1.0, 0.0, 0.0, 0.0]  # TCP z axis pointing down (home orientation)
RED_CUBE = (0.55, 0.10)   # scene.png object positions (examples/make_scene.py)
PLATE = (0.40, 0.30)
# (position of the TCP in metres, gripper opening 0 closed .. 1 open, steps to the next)
WAYPOINTS = [
    ((0.307, 0.0, 0.487), 1.0, 4),           # home
    ((*RED_CUBE, 0.20), 1.0, 4),             # above the cube
    ((*RED_CUBE, 0.03), 1.0, 2),             # around it
    ((*RED_CUBE, 0.03), 0.0, 4),             # grasp
    ((*RED_CUBE, 0.25), 0.0, 4),             # lift
    ((*PLATE, 0.25), 0.0, 4),                # carry
    ((*PLATE, 0.07), 0.0, 2),                # lower
    ((*PLATE, 0.07), 1.0, 3),                # release
    ((*PLATE, 0.25), 1.0, 0),                # retreat
]


def pick_actions() -> dict:
    steps, gripper = [], []
    for (p0, g0, n), (p1, g1, _) in zip(WAYPOINTS, WAYPOINTS[1:], strict=False):
        for i in range(n):
            f = i / n
            steps.append([*(np.array(p0) + (np.array(p1) - np.array(p0)) * f), *DOWN_XYZW])
            gripper.append(g0 + (g1 - g0) * f)
    steps.append([*WAYPOINTS[-1][0], *DOWN_XYZW])
    gripper.append(WAYPOINTS[-1][1])
    return {"robot": "panda", "type": "ee_pose", "rotation": "quat_xyzw", "dt": 0.1,
            "link": "panda_hand_tcp", "initial_joints": HOME_JOINTS, "num_frames": 49,
            "steps": [[round(float(v), 6) for v in row] for row in steps],
            "gripper": [round(float(g), 6) for g in gripper],
            "gripper_open": 1.0, "gripper_closed": 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "panda_pick" / "actions.json"))
    args = parser.parse_args(argv)
    doc = pick_actions()
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({len(doc['steps'])} end-effector poses)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
