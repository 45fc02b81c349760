"""The initial scene as the generator takes it: the optional depth (an RGB-D observation) as
the first frame's points in the camera frame, and the camera's pose relative to the robot's
base. Read the same way by the embedded runner and the generator worker, from
`SimulationSpec.initial_depth` and `SimulationSpec.camera`."""

from __future__ import annotations

import numpy as np
from kinema4d.v1 import simulator_pb2

from k4d.camera_proto import camera_from_proto
from k4d.store import from_tensor_data


def has_initial_depth(spec: simulator_pb2.SimulationSpec) -> bool:
    return spec.HasField("initial_depth") and spec.initial_depth.WhichOneof("kind") is not None


def initial_pointmap(spec: simulator_pb2.SimulationSpec, store=None) -> np.ndarray | None:
    """(H, W, 3) float32 metres, zeros where the depth is 0; None without a depth."""
    if not has_initial_depth(spec):
        return None
    return depth_pointmap(spec, from_tensor_data(spec.initial_depth, store, "spec.initial_depth"))


def camera_pose(spec: simulator_pb2.SimulationSpec) -> np.ndarray | None:
    """(4, 4) T_cam_from_base of the spec's camera: the pose the robot condition is rendered
    with, which a generator whose refiner reads the scene's planes takes; None when the spec
    has no camera (the generator does not need one)."""
    if not spec.HasField("camera"):
        return None
    return camera_from_proto(spec.camera, "spec.camera").T_cam_from_base


def depth_pointmap(spec: simulator_pb2.SimulationSpec, depth: np.ndarray) -> np.ndarray:
    """(H, W) metres in the spec's camera -> (H, W, 3) float32 points (the embedded runner
    passes a depth it read from a file without putting it into the spec)."""
    camera = camera_from_proto(spec.camera, "spec.camera")
    return camera.points_from_depth(np.asarray(depth, np.float32))
