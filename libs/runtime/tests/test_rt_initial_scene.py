"""k4d.initial_scene: what the generator takes of a SimulationSpec besides the robot
condition: the initial depth as points, and the camera's pose relative to the robot's base."""

from __future__ import annotations

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.camera_proto import camera_pose_from_proto, camera_to_proto
from k4d.errors import InvalidArgument
from k4d.initial_scene import camera_pose
from kinema4d.v1 import common_pb2, simulator_pb2


def _camera(**extra) -> Camera:
    T = np.eye(4)
    T[:3, 3] = [0.1, -0.2, 1.5]
    return Camera(width=48, height=32, fx=40.0, fy=40.0, cx=23.5, cy=15.5,
                  T_cam_from_world=T, **extra)


def test_camera_pose_is_the_cameras_pose_relative_to_the_robots_base():
    spec = simulator_pb2.SimulationSpec(camera=camera_to_proto(_camera()))
    assert np.allclose(camera_pose(spec), _camera().T_cam_from_world)
    base = np.eye(4)
    base[:3, 3] = [0.0, 0.0, 0.75]  # the robot stands on a table 0.75 m above the world
    spec = simulator_pb2.SimulationSpec(camera=camera_to_proto(_camera(T_world_from_base=base)))
    assert np.allclose(camera_pose(spec), _camera().T_cam_from_world @ base)
    assert camera_pose(simulator_pb2.SimulationSpec()) is None  # no camera: no pose


@pytest.mark.parametrize("values", [[], [0.0] * 15, (2.0 * np.eye(4)).ravel().tolist()])
def test_a_pose_that_is_not_rigid_names_its_field(values):
    with pytest.raises(InvalidArgument) as exc:
        camera_pose_from_proto(common_pb2.Matrix4(values=values), "t_cam_from_base")
    assert exc.value.violations[0].field == "t_cam_from_base"
