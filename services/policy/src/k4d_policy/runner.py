"""The closed loop: a policy acts every K frames on what a world shows it.

closed: Act at frames 0, K, 2K, ...; each returns K joint-position steps that the world
        executes before it observes again.
open:   one Act at frame 0 returns the whole horizon; the world executes it (the world
        model still generates it clip by clip), the policy never sees another frame.

Bad policy output never takes the run down: a chunk of the wrong shape, with NaN/inf or
outside the joint limits ends the episode as `malformed` with one line naming the policy
and the step; an unreachable or slow policy server ends it as `not_evaluated`
(`PolicyUnavailable`, naming the address). Neither counts as a policy failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from k4d_policy.policies import EpisodeContext, Policy

MODES = ("closed", "open")
LIMIT_TOLERANCE = 1e-6


class MalformedAction(Exception):
    def __init__(self, policy: str, step: int, reason: str):
        super().__init__(f"policy {policy!r} at step {step}: {reason}")
        self.policy, self.step, self.reason = policy, step, reason


class PolicyUnavailable(Exception):
    """The policy could not be reached or did not answer in time (message names the address)."""


@dataclass
class EpisodeOutcome:
    status: str                    # "ok" | "malformed" | "not_evaluated"
    judge: dict = field(default_factory=dict)
    error: str = ""
    acts: int = 0
    seconds: float = 0.0
    clip: dict | None = None

    @property
    def success(self) -> bool | None:
        return self.judge.get("success") if self.status == "ok" else None


def check_chunk(actions, *, policy: str, step: int, length: int, lower: np.ndarray,
                upper: np.ndarray) -> np.ndarray:
    """(length, J) finite joint positions within [lower, upper], else MalformedAction."""
    try:
        a = np.asarray(actions, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MalformedAction(policy, step, f"action chunk is not numeric ({exc})") from None
    J = len(lower)
    if a.ndim != 2 or a.shape != (length, J):
        raise MalformedAction(policy, step, f"action chunk has shape {tuple(a.shape)}, expected ({length}, {J}): "
                                            f"{length} steps of {J} joint positions")
    bad = ~np.isfinite(a)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        raise MalformedAction(policy, step, f"action chunk has NaN/inf (row {k}, joint {j})")
    out = (a < lower - LIMIT_TOLERANCE) | (a > upper + LIMIT_TOLERANCE)
    if out.any():
        k, j = np.argwhere(out)[0]
        raise MalformedAction(policy, step, f"joint {j} = {a[k, j]:.4g} at row {k} is outside its limits "
                                            f"[{lower[j]:.4g}, {upper[j]:.4g}]")
    return a


def run_episode(policy: Policy, world, context: EpisodeContext, *, mode: str = "closed",
                keep_clip: bool = False) -> EpisodeOutcome:
    """Reset `world` and `policy` and step them until the horizon; judge the result."""
    started = time.perf_counter()
    robot = world.bundle.robot
    horizon, chunk = context.horizon, (context.chunk_length if mode == "closed" else context.horizon)
    context.chunk_length = chunk
    acts = 0
    try:
        obs = world.reset()
        context.observation = obs
        policy.reset(context)
        while obs.step < horizon:
            actions = check_chunk(policy.act(obs), policy=policy.name, step=obs.step, length=chunk,
                                  lower=robot.lower, upper=robot.upper)
            acts += 1
            obs = world.step(actions[:horizon - obs.step])
        verdict = world.judge()
        clip = world.clip() if keep_clip else None
        return EpisodeOutcome("ok", verdict, acts=acts, seconds=time.perf_counter() - started, clip=clip)
    except MalformedAction as exc:
        return EpisodeOutcome("malformed", error=str(exc), acts=acts, seconds=time.perf_counter() - started)
    except PolicyUnavailable as exc:
        return EpisodeOutcome("not_evaluated", error=str(exc), acts=acts, seconds=time.perf_counter() - started)
    finally:
        world.close()
