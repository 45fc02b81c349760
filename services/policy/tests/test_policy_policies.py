"""The built-in reference policies: perception from the observation, graded skill in physics."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera


def _context(sc, bundle, seed=0, chunk=6):
    from k4d_policy.policies import EpisodeContext

    return EpisodeContext(sc.episode_id, sc.plan.text, sc.task, "panda", list(bundle.robot.joint_names),
                          Camera.from_dict(sc.camera_json), 0.5, chunk, 12, None, seed=seed)


def test_policy_list_prints_at_least_six_names(capsys):
    from k4d.cli.main import main

    assert main(["policy-eval", "--list-policies"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) >= 6 and len(set(names)) == len(names) and "expert" in names


def test_policy_perception_finds_objects_from_pixels_and_points(pick_scene, bundle):
    from k4d_policy import perception
    from k4d_policy.worlds import PhysicsWorld

    world = PhysicsWorld(pick_scene, bundle, 0.5)
    obs = world.reset()
    world.close()
    T = np.asarray(pick_scene.camera_json["T_cam_from_world"])
    colours = perception.colours_in(pick_scene.plan.text)
    seen = perception.find_object(obs.rgb, obs.pointmap, T, colours[0])
    true = pick_scene.scene.objects[0]
    assert seen is not None and np.linalg.norm(seen.xy - true.xy) < 0.02
    assert abs(seen.top_z - 2 * true.half_size[2]) < 0.01
    marker = perception.find_object(obs.rgb, obs.pointmap, T, colours[1], flat=True)
    assert marker is not None and np.linalg.norm(marker.xy - pick_scene.scene.marker_xy) < 0.04
    # Without the pixels there is nothing to see: the policy reads the observation only.
    assert perception.find_object(np.zeros_like(obs.rgb), obs.pointmap, T, colours[0]) is None


def test_policy_without_a_visible_object_holds_still(pick_scene, bundle):
    from k4d_policy.policies import Observation, make_policy

    policy = make_policy("expert")
    ctx = _context(pick_scene, bundle)
    blank = Observation(np.zeros((96, 144, 3), np.uint8), np.zeros((96, 144, 3), np.float32),
                        pick_scene.initial_joints, 0)
    ctx.observation = blank
    policy.reset(ctx)
    chunk = policy.act(blank)
    assert chunk.shape == (6, 8)
    assert np.abs(chunk[:, :7] - pick_scene.initial_joints[:7]).max() < 0.05


@pytest.mark.parametrize("task", ["pick", "stack"])
def test_policy_grades_expert_above_noisy_in_physics(task, bundle):
    """Physics (MuJoCo) outcomes: the expert succeeds where 4 cm / 0.2 rad noise fails."""
    from k4d_policy.policies import make_policy
    from k4d_policy.runner import run_episode
    from k4d_policy.scenes import scenario
    from k4d_policy.worlds import PhysicsWorld

    wins = {"expert": 0, "noisy-4cm": 0}
    for index in range(2):
        sc = scenario(7000, index, task, 96, 144)
        for name in wins:
            out = run_episode(make_policy(name), PhysicsWorld(sc, bundle, 0.5), _context(sc, bundle, seed=index))
            assert out.status == "ok" and out.acts == 2
            wins[name] += bool(out.success)
    assert wins["expert"] >= 1 and wins["expert"] > wins["noisy-4cm"], wins


def test_policy_same_seed_same_noise_different_policies_differ(pick_scene, bundle):
    from k4d_policy.policies import make_policy
    from k4d_policy.worlds import PhysicsWorld

    world = PhysicsWorld(pick_scene, bundle, 0.5)
    obs = world.reset()
    world.close()
    chunks = {}
    for name, seed in (("noisy-2cm", 1), ("noisy-2cm", 1), ("noisy-2cm", 2)):
        ctx = _context(pick_scene, bundle, seed=seed)
        ctx.observation = obs
        policy = make_policy(name)
        policy.reset(ctx)
        chunks.setdefault((name, seed), []).append(policy.act(obs))
    a, b = chunks[("noisy-2cm", 1)]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - chunks[("noisy-2cm", 2)][0]).max() > 1e-3
