"""A Gymnasium environment over the world model. Importing this module registers it:

    import gymnasium as gym
    env = gym.make("k4d_policy.envs:k4d/WorldModel-v0")   # the shipped demo scene, default model

Observation: {"rgb": (H, W, 3) uint8, "pointmap": (H, W, 3) float32 camera frame metres,
"joints": (J,) float64}. Action: the actions document's per-step vector of a
`joint_position` document (docs/kinematics.md): J joint positions (rad, m for the
gripper), within the robot's limits (values outside are clipped to them). Each step the
world model continues the rollout from its last generated frame with the robot moved to the
action (drawn exactly by kinematics) and shows the next frame. The episode lasts the
task's 6 s (the model's clip length - 1 steps); at its last step the automatic pointmap
judge gives the reward (1 success, 0 otherwise) and `truncated` is True (a time limit);
`terminated` stays False (no terminal states besides the time limit).

Options: scene="demo" (examples/demo_heldout, redrawn with the data engine's stream) or
scene="synthetic" with task, seed, index (a held-out scene of `k4d policy-eval`); model=
(default: the default model of `k4d simulate`); render_mode="rgb_array".
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from k4d_tabletop.tasks import DURATION_S

ENV_ID = "k4d/WorldModel-v0"
POINT_RANGE_M = 100.0  # pointmap bounds (metres; a generated point beyond is clipped)


@functools.lru_cache(maxsize=2)
def _model(ref: str):
    """One world model per process and reference (loading takes seconds)."""
    from k4d_policy.worlds import WorldModel

    return WorldModel(ref or None)


class WorldModelEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(self, scene: str = "demo", task: str = "pick", seed: int = 7000, index: int = 0,
                 model: str = "", robot: str = "panda", render_mode: str | None = None):
        from k4d_policy.scenes import demo_scenario, robot_bundle, scenario

        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if scene not in ("demo", "synthetic"):
            raise ValueError(f"scene must be 'demo' or 'synthetic', got {scene!r}")
        self.render_mode = render_mode
        self.model = _model(model)
        T, H, W = self.model.clip_shape
        self.horizon, self.dt_s = T - 1, DURATION_S / (T - 1)
        self.bundle = robot_bundle(robot)
        self.scenario = demo_scenario(H, W, robot) if scene == "demo" else scenario(seed, index, task, H, W, robot)
        robot_model = self.bundle.robot
        self.lower, self.upper = np.asarray(robot_model.lower, np.float64), np.asarray(robot_model.upper, np.float64)
        self.observation_space = spaces.Dict({
            "rgb": spaces.Box(0, 255, (H, W, 3), np.uint8),
            "pointmap": spaces.Box(-POINT_RANGE_M, POINT_RANGE_M, (H, W, 3), np.float32),
            "joints": spaces.Box(self.lower, self.upper, dtype=np.float64),
        })
        self.action_space = spaces.Box(self.lower, self.upper, dtype=np.float64)
        self._world = None
        self._last = None

    def _obs(self, obs) -> dict:
        self._last = obs
        return {"rgb": np.asarray(obs.rgb, np.uint8), "pointmap": np.clip(np.nan_to_num(np.asarray(obs.pointmap, np.float32)), -POINT_RANGE_M, POINT_RANGE_M),
                "joints": np.clip(np.asarray(obs.joints, np.float64), self.lower, self.upper)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        from k4d_policy.worlds import WorldModelWorld

        super().reset(seed=seed)
        # The sampler's seed: from reset(seed) when given, else drawn from the env's generator.
        sampler_seed = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        self._world = WorldModelWorld(self.scenario, self.bundle, self.model, self.dt_s, seed=sampler_seed)
        obs = self._world.reset()
        return self._obs(obs), {"task": self.scenario.plan.text, "task_kind": self.scenario.task, "step": 0}

    def step(self, action):
        if self._world is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(action, np.float64).reshape(-1)
        if a.shape != self.lower.shape or not np.isfinite(a).all():
            raise ValueError(f"action must be {self.lower.shape[0]} finite joint positions, got {np.shape(action)}")
        obs = self._world.step(np.clip(a, self.lower, self.upper)[None])
        truncated = obs.step >= self.horizon
        reward, info = 0.0, {"task": self.scenario.plan.text, "step": obs.step}
        if truncated:
            verdict = self._world.judge()
            reward = 1.0 if verdict.get("success") else 0.0
            info.update(success=verdict.get("success"), judge=verdict)
        return self._obs(obs), reward, False, truncated, info

    def render(self):
        if self.render_mode == "rgb_array" and self._last is not None:
            return np.asarray(self._last.rgb, np.uint8)
        return None


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="k4d_policy.envs:WorldModelEnv")
