"""The static-world generator: robot composited onto the unchanged scene, clearly labelled."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.errors import InvalidArgument
from k4d_generator.static_world import StaticWorldGenerator, plane_depth

INTRINSICS = (40.0, 40.0, 23.5, 15.5)


def test_gen_static_world_composites_robot_on_unchanged_scene(robot_inputs):
    image, robot = robot_inputs
    result = StaticWorldGenerator()(image, intrinsics=INTRINSICS, **robot)
    mask = robot["robot_mask"]
    assert result.rgb.shape == (5, 32, 48, 3)
    assert np.array_equal(result.rgb[mask], robot["robot_rgb"][mask])
    assert np.array_equal(result.rgb[~mask], np.broadcast_to(image, result.rgb.shape)[~mask])
    assert np.array_equal(result.pointmap[mask], robot["robot_pointmap"][mask])
    depth = plane_depth(robot["robot_pointmap"], mask)
    assert np.allclose(result.pointmap[~mask][:, 2], depth)
    assert depth > robot["robot_pointmap"][..., 2][mask].max()
    # the plane back-projects through the intrinsics: pixel (u=0, v=0) -> x = -cx / fx * z
    assert result.pointmap[0, 0, 0, 0] == pytest.approx(-23.5 / 40.0 * depth)
    assert result.metadata["generator"] == "static-world"
    assert result.metadata["generated"] is False and "Not a model prediction" in \
        result.metadata["note"]


def test_gen_static_world_rejects_bad_inputs(robot_inputs):
    image, robot = robot_inputs
    with pytest.raises(InvalidArgument, match="intrinsics"):
        StaticWorldGenerator()(image, intrinsics=(0.0, 40.0, 1.0, 1.0), **robot)
    with pytest.raises(InvalidArgument) as err:
        StaticWorldGenerator()(image[:10], intrinsics=INTRINSICS, **robot)
    assert err.value.violations[0].field == "robot_rgb"


def test_gen_static_world_recovers_intrinsics_from_robot_pointmap(robot_inputs):
    from k4d_generator.static_world import intrinsics_from_pointmap

    _, robot = robot_inputs  # the synthetic robot is projected with (40, 40, 23.5, 15.5)
    got = intrinsics_from_pointmap(robot["robot_pointmap"], robot["robot_mask"])
    assert np.allclose(got, INTRINSICS, atol=1e-3)
    image, _ = robot_inputs
    result = StaticWorldGenerator()(image, **robot)
    assert np.allclose(result.metadata["intrinsics"], INTRINSICS, atol=1e-3)


def test_gen_intrinsics_fall_back_to_a_centred_60_degree_camera_without_robot_points():
    from k4d_generator.static_world import intrinsics_from_pointmap

    mask = np.zeros((2, 32, 48), bool)
    fx, fy, cx, cy = intrinsics_from_pointmap(np.zeros((2, 32, 48, 3), np.float32), mask)
    assert fx == fy == pytest.approx(24.0 / np.tan(np.radians(30.0)))
    assert (cx, cy) == (23.5, 15.5)


def test_static_world_keeps_an_observed_initial_pointmap():
    import numpy as np
    from k4d_generator.static_world import StaticWorldGenerator

    T, H, W = 3, 8, 10
    mask = np.zeros((T, H, W), bool)
    mask[:, 2:4, 2:4] = True
    robot_points = np.where(mask[..., None], np.float32(0.5), np.zeros((T, H, W, 3), np.float32))
    initial = np.zeros((H, W, 3), np.float32)
    initial[:, :5, 2] = 2.0  # known depth on the left half only
    out = StaticWorldGenerator()(np.zeros((H, W, 3), np.uint8), np.zeros((T, H, W, 3), np.uint8),
                                 robot_points, mask, initial_pointmap=initial)
    assert np.all(out.pointmap[:, 5:, 5:, 2] == out.pointmap[0, 5, 5, 2])   # the plane
    assert np.all(out.pointmap[:, 6, :2, 2] == 2.0)                        # observed
    assert np.all(out.pointmap[mask] == 0.5)                               # the robot
    assert out.metadata["initial_pointmap"] is True
