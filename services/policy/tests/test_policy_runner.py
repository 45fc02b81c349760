"""The closed loop and its bad-input paths: malformed chunks end one episode with a line
naming the policy and the step; they never raise."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera


def _context(sc, bundle, chunk=6):
    from k4d_policy.policies import EpisodeContext

    return EpisodeContext(sc.episode_id, sc.plan.text, sc.task, "panda", list(bundle.robot.joint_names),
                          Camera.from_dict(sc.camera_json), 0.5, chunk, 12, None, seed=3)


class ScriptedBad:
    """Acts well at frame 0, then returns `second` (a malformed chunk)."""

    name = "scripted-bad"

    def __init__(self, second):
        self.second, self.calls = second, 0

    def reset(self, context):
        self.chunk, self.q0 = context.chunk_length, np.asarray(context.observation.joints)

    def act(self, observation):
        self.calls += 1
        if self.calls == 1:
            return np.repeat(self.q0[None], self.chunk, 0)
        return self.second(self.q0, self.chunk)

    def close(self):
        pass


@pytest.mark.parametrize("bad, words", [
    (lambda q, n: np.repeat(q[None], n - 1, 0), "shape (5, 8), expected (6, 8)"),
    (lambda q, n: np.repeat(q[None, :7], n, 0), "shape (6, 7)"),
    (lambda q, n: np.where(np.arange(8) == 2, np.nan, np.repeat(q[None], n, 0)), "NaN"),
    (lambda q, n: np.repeat(q[None], n, 0) + np.eye(8)[3] * 5.0, "outside its limits"),
    (lambda q, n: "left", "not numeric"),
])
def test_policy_malformed_chunk_is_one_line_naming_policy_and_step(bad, words, pick_scene, bundle):
    from k4d_policy.runner import run_episode
    from k4d_policy.worlds import PhysicsWorld

    policy = ScriptedBad(bad)
    out = run_episode(policy, PhysicsWorld(pick_scene, bundle, 0.5), _context(pick_scene, bundle))
    assert out.status == "malformed" and out.success is None
    assert "'scripted-bad' at step 6" in out.error and words in out.error
    assert "\n" not in out.error


def test_policy_closed_and_open_loop_act_counts(pick_scene, bundle):
    from k4d_policy.policies import make_policy
    from k4d_policy.runner import run_episode
    from k4d_policy.worlds import PhysicsWorld

    closed = run_episode(make_policy("expert"), PhysicsWorld(pick_scene, bundle, 0.5),
                         _context(pick_scene, bundle, chunk=3), keep_clip=True)
    opened = run_episode(make_policy("expert"), PhysicsWorld(pick_scene, bundle, 0.5),
                         _context(pick_scene, bundle, chunk=3), mode="open")
    assert (closed.status, closed.acts, opened.status, opened.acts) == ("ok", 4, "ok", 1)
    assert closed.clip["rgb"].shape == (13, 96, 144, 3)
    assert closed.judge["rule"].startswith("pick:")


def test_policy_physics_world_moves_the_robot_exactly_by_the_actions(pick_scene, bundle):
    from k4d_policy.worlds import PhysicsWorld

    world = PhysicsWorld(pick_scene, bundle, 0.5)
    world.reset()
    q = np.array(pick_scene.initial_joints)
    target = q + np.r_[0.1, -0.1, 0, 0.1, 0, 0, 0, -0.02]
    obs = world.step(np.stack([q + 0.5 * (target - q), target]))
    world.close()
    assert obs.step == 2
    np.testing.assert_allclose(obs.joints, target)


class _RecordingModel:
    """Stands in for the world model in a unit test of the world's bookkeeping only: it
    returns the given frame repeated and reports the contacts it is told to; the real
    model's chunks run in test_policy_eval and test_policy_envs."""

    clip_shape = (5, 96, 144)

    def __init__(self, contacts):
        self.contacts, self.tools, self.images, self.seeds = list(contacts), [], [], []

    def generate(self, image, robot, seed, pointmap=None, T_cam_from_base=None, tool=None):
        from k4d_model.results import GenerationResult

        self.tools.append(tool)
        self.images.append(image.copy())
        self.seeds.append(seed)
        frames = self.clip_shape[0]
        return GenerationResult(np.repeat(image[None], frames, 0),
                                np.repeat(pointmap[None], frames, 0).astype(np.float32),
                                {"contacts": self.contacts.pop(0)})


def test_policy_world_model_regenerates_the_episode_from_its_first_frame(pick_scene, bundle):
    """While the episode fits in one clip, every chunk's clip starts at the first frame with
    every joint so far: the same robot track up to the chunk, the same seed."""
    from k4d_policy.worlds import WorldModelWorld

    model = _RecordingModel([[], []])
    world = WorldModelWorld(pick_scene, bundle, model, dt_s=0.5)
    obs = world.reset()
    first = obs.rgb.copy()
    moved = obs.joints.copy()
    moved[0] += 0.2
    world.step(np.repeat(moved[None], 2, axis=0))
    world.step(np.repeat(obs.joints[None], 2, axis=0))
    first_clip, second_clip = (t.T_base_from_tool for t in model.tools)
    np.testing.assert_array_equal(second_clip[:3], first_clip[:3])  # frames 0..2: the same
    assert not np.allclose(second_clip[3:], first_clip[3:])  # then the second chunk's joints
    assert all(np.array_equal(image, first) for image in model.images)
    assert len(set(model.seeds)) == 1 and not any(t.holding for t in model.tools)
    assert len(world.clip()["rgb"]) == 5 and world.t == 4


@pytest.mark.parametrize("contact, holding", [
    ({"kind": "grasp", "grasp_frame": 2, "release_frame": 5}, True),   # still closed at 4
    ({"kind": "grasp", "grasp_frame": 4, "release_frame": 5}, True),   # closing at 4
    ({"kind": "grasp", "grasp_frame": 1, "release_frame": 4}, False),  # opened again at 4
    ({"kind": "push", "grasp_frame": 1, "release_frame": 5}, False)])
def test_policy_world_model_continues_a_grasp_past_one_clip(contact, holding, pick_scene, bundle):
    """Past one clip the world continues from its last frame; a grasp still held there (the
    clip's metadata "contacts") is passed on as ToolTrack.holding."""
    from k4d_policy.worlds import WorldModelWorld

    model = _RecordingModel([[contact], []])
    world = WorldModelWorld(pick_scene, bundle, model, dt_s=0.5)
    obs = world.reset()
    world.step(np.repeat(obs.joints[None], 6, axis=0))  # 4 frames fill the clip, 2 continue
    assert [t.holding for t in model.tools] == [False, holding]
    assert len(world.clip()["rgb"]) == 7 and world.t == 6


def test_policy_world_model_runs_past_one_clip_on_a_real_model(tiny_model_dir, bundle):
    """The real pipeline through both paths: the first clip from the first frame, then a
    continued clip past it (a horizon longer than the model's 5-frame clip)."""
    from k4d_policy.scenes import scenario
    from k4d_policy.worlds import WorldModel, WorldModelWorld

    model = WorldModel(str(tiny_model_dir))
    world = WorldModelWorld(scenario(7000, 0, "pick", 32, 48), bundle, model, dt_s=0.5)
    obs = world.reset()
    last = world.step(np.repeat(obs.joints[None], 6, axis=0))
    assert world.t == 6 and last.step == 6 and last.rgb.shape == (32, 48, 3)
    clip = world.clip()
    assert clip["rgb"].shape == (7, 32, 48, 3) and clip["joints"].shape[0] == 7
    assert world.judge()["success"] in (True, False, None)
