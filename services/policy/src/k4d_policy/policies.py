"""The policy interface and the built-in reference policies of graded skill.

`Policy` is what the evaluation loop talks to: `reset(context)` once per episode, then
`act(observation) -> (chunk_length, J)` joint positions (the actions document's
`joint_position` steps, docs/kinematics.md). The same interface wraps an in-process object
or a PolicyService at a gRPC address (`k4d_policy.remote`), and the loop never knows which.

The reference policies are the data engine's scripted tasks (pick, push, stack) made
closed-loop: each `act` reads the objects it needs from the observation (`perception`:
colour + pointmap, the camera pose to the base frame), re-plans the keyframes of the
remaining task from those estimates and solves IK from the current joints. Their grade is
set by two knobs, as the data engine makes its failures: Gaussian 6-DoF noise on the
end-effector pose (drawn once per episode) and near misses (the goal displaced just beyond
the judge's tolerance, with some probability).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from k4d.errors import InvalidArgument, NotFound
from k4d_tabletop.tasks import PICK_TOLERANCE_M, PUSH_DIRECTIONS, PUSH_DISTANCE_M, tcp_pose

from k4d_policy import perception


@dataclass
class Observation:
    """rgb (H, W, 3) uint8; pointmap (H, W, 3) float32 camera frame, metres (0 = no point);
    joints (J,) float64; step: frame index in the episode."""

    rgb: np.ndarray
    pointmap: np.ndarray
    joints: np.ndarray
    step: int


@dataclass
class EpisodeContext:
    """What Reset tells a policy. camera: k4d.camera.Camera (T_cam_from_world, world = base)."""

    episode_id: str
    task: str
    task_kind: str
    robot: str
    joint_names: list[str]
    camera: object
    dt_s: float
    chunk_length: int
    horizon: int
    observation: Observation
    seed: int = 0


@runtime_checkable
class Policy(Protocol):
    name: str

    def reset(self, context: EpisodeContext) -> None: ...

    def act(self, observation: Observation) -> np.ndarray: ...

    def close(self) -> None: ...


# --- the reference policies -------------------------------------------------------------

GRASP_OPENING = 0.25  # commanded opening when closed on an object (fingers meet it first)
PUSH_HALF_WIDTH_M = 0.028
PUSH_OPENING = 0.45  # a 3.6 cm gap between the fingers: narrower than every pushed object  # the pushed objects' largest half width (boxes, cylinders)
LIFT_Z_M = 0.2


@dataclass(frozen=True)
class Skill:
    """position_noise_m / rotation_noise_rad: sigma of the per-episode 6-DoF end-effector
    offset; near_miss: probability of aiming just beyond the judge's tolerance."""

    position_noise_m: float = 0.0
    rotation_noise_rad: float = 0.0
    near_miss: float = 0.0


BUILTIN_POLICIES: dict[str, tuple[Skill, str]] = {
    "expert": (Skill(), "the scripted task, no noise"),
    "noisy-1cm": (Skill(0.01, 0.05), "6-DoF end-effector noise, 1 cm / 0.05 rad"),
    "noisy-2cm": (Skill(0.02, 0.10), "6-DoF end-effector noise, 2 cm / 0.10 rad"),
    "noisy-4cm": (Skill(0.04, 0.20), "6-DoF end-effector noise, 4 cm / 0.20 rad"),
    "near-miss-50": (Skill(near_miss=0.5), "aims just beyond the goal's tolerance half of the time"),
    "clumsy": (Skill(0.02, 0.10, 0.5), "2 cm / 0.10 rad noise and near misses half of the time"),
}


def builtin_names() -> list[str]:
    return list(BUILTIN_POLICIES)


def make_policy(name: str) -> ReferencePolicy:
    if name not in BUILTIN_POLICIES:
        raise NotFound(f"unknown policy {name!r}; built-in policies: {', '.join(BUILTIN_POLICIES)}")
    return ReferencePolicy(name, BUILTIN_POLICIES[name][0])


@dataclass
class _Estimates:
    obj: perception.Seen | None = None    # the object acted on
    goal: perception.Seen | None = None   # pick: the marker; stack: the base object
    fixed_until_s: float = 1.5            # the object's estimate is kept from here on (reached)


