"""Scripted tasks (pick-and-place, push, stack): object layouts, end-effector plans, the
Robo4D-style failures, and success judged from object poses.

A plan is a list of keyframes (time, TCP position, yaw, gripper opening in [0, 1]) for a
top-down TCP; `dense_targets` samples it at the control rate. Failures perturb the
6-DoF end-effector pose only (the gripper schedule is untouched), as Robo4D-200k made
its LIBERO failures; near misses perturb the task's goal just beyond its tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from k4d.errors import InvalidArgument
from scipy.spatial.transform import Rotation

TASKS = ("pick", "push", "stack")
TASK_CHOICES = (*TASKS, "mix")
DURATION_S = 6.0
CONTROL_HZ = 20.0
HOME_JOINTS = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.04)  # Panda ready pose
PICK_TOLERANCE_M = 0.04
PUSH_DISTANCE_M = 0.12
# Robo4D-style failure noise on the 6-DoF end-effector pose.
NOISE_POSITION_SIGMA_M = 0.03
NOISE_ROTATION_SIGMA_RAD = 0.15
PUSH_DIRECTIONS = {"left": (0.0, 1.0), "right": (0.0, -1.0), "forward": (1.0, 0.0),
                   "backward": (-1.0, 0.0)}


def check_task(task: str) -> str:
    if task not in TASK_CHOICES:
        raise InvalidArgument.for_field("task", f"unknown task {task!r}; choose one of {list(TASK_CHOICES)}")
    return task


@dataclass
class Layout:
    objects: list[tuple[tuple[float, float], str | None]]  # (xy, shape or None = any)
    marker_xy: tuple[float, float] | None
    push_direction: str | None = None


def _free_xy(rng, taken, min_dist, x_range=(0.38, 0.62), y_range=(-0.22, 0.22)):
    for _ in range(200):
        xy = (float(rng.uniform(*x_range)), float(rng.uniform(*y_range)))
        if all(math.dist(xy, t) >= min_dist for t in taken):
            return xy
    raise RuntimeError("no free table position")  # practically unreachable with these ranges


def sample_layout(rng: np.random.Generator, task: str) -> Layout:
    if task == "pick":
        a = _free_xy(rng, [], 0)
        marker = _free_xy(rng, [a], 0.16)
        distractor = _free_xy(rng, [a, marker], 0.13)
        return Layout([(a, ("box", "cylinder")[int(rng.integers(2))]), (distractor, None)], marker)
    if task == "push":
        direction = list(PUSH_DIRECTIONS)[int(rng.integers(len(PUSH_DIRECTIONS)))]
        d = np.array(PUSH_DIRECTIONS[direction])
        a = _free_xy(rng, [], 0, x_range=(0.45 - 0.08 * d[0], 0.52 - 0.08 * d[0]),
                     y_range=(-0.12 - 0.06 * d[1], 0.12 - 0.06 * d[1]))
        end = tuple(np.array(a) + PUSH_DISTANCE_M * d)
        behind = tuple(np.array(a) - 0.08 * d)
        distractor = _free_xy(rng, [a, end, behind], 0.14)
        return Layout([(a, ("box", "cylinder")[int(rng.integers(2))]), (distractor, None)], None, direction)
    if task == "stack":
        top = _free_xy(rng, [], 0)
        base = _free_xy(rng, [top], 0.15)
        distractor = _free_xy(rng, [top, base], 0.13)
        return Layout([(top, "box"), (base, "box"), (distractor, None)], None)
    raise InvalidArgument.for_field("task", f"unknown task {task!r}")


@dataclass
class Keyframe:
    t: float
    xyz: tuple[float, float, float]
    yaw: float
    opening: float  # 1 = open, 0 = closed (fingers together)


@dataclass
class Plan:
    task: str
    text: str
    keyframes: list[Keyframe]
    goal: dict  # what the judge checks (positions in metres)


def _grasp_yaw(yaw: float) -> float:
    """The object's yaw folded into [-pi/4, pi/4] (boxes and cylinders are 4-fold symmetric)."""
    return (yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4


def _closed_opening(half_width: float, finger_travel_m: float) -> float:
    """Gripper opening that squeezes an object of this half width by 4 mm per finger."""
    return float(np.clip((half_width - 0.004) / finger_travel_m, 0.0, 1.0))


def plan_task(scene, task: str, rng: np.random.Generator, near_miss: bool,
              finger_travel_m: float, start_xyz) -> Plan:
    """Keyframes of the scripted task on `scene` (its first object is the one acted on)."""
    obj = scene.objects[0]
    hx, hy, hz = obj.half_size
    ox, oy = obj.xy
    yaw = _grasp_yaw(obj.yaw)
    s = tuple(float(v) for v in start_xyz)
    if task in ("pick", "stack"):
        if task == "pick":
            goal_xy = np.array(scene.marker_xy, float)
            place_z = hz + 0.008
            text = f"pick up the {obj.label} and place it on the {scene.marker_colour} marker"
        else:
            base = scene.objects[1]
            goal_xy = np.array(base.xy, float)
            place_z = 2 * base.half_size[2] + hz + 0.01
            text = f"stack the {obj.label} on the {base.label}"
        target_xy = goal_xy.copy()
        if near_miss:  # just beyond the judge's tolerance
            angle = rng.uniform(0, 2 * math.pi)
            reach = (PICK_TOLERANCE_M if task == "pick" else scene.objects[1].half_size[0] + hx * 0.5)
            target_xy = goal_xy + (reach + rng.uniform(0.01, 0.025)) * np.array([math.cos(angle), math.sin(angle)])
        grasp_z = max(hz, 0.015)
        closed = _closed_opening(hy, finger_travel_m)
        k = [Keyframe(0.0, s, 0.0, 1.0),
             Keyframe(1.0, (ox, oy, 0.15), yaw, 1.0),
             Keyframe(1.8, (ox, oy, grasp_z), yaw, 1.0),
             Keyframe(2.3, (ox, oy, grasp_z), yaw, closed),
             Keyframe(2.9, (ox, oy, 0.2), yaw, closed),
             Keyframe(3.9, (*target_xy, 0.2), yaw, closed),
             Keyframe(4.5, (*target_xy, place_z), yaw, closed),
             Keyframe(4.8, (*target_xy, place_z), yaw, 1.0),
             Keyframe(5.5, (*target_xy, 0.2), yaw, 1.0),
             Keyframe(DURATION_S, (*target_xy, 0.2), yaw, 1.0)]
        return Plan(task, text, k, {"xy": goal_xy.tolist()})
    if task == "push":
        direction = scene.extra["push_direction"]
        d = np.array(PUSH_DIRECTIONS[direction])
        start = np.array([ox, oy]) - (max(hx, hy) + 0.03) * d
        distance = PUSH_DISTANCE_M * (rng.uniform(0.35, 0.5) if near_miss else 1.0)
        end = start + (distance + 0.02) * d
        z = min(max(hz, 0.015), 0.03)
        push_yaw = math.atan2(d[1], d[0]) + math.pi / 2  # fingers side by side across the push
        push_yaw = (push_yaw + math.pi / 2) % math.pi - math.pi / 2
        k = [Keyframe(0.0, s, 0.0, 1.0),
             Keyframe(1.0, (*start, 0.12), push_yaw, 0.0),
             Keyframe(1.8, (*start, z), push_yaw, 0.0),
             Keyframe(4.2, (*end, z), push_yaw, 0.0),
             Keyframe(4.6, (*(end - 0.03 * d), z), push_yaw, 0.0),
             Keyframe(5.4, (*(end - 0.03 * d), 0.15), push_yaw, 0.0),
             Keyframe(DURATION_S, (*(end - 0.03 * d), 0.15), push_yaw, 0.0)]
        goal = (np.array([ox, oy]) + PUSH_DISTANCE_M * d).tolist()
        return Plan(task, f"push the {obj.label} {direction}", k,
                    {"xy": goal, "start_xy": [ox, oy], "direction": d.tolist()})
    raise InvalidArgument.for_field("task", f"unknown task {task!r}")


def tcp_pose(xyz, yaw: float) -> np.ndarray:
    """(4, 4) top-down TCP pose: z down, fingers opening along the TCP y axis."""
    c, s = math.cos(yaw), math.sin(yaw)
    T = np.eye(4)
    T[:3, :3] = np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])
    T[:3, 3] = xyz
    return T


