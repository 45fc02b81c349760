"""The Gymnasium environment: registered on import, gymnasium's own conformance check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]


def test_policy_env_passes_check_env_on_a_tiny_model(tiny_model_dir):
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    env = gym.make("k4d_policy.envs:k4d/WorldModel-v0", model=str(tiny_model_dir))
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert set(obs) == {"rgb", "pointmap", "joints"} and obs["rgb"].shape == (32, 48, 3)
    assert "pick" in info["task"]
    total, truncated, steps = 0.0, False, 0
    while not truncated:
        obs, reward, terminated, truncated, info = env.step(obs["joints"])
        total += reward
        steps += 1
        assert not terminated
    assert steps == 4 and info["success"] in (True, False, None) and total in (0.0, 1.0)
    with pytest.raises(ValueError):
        env.step(np.full(8, np.nan))
    env.close()


@pytest.mark.slow
def test_policy_env_makes_on_the_demo_scene_with_no_arguments(monkeypatch):
    """The shipped default model and demo scene (examples/demo_heldout)."""
    monkeypatch.delenv("K4D_DEFAULT_MODEL", raising=False)  # the session pins static-world
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env
    from PIL import Image

    env = gym.make("k4d_policy.envs:k4d/WorldModel-v0")
    obs, info = env.reset(seed=0)
    scene = np.asarray(Image.open(REPO / "examples/demo_heldout/scene.png").convert("RGB"))
    assert info["task"] == "pick up the orange cube and place it on the blue marker"
    assert np.abs(obs["rgb"].astype(int) - scene).mean() < 2.0
    check_env(env.unwrapped, skip_render_check=True)