@dataclass
class _Episode:
    context: EpisodeContext
    robot: object
    tcp_link: str
    gripper: int
    start_pose: np.ndarray
    colours: list[str]
    direction: np.ndarray | None
    noise: tuple[np.ndarray, np.ndarray]
    near_miss: tuple[bool, float, float]  # (on, angle, extra reach)
    estimates: _Estimates = field(default_factory=_Estimates)


class ReferencePolicy:
    """A scripted task policy with a Skill (see the module docstring)."""

    def __init__(self, name: str, skill: Skill):
        self.name, self.skill = name, skill
        self._episode: _Episode | None = None

    def reset(self, context: EpisodeContext) -> None:
        from k4d.robots.descriptions import load_robot
        from k4d.robots.fk import forward_kinematics

        robot = load_robot(context.robot)
        kind = context.task_kind or _kind_of(context.task)
        if kind not in ("pick", "push", "stack"):
            raise InvalidArgument.for_field("task_kind", f"reference policies do pick, push and stack, not {kind!r}")
        context.task_kind = kind
        tcp = "panda_hand_tcp" if "panda_hand_tcp" in robot.link_names else robot.ee_link
        gripper = robot.joint_names.index(robot.gripper_joints[0]) if robot.gripper_joints else -1
        start = forward_kinematics(robot, np.asarray(context.observation.joints, np.float64)[None])[0]
        # One draw per (seed, policy): the same episode in both worlds gets the same noise.
        rng = np.random.default_rng(np.random.SeedSequence([int(context.seed), zlib.crc32(self.name.encode())]))
        s = self.skill
        noise = (rng.normal(0.0, s.position_noise_m, 3), rng.normal(0.0, s.rotation_noise_rad, 3))
        near = (bool(rng.random() < s.near_miss), float(rng.uniform(0, 2 * math.pi)), float(rng.uniform(0.01, 0.025)))
        direction = None
        if kind == "push":
            words = context.task.lower().split()
            direction = next((np.array(d) for w, d in PUSH_DIRECTIONS.items() if w in words), np.array([1.0, 0.0]))
        self._episode = _Episode(context, robot, tcp, gripper, start[robot.link_index(tcp)],
                                 perception.colours_in(context.task), direction, noise, near)

    def act(self, observation: Observation) -> np.ndarray:
        ep = self._episode
        if ep is None:
            raise InvalidArgument.for_field("episode_id", "act before reset")
        ctx = ep.context
        self._observe(ep, observation)
        times = (observation.step + 1 + np.arange(ctx.chunk_length)) * ctx.dt_s
        xyz, yaw, opening = self._plan(ep, times)
        return self._joints(ep, observation.joints, xyz, yaw, opening, times)

    def close(self) -> None:
        self._episode = None

    # -- seeing ----------------------------------------------------------------------
    def _observe(self, ep: _Episode, obs: Observation) -> None:
        from k4d.robots.fk import forward_kinematics

        ctx, est = ep.context, ep.estimates
        t = obs.step * ctx.dt_s
        links = forward_kinematics(ep.robot, np.asarray(obs.joints, np.float64)[None])[0, :, :3, 3]
        T = ctx.camera.T_cam_from_world
        if ep.colours and (est.obj is None or t < est.fixed_until_s):
            seen = perception.find_object(obs.rgb, obs.pointmap, T, ep.colours[0], links)
            est.obj = seen or est.obj
        if ctx.task_kind in ("pick", "stack") and len(ep.colours) > 1:
            seen = perception.find_object(obs.rgb, obs.pointmap, T, ep.colours[1], links,
                                          flat=ctx.task_kind == "pick")
            est.goal = seen or est.goal

    # -- planning --------------------------------------------------------------------
    def _plan(self, ep: _Episode, times: np.ndarray):
        """TCP positions (N, 3), yaws (N,) and gripper openings (N,) at `times`."""
        ctx, est = ep.context, ep.estimates
        start = ep.start_pose[:3, 3]
        if est.obj is None:  # nothing to act on: hold still where the episode started
            n = len(times)
            return np.repeat(start[None], n, 0), np.zeros(n), np.ones(n)
        o, hz = est.obj.xy, est.obj.half_height
        if ctx.task_kind == "push":
            d = ep.direction
            contact = o - (PUSH_HALF_WIDTH_M + 0.03) * d
            distance = PUSH_DISTANCE_M * (0.42 if ep.near_miss[0] else 1.0)
            end = contact + (distance + 0.065) * d  # the object sits partly between the fingers
            z = min(max(hz, 0.015), 0.03)
            # Fingers spread across the push, half open: the object (wider than the gap)
            # rests against both, so a round object cannot slip out sideways.
            yaw = (math.atan2(d[1], d[0]) + math.pi / 2) % math.pi - math.pi / 2
            back = end - 0.03 * d
            g = PUSH_OPENING
            keys = [(0.0, start, 0.0, 1.0), (1.0, (*contact, 0.12), yaw, g), (1.5, (*contact, z), yaw, g),
                    (4.0, (*end, z), yaw, g), (4.5, (*back, z), yaw, g), (5.0, (*back, 0.15), yaw, g),
                    (6.0, (*back, 0.15), yaw, g)]
        else:
            if ctx.task_kind == "pick":
                goal = est.goal.xy if est.goal is not None else o
                place_z = hz + 0.008
                reach = PICK_TOLERANCE_M
            else:
                goal = est.goal.xy if est.goal is not None else o
                base_h = est.goal.half_height if est.goal is not None else hz
                place_z = 2 * base_h + hz + 0.01
                reach = 0.03 + 0.5 * PUSH_HALF_WIDTH_M
            on, angle, extra = ep.near_miss
            target = goal + ((reach + extra) * np.array([math.cos(angle), math.sin(angle)]) if on else 0.0)
            grasp_z = max(hz, 0.015)
            closed = GRASP_OPENING
            keys = [(0.0, start, 0.0, 1.0), (1.0, (*o, 0.15), 0.0, 1.0), (1.5, (*o, grasp_z), 0.0, 1.0),
                    (2.0, (*o, grasp_z), 0.0, closed), (2.5, (*o, LIFT_Z_M), 0.0, closed),
                    (3.5, (*target, LIFT_Z_M), 0.0, closed), (4.0, (*target, place_z), 0.0, closed),
                    (4.5, (*target, place_z), 0.0, 1.0), (5.0, (*target, LIFT_Z_M), 0.0, 1.0),
                    (6.0, (*target, LIFT_Z_M), 0.0, 1.0)]
        key_t = np.array([k[0] for k in keys])
        key_xyz = np.array([k[1] for k in keys], np.float64)
        t = np.clip(times, 0.0, key_t[-1])
        xyz = np.stack([np.interp(t, key_t, key_xyz[:, i]) for i in range(3)], -1)
        yaw = np.interp(t, key_t, [k[2] for k in keys])
        opening = np.interp(t, key_t, [k[3] for k in keys])
        return xyz, yaw, opening

    def _joints(self, ep: _Episode, q_now, xyz, yaw, opening, times) -> np.ndarray:
        from k4d_kinematics import solve_ik
        from scipy.spatial.transform import Rotation

        robot = ep.robot
        targets = np.stack([tcp_pose(p, y) for p, y in zip(xyz, yaw, strict=True)])
        dp, drot = ep.noise
        w = np.clip(times / 1.0, 0.0, 1.0)  # noise ramps in over the first segment, as datagen's
        for i, wi in enumerate(w):
            targets[i, :3, 3] += wi * dp
            targets[i, :3, :3] = (Rotation.from_rotvec(wi * drot) * Rotation.from_matrix(targets[i, :3, :3])).as_matrix()
        seed = np.clip(np.asarray(q_now, np.float64), robot.lower, robot.upper)
        ik = solve_ik(robot, targets, link=ep.tcp_link, seed=seed, mode="trajectory")
        q = np.clip(ik.joints, robot.lower, robot.upper)
        if ep.gripper >= 0:
            lo, hi = robot.lower[ep.gripper], robot.upper[ep.gripper]
            q[:, ep.gripper] = lo + np.clip(opening, 0, 1) * (hi - lo)
        return q


def _kind_of(task: str) -> str:
    words = task.lower().split()
    for kind, word in (("pick", "pick"), ("push", "push"), ("stack", "stack")):
        if word in words:
            return kind
    return ""