def dense_targets(plan: Plan, start_pose: np.ndarray, noise: tuple[np.ndarray, np.ndarray] | None):
    """-> (times (N,), TCP targets (N, 4, 4), opening (N,)) at CONTROL_HZ. The first
    segment blends from the start pose (orientation slerped); `noise` = (dp (3,), drotvec (3,))
    is ramped in over the first segment and then applied to every pose."""
    times = np.arange(0.0, DURATION_S + 1e-9, 1.0 / CONTROL_HZ)
    key_t = np.array([k.t for k in plan.keyframes])
    xyz = np.stack([np.interp(times, key_t, [k.xyz[i] for k in plan.keyframes]) for i in range(3)], -1)
    yaw = np.interp(times, key_t, [k.yaw for k in plan.keyframes])
    opening = np.interp(times, key_t, [k.opening for k in plan.keyframes])
    targets = np.stack([tcp_pose(p, y) for p, y in zip(xyz, yaw, strict=True)])
    first = times <= key_t[1]
    w = np.clip(times / key_t[1], 0.0, 1.0)
    R0 = Rotation.from_matrix(start_pose[:3, :3])
    for i in np.flatnonzero(first):
        R1 = Rotation.from_matrix(targets[i, :3, :3])
        delta = (R0.inv() * R1).as_rotvec()
        targets[i, :3, :3] = (R0 * Rotation.from_rotvec(w[i] * delta)).as_matrix()
    if noise is not None:
        dp, drot = noise
        for i, wi in enumerate(w):
            targets[i, :3, 3] += wi * dp
            targets[i, :3, :3] = (Rotation.from_rotvec(wi * drot) * Rotation.from_matrix(targets[i, :3, :3])).as_matrix()
    return times, targets, opening


