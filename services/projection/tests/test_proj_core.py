"""The projection stage core: the robot condition, the same with or without a workspace,
and renderers built once per robot."""

import numpy as np
from k4d.camera import Camera
from k4d.robots.descriptions import load_robot
from k4d.robots.fk import forward_kinematics
from k4d_projection.core import RendererCache, robot_condition
from k4d_projection.renderer import CONDITION_OUTPUTS, RenderWorkspace

CAMERA = Camera.look_at([1.3, 0.8, 0.9], [0.0, 0.0, 0.4], width=48, height=32, fovy_deg=60)


def test_robot_condition_is_the_condition_outputs_with_or_without_a_workspace():
    model = load_robot("panda")
    cache = RendererCache(capacity=2)
    renderer = cache.get(model, collision=False)
    assert cache.get(model, collision=False) is renderer
    assert cache.get(model, collision=True) is not renderer
    poses = forward_kinematics(model, np.tile(model.mid_configuration, (2, 1)))
    plain = robot_condition(renderer, poses, CAMERA)
    reused = robot_condition(renderer, poses, CAMERA, workspace=RenderWorkspace())
    assert set(plain.arrays()) == set(CONDITION_OUTPUTS)
    assert plain.mask.shape == (2, 32, 48) and plain.mask.any()
    for name in CONDITION_OUTPUTS:
        assert np.array_equal(plain.arrays()[name], reused.arrays()[name]), name