def sample_noise(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return (rng.normal(0.0, NOISE_POSITION_SIGMA_M, 3), rng.normal(0.0, NOISE_ROTATION_SIGMA_RAD, 3))


def judge(plan: Plan, scene, object_poses: np.ndarray) -> tuple[bool, str]:
    """Success from object poses (T, K, 7) world xyz + quat xyzw; -> (success, how)."""
    first, last = object_poses[0], object_poses[-1]
    obj = scene.objects[0]
    hz = obj.half_size[2]
    p = last[0, :3]
    if plan.task == "pick":
        lifted = float(object_poses[:, 0, 2].max() - first[0, 2])
        err = float(np.linalg.norm(p[:2] - plan.goal["xy"]))
        resting = abs(p[2] - hz) < 0.012
        ok = lifted > 0.05 and err <= PICK_TOLERANCE_M and resting
        return ok, (f"pick: lifted > 5 cm ({lifted * 100:.1f} cm), final xy within {PICK_TOLERANCE_M * 100:.0f} cm "
                    f"of the marker ({err * 100:.1f} cm), resting on the table ({'yes' if resting else 'no'})")
    if plan.task == "push":
        d = np.array(plan.goal["direction"])
        moved = float((p[:2] - first[0, :2]) @ d)
        err = float(np.linalg.norm(p[:2] - plan.goal["xy"]))
        ok = moved >= 0.7 * PUSH_DISTANCE_M and err <= 0.05
        return ok, (f"push: moved {moved * 100:.1f} cm along the direction (>= {0.7 * PUSH_DISTANCE_M * 100:.1f}), "
                    f"final xy {err * 100:.1f} cm from the goal (<= 5 cm)")
    if plan.task == "stack":
        base = scene.objects[1]
        b = last[1, :3]
        xy_err = float(np.linalg.norm(p[:2] - b[:2]))
        want_z = b[2] + base.half_size[2] + hz
        z_err = float(abs(p[2] - want_z))
        base_moved = float(np.linalg.norm(b[:2] - first[1, :2]))
        ok = xy_err <= 0.6 * base.half_size[0] and z_err <= 0.012 and base_moved <= 0.03
        return ok, (f"stack: top xy {xy_err * 100:.1f} cm from the base centre (<= {0.6 * base.half_size[0] * 100:.1f}), "
                    f"height error {z_err * 100:.1f} cm (<= 1.2), base moved {base_moved * 100:.1f} cm (<= 3)")
    raise InvalidArgument.for_field("task", f"unknown task {plan.task!r}")
